// driver_device.cpp - see driver_device.h. Why events and not a synchronization: cudaFree
// promises that no earlier work still uses the memory once it returns (CUDA Runtime API,
// cudaFree: "may perform implicit synchronization"); a cache that hands the block out again
// at once must keep that promise itself. What the events cover: context_fence.h.
#include "driver_device.h"

#include <algorithm>

#include "log.h"
#include "scoped_context.h"

namespace luma::shim {

core::Reservation DriverDevice::reserve(std::size_t bytes) noexcept {
  ScopedContext scope(driver_, ctx_);
  if (!scope.ok()) return core::Reservation::failed(scope.error());
  CUdeviceptr p = 0;
  CUresult r = CUDA_SUCCESS;
  if (captures_.any() && driver_.thread_exchange_capture_mode != nullptr) {
    // luma's own reservation, made while the program captures a stream: in relaxed mode,
    // which no capture forbids (PyTorch does the same), then the thread's mode back.
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool swapped = driver_.thread_exchange_capture_mode(&mode) == CUDA_SUCCESS;
    r = driver_.mem_alloc(&p, bytes);
    if (swapped) driver_.thread_exchange_capture_mode(&mode);
  } else {
    r = driver_.mem_alloc(&p, bytes);
  }
  if (r == CUDA_SUCCESS) {
    // Widen may_hold's span before the segment can hold a block (the allocator hands none
    // out before this returns).
    const auto base = static_cast<std::uintptr_t>(p);
    std::uintptr_t lo = lo_.load(std::memory_order_relaxed);
    while (base < lo && !lo_.compare_exchange_weak(lo, base, std::memory_order_relaxed)) {
    }
    std::uintptr_t hi = hi_.load(std::memory_order_relaxed);
    while (base + bytes > hi && !hi_.compare_exchange_weak(hi, base + bytes, std::memory_order_relaxed)) {
    }
    return {reinterpret_cast<void*>(base), 0};
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return core::Reservation::out_of_memory();
  // Anything else (a lost device, a sticky error) goes back to the program unchanged:
  // releasing the cache and retrying cannot mend it.
  ++driver_errors_;
  log().warn("cuMemAlloc_v2({} bytes) for a new segment failed with error {}", bytes, static_cast<int>(r));
  return core::Reservation::failed(static_cast<int>(r));
}

bool DriverDevice::keep_exported(const void* base) noexcept {
  std::lock_guard lock(exported_mutex_);
  if (std::find(exported_.begin(), exported_.end(), base) != exported_.end()) return false;
  try {
    exported_.push_back(base);
  } catch (...) {
    return false;
  }
  return true;
}

bool DriverDevice::exported(const void* base) noexcept {
  std::lock_guard lock(exported_mutex_);
  return std::find(exported_.begin(), exported_.end(), base) != exported_.end();
}

bool DriverDevice::release(void* base, std::size_t bytes) noexcept {
  // A segment a peer may have mapped stays; so does every segment while a capture is
  // underway (cuMemFree synchronizes, which a capture forbids). The allocator keeps it.
  if (exported(base) || capture_underway()) return false;
  ScopedContext scope(driver_, ctx_);
  CUresult r = driver_.mem_free(static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(base)));
  if (r != CUDA_SUCCESS) {
    ++driver_errors_;
    log().warn("cuMemFree_v2 of a segment ({} bytes) failed with error {}; keeping it", bytes, r);
    return false;
  }
  return true;
}

// The fence slots (fence_slots.h) do the work: what is left here is the policy. A token is
// the pool's token, so that a poll on the hot path is the pool's inline poll.
core::Fence DriverDevice::record_fence() noexcept {
  if (policy_ == core::FreeSync::none) return core::kNoFence;
  return slots_.fence();
}

bool DriverDevice::fence_done(core::Fence fence) noexcept { return slots_.poll(fence); }

bool DriverDevice::fence_wait(core::Fence fence) noexcept { return slots_.wait(fence); }

void DriverDevice::fence_release(core::Fence fence) noexcept { slots_.release(fence); }

void DriverDevice::forget_events() noexcept { slots_.forget_events(); }

}  // namespace luma::shim
