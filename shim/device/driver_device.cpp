// driver_device.cpp - see driver_device.h. Why events and not a synchronization: cudaFree
// promises that no earlier work still uses the memory once it returns (CUDA Runtime API,
// cudaFree: "may perform implicit synchronization"); a cache that hands the block out again
// at once must keep that promise itself. What the events cover: context_fence.h.
#include "device/driver_device.h"

#include <algorithm>
#include <iterator>

#include "config/log.h"
#include "driver/scoped_context.h"

namespace luma::shim {
namespace {

// luma's own driver calls that allocate, map or free, made while the program captures a
// stream (anywhere in the process): in relaxed mode, which no capture forbids (PyTorch
// does the same around cudaMalloc), then the thread's mode back. Outside a capture:
// nothing. The captures' gate is held throughout (capture_registry.h): a capture cannot
// begin between the check and the call.
class RelaxedWhileCapturing {
 public:
  RelaxedWhileCapturing(const RealDriver& d, const CaptureRegistry& captures) noexcept
      : held_(captures.hold()), d_(d) {
    if (captures.any() && d_.thread_exchange_capture_mode != nullptr)
      swapped_ = d_.thread_exchange_capture_mode(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedWhileCapturing() {
    if (swapped_) d_.thread_exchange_capture_mode(&mode_);
  }
  RelaxedWhileCapturing(const RelaxedWhileCapturing&) = delete;
  RelaxedWhileCapturing& operator=(const RelaxedWhileCapturing&) = delete;

 private:
  CaptureRegistry::Hold held_;
  const RealDriver& d_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool swapped_ = false;
};

CUdeviceptr as_dptr(std::uintptr_t p) { return static_cast<CUdeviceptr>(p); }

}  // namespace

void DriverDevice::widen_span(std::uintptr_t base, std::size_t bytes) noexcept {
  std::uintptr_t lo = lo_.load(std::memory_order_relaxed);
  while (base < lo && !lo_.compare_exchange_weak(lo, base, std::memory_order_relaxed)) {
  }
  std::uintptr_t hi = hi_.load(std::memory_order_relaxed);
  while (base + bytes > hi && !hi_.compare_exchange_weak(hi, base + bytes, std::memory_order_relaxed)) {
  }
}

core::Reservation DriverDevice::reserve(std::size_t bytes) noexcept {
  ScopedContext scope(driver_, ctx_);
  if (!scope.ok()) return core::Reservation::failed(scope.error());
  CUdeviceptr p = 0;
  CUresult r = CUDA_SUCCESS;
  {
    RelaxedWhileCapturing relaxed(driver_, captures_);
    r = driver_.mem_alloc(&p, bytes);
  }
  if (r == CUDA_SUCCESS) {
    // Widen may_hold's span before the segment can hold a block (the allocator hands none
    // out before this returns).
    const auto base = static_cast<std::uintptr_t>(p);
    widen_span(base, bytes);
    return {reinterpret_cast<void*>(base), 0};
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return core::Reservation::out_of_memory();
  // Anything else (a lost device, a sticky error) goes back to the program unchanged:
  // releasing the cache and retrying cannot mend it.
  ++driver_errors_;
  log_noexcept(LogLevel::warn, "cuMemAlloc_v2({} bytes) for a new segment failed with error {}", bytes, static_cast<int>(r));
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
  const auto held = captures_.hold();  // the check and the free see the same captures
  if (exported(base) || capture_underway()) return false;
  // A capture in another context forbids a global-mode thread's cuMemFree too.
  RelaxedWhileCapturing relaxed(driver_, captures_);
  ScopedContext scope(driver_, ctx_);
  CUresult r = driver_.mem_free(static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(base)));
  if (r != CUDA_SUCCESS) {
    ++driver_errors_;
    log_noexcept(LogLevel::warn, "cuMemFree_v2 of a segment ({} bytes) failed with error {}; keeping it", bytes, r);
    return false;
  }
  return true;
}

// ---- virtual memory (expandable segments) ---------------------------------------------

core::Device::VirtualMemory DriverDevice::virtual_memory() const noexcept {
  if (!vm_asked_) {
    vm_ = ask_virtual_memory();
    vm_asked_ = true;
  }
  return vm_;
}

core::Device::VirtualMemory DriverDevice::ask_virtual_memory() const noexcept {
  auto none = [this](const char* why, int code) {
    log_noexcept(LogLevel::warn,
                 "expandable_segments: context {} has no virtual memory to use ({}, error {}); "
                 "its allocations get ordinary segments",
                 static_cast<void*>(ctx_), why, code);
    return VirtualMemory{};
  };
  const RealDriver& d = driver_;
  if (d.mem_create == nullptr || d.mem_release == nullptr || d.mem_map == nullptr ||
      d.mem_unmap == nullptr || d.mem_address_reserve == nullptr || d.mem_address_free == nullptr ||
      d.mem_set_access == nullptr || d.mem_get_allocation_granularity == nullptr ||
      d.device_get_attribute == nullptr || d.ctx_get_device == nullptr || d.device_total_mem == nullptr)
    return none("the driver lacks a virtual memory call", 0);
  ScopedContext scope(d, ctx_);
  if (!scope.ok()) return none("the context could not be made current", scope.error());
  CUdevice dev = -1;
  if (CUresult r = d.ctx_get_device(&dev); r != CUDA_SUCCESS) return none("cuCtxGetDevice failed", r);
  int supported = 0;
  if (CUresult r = d.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
      r != CUDA_SUCCESS || supported == 0)
    return none("the device does not support virtual memory management", r);
  // GPUDirect RDMA (NCCL, UCX over InfiniBand) reaches cuMemCreate memory only when it
  // asked for it, where the device allows that (cuda.h, CUmemAllocationProp::allocFlags).
  int rdma = 0;
  gpu_direct_rdma_ = d.device_get_attribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
                                            dev) == CUDA_SUCCESS &&
                     rdma != 0;
  device_ = dev;
  const CUmemAllocationProp prop = page_prop();
  std::size_t page = 0;
  if (CUresult r = d.mem_get_allocation_granularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS)
    return none("cuMemGetAllocationGranularity failed", r);
  if (page < 512 || (page & (page - 1)) != 0) return none("the granularity is not a power of two", 0);
  std::size_t total = 0;
  if (CUresult r = d.device_total_mem(&total, dev); r != CUDA_SUCCESS || total == 0)
    return none("cuDeviceTotalMem failed", r);
  try {
    // Read-write for the device, and for every device that can reach it as a peer: memory
    // from cuMemAlloc is open to a peer once the program enabled peer access, virtual
    // memory only to the devices cuMemSetAccess names (docs/cuda-facts.md).
    access_.clear();
    CUmemAccessDesc own{};
    own.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    own.location.id = dev;
    own.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access_.push_back(own);
    int count = 0;
    if (d.device_can_access_peer != nullptr && d.device_get_count != nullptr &&
        d.device_get_count(&count) == CUDA_SUCCESS) {
      for (CUdevice other = 0; other < count; ++other) {
        int can = 0;
        if (other == dev || d.device_can_access_peer(&can, other, dev) != CUDA_SUCCESS || can == 0) continue;
        CUmemAccessDesc peer = own;
        peer.location.id = other;
        access_.push_back(peer);
      }
    }
  } catch (...) {
    return none("no host memory", 0);
  }
  // The device's memory and an eighth more, so that pages unmapped in the middle can be
  // mapped again at the end (PyTorch reserves the same).
  const std::size_t want = total + total / 8;
  VirtualMemory vm;
  vm.page = page;
  vm.address_space = (want + page - 1) / page * page;
  log_noexcept(LogLevel::info,
               "expandable_segments: device {}: pages of {} bytes, {} bytes of address space per "
               "pool, access for {} peer device(s)",
               dev, page, vm.address_space, access_.size() - 1);
  return vm;
}

CUmemAllocationProp DriverDevice::page_prop() const noexcept {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  prop.allocFlags.gpuDirectRDMACapable = gpu_direct_rdma_ ? 1 : 0;
  return prop;
}

void DriverDevice::vm_error(const char* call, std::size_t bytes, CUresult r) noexcept {
  ++driver_errors_;
  log_noexcept(LogLevel::warn, "{} for an expandable segment ({} bytes) failed with error {}", call,
               bytes, static_cast<int>(r));
}

core::Reservation DriverDevice::reserve_address(std::size_t bytes) noexcept {
  const std::size_t page = virtual_memory().page;
  if (page == 0 || bytes == 0 || bytes % page != 0) return core::Reservation::failed(CUDA_ERROR_INVALID_VALUE);
  try {
    ranges_.reserve(ranges_.size() + 1);  // keeping the range after the driver's yes cannot fail
  } catch (...) {
    return core::Reservation::out_of_memory();
  }
  RelaxedWhileCapturing relaxed(driver_, captures_);
  ScopedContext scope(driver_, ctx_);
  if (!scope.ok()) return core::Reservation::failed(scope.error());
  CUdeviceptr p = 0;
  const CUresult r = driver_.mem_address_reserve(&p, bytes, page, 0, 0);
  if (r == CUDA_SUCCESS) {
    // The whole range lies in may_hold's span before any block of it exists: a free of a
    // block outside the span would go to the driver.
    const auto base = static_cast<std::uintptr_t>(p);
    widen_span(base, bytes);
    ranges_.emplace_back(base, bytes);
    if (range_observer_ != nullptr) range_observer_->range_reserved(base, bytes);
    return {reinterpret_cast<void*>(base), 0};
  }
  // Either way the pool grows by ordinary segments from here on (the allocator does not
  // ask again): say so once.
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    log_noexcept(LogLevel::warn,
                 "expandable_segments: no address space for {} bytes (cuMemAddressReserve: out of "
                 "memory); this pool gets ordinary segments",
                 bytes);
    return core::Reservation::out_of_memory();
  }
  vm_error("cuMemAddressReserve", bytes, r);
  return core::Reservation::failed(static_cast<int>(r));
}

bool DriverDevice::release_address(void* base, std::size_t bytes) noexcept {
  const auto held = captures_.hold();
  if (capture_underway()) return false;
  const auto b = reinterpret_cast<std::uintptr_t>(base);
  const auto range = std::find(ranges_.begin(), ranges_.end(), std::pair{b, bytes});
  const auto mapped = mapped_.lower_bound(b);
  if (range == ranges_.end() || (mapped != mapped_.end() && mapped->first < b + bytes)) {
    log_noexcept(LogLevel::err, "internal error: release_address({}, {}) is no reserved range without mappings",
                 base, bytes);
    return false;
  }
  RelaxedWhileCapturing relaxed(driver_, captures_);
  ScopedContext scope(driver_, ctx_);
  const CUresult r = driver_.mem_address_free(as_dptr(b), bytes);
  if (r != CUDA_SUCCESS) {
    vm_error("cuMemAddressFree", bytes, r);
    return false;
  }
  ranges_.erase(range);
  if (range_observer_ != nullptr) range_observer_->range_released(b);
  return true;
}

core::Device::Memory DriverDevice::create_memory(std::size_t bytes) noexcept {
  const std::size_t page = virtual_memory().page;
  if (page == 0 || bytes == 0 || bytes % page != 0) {
    log_noexcept(LogLevel::err, "internal error: create_memory({}) is not whole pages", bytes);
    return {0, CUDA_ERROR_INVALID_VALUE};
  }
  try {
    memories_.reserve(memories_.size() + 1);  // keeping the handle after the driver's yes cannot fail
  } catch (...) {
    return {0, 0};
  }
  RelaxedWhileCapturing relaxed(driver_, captures_);
  ScopedContext scope(driver_, ctx_);
  if (!scope.ok()) return {0, scope.error()};
  const CUmemAllocationProp prop = page_prop();
  CUmemGenericAllocationHandle h = 0;
  const CUresult r = driver_.mem_create(&h, bytes, &prop, 0);
  if (r == CUDA_SUCCESS && h != 0) {
    memories_.emplace(h, bytes);
    return {h, 0};
  }
  if (r == CUDA_SUCCESS) driver_.mem_release(h);  // (a zero handle cannot name the memory)
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return {0, 0};
  vm_error("cuMemCreate", bytes, r);
  return {0, r == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : static_cast<int>(r)};
}

bool DriverDevice::release_memory(std::uint64_t memory, std::size_t bytes) noexcept {
  const auto held = captures_.hold();
  if (capture_underway()) return false;
  const auto it = memories_.find(memory);
  const bool mapped = std::any_of(mapped_.begin(), mapped_.end(), [&](const auto& m) { return m.second.memory == memory; });
  if (it == memories_.end() || it->second != bytes || mapped) {
    log_noexcept(LogLevel::err, "internal error: release_memory({}, {}) is no unmapped memory", memory, bytes);
    return false;
  }
  RelaxedWhileCapturing relaxed(driver_, captures_);
  ScopedContext scope(driver_, ctx_);
  if (CUresult r = driver_.mem_release(memory); r != CUDA_SUCCESS) {
    vm_error("cuMemRelease", bytes, r);
    return false;
  }
  memories_.erase(it);
  return true;
}

int DriverDevice::map_memory(void* addr, std::uint64_t memory, std::size_t offset, std::size_t bytes) noexcept {
  const std::size_t page = virtual_memory().page;
  const auto base = reinterpret_cast<std::uintptr_t>(addr);
  const auto it = memories_.find(memory);
  const auto next = mapped_.lower_bound(base);
  const bool overlaps = (next != mapped_.end() && next->first < base + bytes) ||
                        (next != mapped_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > base);
  // cuMemMap maps a memory from its start only (cuda.h of CUDA 13.0: "offset ... currently
  // must be zero"): a piece further in cannot be mapped on its own.
  if (page == 0 || bytes == 0 || bytes % page != 0 || base % page != 0 || offset != 0 || it == memories_.end() ||
      bytes > it->second || overlaps) {
    log_noexcept(LogLevel::err, "internal error: map_memory({}, memory {}, {}, {}) cannot be mapped",
                 addr, memory, offset, bytes);
    return CUDA_ERROR_INVALID_VALUE;
  }
  try {
    const auto slot = mapped_.emplace(base, Mapping{bytes, memory}).first;
    RelaxedWhileCapturing relaxed(driver_, captures_);
    ScopedContext scope(driver_, ctx_);
    CUresult r = scope.ok() ? driver_.mem_map(as_dptr(base), bytes, 0, memory, 0) : static_cast<CUresult>(scope.error());
    if (r == CUDA_SUCCESS) {
      // Read-write for the device and its peers (virtual_memory()), in one call.
      r = driver_.mem_set_access(as_dptr(base), bytes, access_.data(), access_.size());
      if (r == CUDA_SUCCESS) return 0;
      vm_error("cuMemSetAccess", bytes, r);
      driver_.mem_unmap(as_dptr(base), bytes);
    } else if (scope.ok()) {
      vm_error("cuMemMap", bytes, r);
    }
    mapped_.erase(slot);
    return r;
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;  // no host memory for the record: nothing was mapped
  }
}

bool DriverDevice::unmap_memory(void* addr, std::size_t bytes) noexcept {
  // While this context captures, the memory stays mapped (as release() keeps segments):
  // cuda.h marks cuMemUnmap synchronous, and a graph being captured may name these pages.
  const auto held = captures_.hold();
  if (capture_underway()) return false;
  const auto base = reinterpret_cast<std::uintptr_t>(addr);
  const auto it = mapped_.find(base);
  if (it == mapped_.end() || it->second.bytes != bytes) {
    log_noexcept(LogLevel::err, "internal error: unmap_memory({}, {}) is no earlier mapping", addr, bytes);
    return false;
  }
  RelaxedWhileCapturing relaxed(driver_, captures_);
  ScopedContext scope(driver_, ctx_);
  // One call: the whole mapping, as cuMemUnmap wants it.
  if (CUresult r = driver_.mem_unmap(as_dptr(base), bytes); r != CUDA_SUCCESS) {
    vm_error("cuMemUnmap", bytes, r);
    return false;
  }
  mapped_.erase(it);
  return true;
}

void DriverDevice::give_back_virtual_memory() noexcept {
  if (mapped_.empty() && memories_.empty() && ranges_.empty()) return;
  // No context to make current (it is destroyed): these calls name addresses and handles
  // only. A driver that freed the memory with the context answers errors, counted here.
  RelaxedWhileCapturing relaxed(driver_, captures_);
  std::size_t refused = 0;
  for (const auto& [a, m] : mapped_) refused += driver_.mem_unmap(as_dptr(a), m.bytes) != CUDA_SUCCESS;
  for (const auto& [h, bytes] : memories_) refused += driver_.mem_release(h) != CUDA_SUCCESS;
  for (const auto& [b, bytes] : ranges_) {
    refused += driver_.mem_address_free(as_dptr(b), bytes) != CUDA_SUCCESS;
    if (range_observer_ != nullptr) range_observer_->range_released(b);
  }
  log_noexcept(LogLevel::info,
               "context {} was destroyed: gave back {} mappings, {} memories and {} address ranges "
               "of expandable segments ({} calls refused)",
               static_cast<void*>(ctx_), mapped_.size(), memories_.size(), ranges_.size(), refused);
  mapped_.clear();
  memories_.clear();
  ranges_.clear();
}

// The fence slots (fence_slots.h) do the work: what is left here is the policy. A token is
// the pool's token, so that a poll on the hot path is the pool's inline poll.
core::Fence DriverDevice::record_fence() noexcept {
  if (policy_ == core::FreeSync::none) return core::kNoFence;
  if (order_ != nullptr && policy_ == core::FreeSync::event && order_->legacy()) {
    // The order's end waits for this (its synchronization then covers the barrier's work),
    // and a capture cannot begin between the checks and the barrier.
    const auto in_order = order_->hold();
    const auto held = captures_.hold();
    if (order_->legacy() && !capture_underway() && legacy_barrier()) return core::kNoFence;
  }
  return slots_.fence();
}

bool DriverDevice::legacy_barrier() noexcept {
  if (driver_.stream_wait_event == nullptr) return false;
  ScopedContext scope(driver_, ctx_);
  if (!scope.ok()) return false;
  if (barrier_ == nullptr) {
    CUevent e = nullptr;
    if (driver_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return false;
    if (driver_.event_record(e, LUMA_CU_STREAM_LEGACY) != CUDA_SUCCESS) {
      driver_.event_destroy(e);
      return false;
    }
    barrier_ = e;
  }
  // "When an action is taken in the legacy stream such as a kernel launch or
  // cudaStreamWaitEvent(), the legacy stream first waits on all blocking streams, the
  // action is queued in the legacy stream, and then all blocking streams wait on the
  // legacy stream" (CUDA Runtime API, "Stream synchronization behavior").
  return driver_.stream_wait_event(LUMA_CU_STREAM_LEGACY, barrier_, 0) == CUDA_SUCCESS;
}

bool DriverDevice::fence_done(core::Fence fence) noexcept { return slots_.poll(fence); }

bool DriverDevice::fence_wait(core::Fence fence) noexcept { return slots_.wait(fence); }

void DriverDevice::fence_release(core::Fence fence) noexcept { slots_.release(fence); }

void DriverDevice::forget_events() noexcept {
  slots_.forget_events();
  barrier_ = nullptr;  // gone with the context
}

}  // namespace luma::shim
