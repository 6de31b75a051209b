// host_cache_fences.h - the fences of the pinned host cache (core/host_cache/): a freed
// pinned block may still be read or written by an asynchronous copy queued before the
// free, in any context (pinned memory is reachable from every context that maps it), so a
// fence covers all the work of every context luma serves, recorded after the free. The
// real cuMemFreeHost makes that wait itself (docs/architecture.md, "Pinned host memory"); a
// cache that keeps the block must.
//
// A fence is one part per served context, each a fence of that context's pool
// (fence_slots.h), the very fences of device frees: recorded, or deferred while a capture is
// underway there, or none (context gone; recording failed and the context was synchronized);
// polled part by part, never waited for; released part by part. A fence with no part is
// kNoHostFence.
//
// Without host memory for a part (or for the fence), a context is synchronized instead; a
// context capturing cannot be, so the fence then owes a synchronization of every context,
// made at its first poll with no capture underway anywhere (once for all fences owing it).
// A fence that could not be had at all is kOwed, which needs no memory.
//
// Called only with the host cache's lock held. Never calls luma's hooks; never reports a
// fence done before the driver says its events completed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "device/capture_registry.h"
#include "device/context_fence.h"
#include "device/context_table.h"
#include "device/fence_slots.h"
#include "host_cache/host_cache.h"
#include "driver/real_driver.h"
#include "device/stream_registry.h"

namespace luma::shim {

class DriverHostFences final : public core::HostFences {
 public:
  DriverHostFences(const RealDriver& driver, const ContextTable& contexts,
                   StreamRegistry& streams, const CaptureRegistry& captures) noexcept
      : driver_(driver), contexts_(contexts), streams_(streams), captures_(captures) {}
  ~DriverHostFences() override = default;  // events are left to the driver, as at exit

  // No fence could be had while a context was capturing (above).
  static constexpr core::HostFence kOwed = 0xFFFFFFFFu;

  core::HostFence record() noexcept override;
  bool done(core::HostFence fence) noexcept override;
  void release(core::HostFence fence) noexcept override;

  // ctx was destroyed and its events with it (its work is gone too): forget them.
  void forget_context(CUcontext ctx) noexcept;
  // Fences (parts) made safe by a synchronization: an event call failed, or memory ran out.
  std::uint64_t synchronizations() const noexcept { return synchronizations_; }

 private:
  struct Part {
    FenceSlots* pool;  // its context's
    FenceSlots::Token token;
  };
  struct Fence {
    std::vector<Part> parts;
    std::uint32_t done = 0;  // parts[0, done) were seen done: a poll goes on from there
    bool owed = false;  // a capturing context could not be fenced: a synchronization is owed
  };

  // ctx's pool, made on first use; throws std::bad_alloc when it cannot be made.
  FenceSlots& pool(CUcontext ctx);
  // No pool or slot to fence ctx with: wait for its work now. False while it captures:
  // then the synchronization is owed (owe_synchronization_).
  bool synchronize(CUcontext ctx) noexcept;
  // The owed synchronization: false while any capture is underway; else every live
  // context is synchronized (once for all fences owing it) and true.
  bool settle_owed() noexcept;

  const RealDriver& driver_;
  const ContextTable& contexts_;
  StreamRegistry& streams_;
  const CaptureRegistry& captures_;
  ContextFence cover_;  // one strategy for every context: one driver refusal is enough
  std::vector<std::unique_ptr<FenceSlots>> pools_;  // one per context fenced so far
  SlotTable<Fence> fences_;
  std::uint64_t synchronizations_ = 0;
  bool owe_synchronization_ = false;  // a fence owing one was given since the last one
};

}  // namespace luma::shim
