// limited_device.cpp - the budget check in front of a device (see limited_device.h).
#include "limits/limited_device.h"

namespace luma::core {

Reservation LimitedDevice::reserve(std::size_t bytes) noexcept {
  // Taken first, so two contexts of one device (or two processes of a group) can never
  // both reserve past the limit; given back if the device refuses after all.
  if (!budget_.take(bytes)) {
    refusals_.fetch_add(1, std::memory_order_relaxed);
    return Reservation::out_of_memory();
  }
  Reservation r = inner_.reserve(bytes);
  if (r.base == nullptr) {
    budget_.give_back(bytes);
    return r;
  }
  reserved_.fetch_add(bytes, std::memory_order_acq_rel);
  return r;
}

bool LimitedDevice::release(void* base, std::size_t bytes) noexcept {
  if (!inner_.release(base, bytes)) return false;  // still held: the budget keeps it
  reserved_.fetch_sub(bytes, std::memory_order_acq_rel);
  budget_.give_back(bytes);
  return true;
}

Device::Memory LimitedDevice::create_memory(std::size_t bytes) noexcept {
  if (!budget_.take(bytes)) {
    refusals_.fetch_add(1, std::memory_order_relaxed);
    return {0, 0};
  }
  const Memory m = inner_.create_memory(bytes);
  if (m.handle == 0) {
    budget_.give_back(bytes);
    return m;
  }
  reserved_.fetch_add(bytes, std::memory_order_acq_rel);
  return m;
}

bool LimitedDevice::release_memory(std::uint64_t handle, std::size_t bytes) noexcept {
  if (!inner_.release_memory(handle, bytes)) return false;
  reserved_.fetch_sub(bytes, std::memory_order_acq_rel);
  budget_.give_back(bytes);
  return true;
}

std::size_t LimitedDevice::forget_reserved() noexcept {
  const std::size_t held = reserved_.exchange(0, std::memory_order_acq_rel);
  if (held != 0) budget_.give_back(held);
  return held;
}

}  // namespace luma::core
