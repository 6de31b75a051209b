// host_cache_fences.h - the fences of the pinned host cache (core/host_cache/): a freed
// pinned block may still be read or written by an asynchronous copy queued before the
// free, in any context (pinned memory is reachable from every context that maps it), so a
// fence covers all the work of every context luma serves, recorded after the free
// (context_fence.h: one cuCtxRecordEvent per context, or stream by stream). The real cuMemFreeHost makes that wait
// itself (docs/architecture.md, "Pinned host memory"); a cache that keeps the block must.
//
// A context with a stream capture underway gets no event (an event on a capturing stream
// would join the graph, a query is a call the capture may forbid): its part of the fence
// is deferred, recorded once no capture is underway there, and only then possibly done -
// the rule of driver_device.h.
//
// Called only with the host cache's lock held. Never calls luma's hooks; never reports a
// fence done before the driver says its events completed.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "capture_registry.h"
#include "context_fence.h"
#include "context_table.h"
#include "host_cache/host_cache.h"
#include "real_driver.h"
#include "stream_registry.h"

namespace luma::shim {

class DriverHostFences final : public core::HostFences {
 public:
  DriverHostFences(const RealDriver& driver, const ContextTable& contexts,
                   StreamRegistry& streams, const CaptureRegistry& captures) noexcept
      : driver_(driver), contexts_(contexts), streams_(streams), captures_(captures) {}
  ~DriverHostFences() override = default;  // events are left to the driver, as at exit

  core::HostFence record() noexcept override;
  bool done(core::HostFence fence) noexcept override;
  void release(core::HostFence fence) noexcept override;

  // ctx was destroyed and its events with it (its work is gone too): forget them.
  void forget_context(CUcontext ctx) noexcept;
  // Fences that could not be recorded in full and were made safe by a synchronization.
  std::uint64_t synchronizations() const noexcept { return synchronizations_; }

 private:
  struct Slot {
    std::vector<std::pair<CUcontext, CUevent>> events;
    std::vector<CUcontext> deferred;  // a capture was underway there: nothing recorded yet
    bool used = false;
  };

  // Records ctx's events (context_fence.h) into s; on failure the caller synchronizes,
  // on capture_underway it defers.
  ContextFence::Outcome record_in(CUcontext ctx, Slot& s) noexcept;
  CUevent take_event(CUcontext ctx) noexcept;
  void give_event(CUcontext ctx, CUevent e) noexcept;
  bool capturing(CUcontext ctx) const noexcept { return captures_.any() && captures_.any_in(ctx); }
  void synchronize(CUcontext ctx) noexcept;

  const RealDriver& driver_;
  const ContextTable& contexts_;
  StreamRegistry& streams_;
  const CaptureRegistry& captures_;
  ContextFence cover_;
  std::vector<Slot> slots_;  // token f is slots_[f - 1]
  std::vector<std::uint32_t> free_slots_;
  std::vector<std::pair<CUcontext, CUevent>> spare_;  // pooled events, by context
  std::uint64_t synchronizations_ = 0;
};

}  // namespace luma::shim
