// driver_device.h - core::Device over the real driver, for one context: segments are real
// cuMemAlloc_v2 allocations made in that context, fences are pooled events that cover all
// the context's work (free_sync:event; the pool: fence_slots.h; the events: context_fence.h,
// one cuCtxRecordEvent, or stream by stream on older drivers), or nothing (free_sync:none),
// or a cuCtxSynchronize at free time (free_sync:device). docs/architecture.md, "Fences with
// many streams", has the design.
//
// Called only with the owning allocator's lock held (core/base/device.h), so it keeps its pools
// without a lock of its own. Must never call luma's hooks, never throw, and never report a
// fence as done before the driver says its events completed.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "settings/config.h"
#include "base/device.h"
#include "capture_registry.h"
#include "context_fence.h"
#include "fence_slots.h"
#include "real_driver.h"
#include "stream_registry.h"

namespace luma::shim {

class DriverDevice final : public core::Device {
 public:
  DriverDevice(const RealDriver& driver, CUcontext ctx, core::FreeSync policy,
               StreamRegistry& streams, const CaptureRegistry& captures) noexcept
      : driver_(driver), ctx_(ctx), policy_(policy), streams_(streams), captures_(captures) {}
  ~DriverDevice() override = default;  // events are left to the driver: see process exit

  core::Reservation reserve(std::size_t bytes) noexcept override;
  // Whether p lies in the span of every segment this device ever reserved (it never
  // shrinks): a pointer outside it is no block of this context's, found without the
  // allocator's lock. Contexts of different devices have disjoint spans (unified
  // addressing gives each device its own range), so a free asks one allocator.
  bool may_hold(const void* p) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= lo_.load(std::memory_order_relaxed) && a < hi_.load(std::memory_order_relaxed);
  }
  bool release(void* base, std::size_t bytes) noexcept override;

  core::Fence record_fence() noexcept override;
  // free_sync:event batches frees into epochs closed by one fence (recording it after the
  // frees is conservative, so still safe); none needs no fence; device keeps one
  // synchronization per free, its documented meaning.
  core::FenceMode fence_mode() const noexcept override {
    switch (policy_) {
      case core::FreeSync::none: return core::FenceMode::none;
      case core::FreeSync::event: return core::FenceMode::batched;
      case core::FreeSync::device: return core::FenceMode::per_free;
    }
    return core::FenceMode::per_free;
  }
  bool fence_done(core::Fence fence) noexcept override;
  // false while a capture is underway in the context (a wait could invalidate it).
  bool fence_wait(core::Fence fence) noexcept override;
  void fence_release(core::Fence fence) noexcept override;
  // A fence costs what recording it took (with many streams: a query per stream, or what
  // the driver's cuCtxRecordEvent makes of them): epochs grow with it, so that the fence
  // costs each free little (kFenceNsPerBlock).
  std::size_t fence_batch_blocks() const noexcept override {
    return static_cast<std::size_t>(cover_.last_ns() / kFenceNsPerBlock);
  }

  CUcontext context() const noexcept { return ctx_; }
  // The context is destroyed and its events with it: forget them without a driver call.
  // After the allocator's drop_device_memory() (which gives every fence token back).
  void forget_events() noexcept;
  // cuIpcGetMemHandle exported the segment at `base`: a peer may map it from now on, so it
  // is never released to the driver. True the first time. Any thread, any time.
  bool keep_exported(const void* base) noexcept;
  // Driver errors: reserve's other than out-of-memory, release's, and fences that an
  // event call or host memory failed and a synchronization made safe (for the log and tests).
  std::uint64_t driver_errors() const noexcept { return driver_errors_; }

 private:
  // Blocks per epoch for each 40 ns the last fence took to record: the fence then costs
  // each free at most 40 ns, about half an alloc+free pair through luma with no stream.
  // A fence of one event on an idle GPU (about 1 us) is below the default 64 blocks, which
  // then stays; 16 idle streams fenced one by one (about 6 us on the stand-in's costs)
  // give 150, as the 8 blocks per driver call of the first design did (docs/architecture.md).
  static constexpr std::uint64_t kFenceNsPerBlock = 40;

  // Whether a capture is underway in this context: luma then records, queries and
  // synchronizes nothing there, and releases no segment.
  bool capture_underway() const noexcept { return slots_.capturing(); }
  bool exported(const void* base) noexcept;

  const RealDriver& driver_;
  CUcontext ctx_;
  core::FreeSync policy_;
  StreamRegistry& streams_;
  const CaptureRegistry& captures_;
  // may_hold's span (lo_ > hi_ while nothing was reserved).
  std::atomic<std::uintptr_t> lo_{~std::uintptr_t{0}};
  std::atomic<std::uintptr_t> hi_{0};
  std::mutex exported_mutex_;             // keep_exported comes from any thread
  std::vector<const void*> exported_;     // segment bases a peer may have mapped
  ContextFence cover_;  // fence_batch_blocks() reads what the last record took
  std::uint64_t driver_errors_ = 0;
  // Fence tokens are this pool's; free_sync:device records no event (a fence is only taken
  // in a capture, and completed by a synchronization after it).
  FenceSlots slots_{driver_, ctx_, streams_, captures_, cover_,
                    policy_ == core::FreeSync::event, driver_errors_};
};

}  // namespace luma::shim
