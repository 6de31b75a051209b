// driver_device.cpp - see driver_device.h. Why events and not a synchronization: cudaFree
// promises that no earlier work still uses the memory once it returns (CUDA Runtime API,
// cudaFree: "may perform implicit synchronization"); a cache that hands the block out again
// at once must keep that promise itself. What the events cover: context_fence.h.
#include "driver_device.h"

#include <algorithm>
#include <new>

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

void DriverDevice::synchronize() noexcept {
  if (capture_underway()) return;  // refused in a capture: callers defer instead
  ScopedContext scope(driver_, ctx_);
  if (scope.ok()) driver_.ctx_synchronize();
}

CUevent DriverDevice::take_event() noexcept {
  if (!spare_events_.empty()) {
    CUevent e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  if (driver_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  return e;
}

DriverDevice::FenceSlot* DriverDevice::slot(core::Fence fence) noexcept {
  if (fence == core::kNoFence || fence > slots_.size()) return nullptr;
  return &slots_[fence - 1];
}

ContextFence::Outcome DriverDevice::record_events(FenceSlot& s) noexcept {
  const ContextFence::Outcome outcome = cover_.record(
      driver_, ctx_, streams_, s.events, [this] { return take_event(); },
      [this](CUevent e) {
        try {
          spare_events_.push_back(e);
        } catch (...) {
          driver_.event_destroy(e);
        }
      });
  s.done = 0;
  fence_ns_ = cover_.last_ns();
  return outcome;
}

core::Fence DriverDevice::record_fence() noexcept {
  if (policy_ == core::FreeSync::none) return core::kNoFence;
  const bool deferred = capture_underway();
  if (policy_ == core::FreeSync::device && !deferred) {
    synchronize();
    return core::kNoFence;
  }
  ScopedContext scope(driver_, ctx_);
  if (!scope.ok()) return core::kNoFence;  // the context is gone, and its work with it
  std::uint32_t index = 0;
  try {
    if (!free_slots_.empty()) {
      index = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slots_.emplace_back();
      index = static_cast<std::uint32_t>(slots_.size() - 1);
    }
  } catch (...) {
    // No host memory for a slot: make the memory safe by waiting for all of it (or, in a
    // capture, by keeping it out of reuse as if forever: a fence never done).
    ++driver_errors_;
    if (deferred) return core::kNoFence;  // cannot happen without memory; see below
    driver_.ctx_synchronize();
    return core::kNoFence;
  }
  FenceSlot& s = slots_[index];
  s.deferred = deferred;
  if (deferred) return index + 1;
  switch (record_events(s)) {
    case ContextFence::Outcome::recorded:
      return index + 1;
    case ContextFence::Outcome::capture_underway:
      // A capture luma did not see (cuStreamBeginCaptureToGraph): recorded after it.
      s.deferred = true;
      return index + 1;
    case ContextFence::Outcome::failed:
      break;
  }
  // Could not cover every stream: make the memory safe by waiting for all of it.
  fence_release(index + 1);
  ++driver_errors_;
  driver_.ctx_synchronize();
  return core::kNoFence;
}

bool DriverDevice::fence_done(core::Fence fence) noexcept {
  FenceSlot* s = slot(fence);
  if (s == nullptr) return true;
  // In a capture nothing is queried: an event query is among the calls a capture forbids.
  if (capture_underway()) return false;
  if (s->deferred) {
    // The capture(s) ended: the fence is recorded now, after them, and covers all the work
    // issued before its frees (and the capture's own launches since).
    ScopedContext scope(driver_, ctx_);
    if (!scope.ok()) {
      s->deferred = false;
      return true;  // the context is gone, and its work with it
    }
    const auto outcome = policy_ == core::FreeSync::device ? ContextFence::Outcome::failed
                                                           : record_events(*s);
    if (outcome == ContextFence::Outcome::capture_underway) return false;  // still deferred
    s->deferred = false;
    if (outcome == ContextFence::Outcome::failed) {
      synchronize();
      return true;
    }
  }
  // Stops at the first event not done, and starts there next time: the events before it
  // are not asked again (with many busy streams a poll would otherwise ask them all).
  for (; s->done < s->events.size(); ++s->done) {
    CUresult r = driver_.event_query(s->events[s->done]);
    if (r == CUDA_ERROR_NOT_READY) return false;
    if (r != CUDA_SUCCESS) {
      // The driver lost the event (context torn down?): wait for everything instead.
      synchronize();
      return true;
    }
  }
  return true;
}

bool DriverDevice::fence_wait(core::Fence fence) noexcept {
  FenceSlot* s = slot(fence);
  if (s == nullptr) return true;
  if (capture_underway()) return false;
  if (s->deferred) {
    if (fence_done(fence)) return true;  // records it now
    if (s->deferred) return false;       // the driver still reports a capture: cannot wait
  }
  for (; s->done < s->events.size(); ++s->done) {
    if (driver_.event_synchronize(s->events[s->done]) != CUDA_SUCCESS) {
      synchronize();
      return true;
    }
  }
  return true;
}

void DriverDevice::forget_events() noexcept {
  for (FenceSlot& s : slots_) {
    s.events.clear();
    s.done = 0;
  }
  spare_events_.clear();
}

void DriverDevice::fence_release(core::Fence fence) noexcept {
  FenceSlot* s = slot(fence);
  if (s == nullptr) return;
  try {
    for (CUevent e : s->events) spare_events_.push_back(e);
    s->events.clear();
    s->done = 0;
    s->deferred = false;
    free_slots_.push_back(static_cast<std::uint32_t>(fence - 1));
  } catch (...) {
    for (CUevent e : s->events) driver_.event_destroy(e);
    s->events.clear();
  }
}

}  // namespace luma::shim
