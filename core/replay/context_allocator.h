// context_allocator.h - what serves one CUDA context (a device may have several: a reset, a
// program's own cuCtxCreate): the caching allocator, and, when the process runs on a plan
// (LUMA_PLAN), the plan's replay in front of it.
// It declares only what must see the replay: each of those operations routes to the plan's
// replay first (or adds its part), so CachingAllocator's own declaration would be wrong for
// it. What concerns the cache alone (allocate_own_segment, set_reuse_at_once, options,
// largest_free_block, snapshot, ...) is called on cache(): one declaration each.
//
// Routing: allocations go to the replay while the device follows its plan, and to the
// caching allocator from the first divergence on (a DivergenceSink hears of it once, with
// no lock held). The arena is released once a divergence has happened and no block in it
// is live (release_unused_arena). Frees, owns, block_of and segment_of go by address: the arena's to the
// replay (its blocks stay valid after a divergence), everything else to the cache. Without
// a plan it is the caching allocator plus one predictable branch.
//
// Thread-safe like CachingAllocator: the replay has one lock, the cache its own, and with a
// plan both reach the device through a serializing wrapper, so the device still sees one
// caller at a time (core/base/device.h). Lock order: allocator lock, then device lock; never
// the reverse. Never throws after construction (the constructor may throw std::bad_alloc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "base/constants.h"
#include "base/device.h"
#include "base/event.h"
#include "plan/plan_file.h"
#include "replay/plan_replay.h"
#include "replay/replay_stats.h"
#include "stats/stats.h"

namespace luma::core {

class ContextAllocator {
 public:
  // `plan`: the accepted plan of the process (nullptr: no replay). A device the plan does
  // not list is replayed from an empty plan, so its first allocation diverges (and is
  // counted) like any other unplanned allocation. `device` must outlive the allocator;
  // `plan` need not.
  ContextAllocator(Device& device, int device_index, const AllocatorOptions& options = {},
                  const PlanFile* plan = nullptr);
  ~ContextAllocator();
  ContextAllocator(const ContextAllocator&) = delete;
  ContextAllocator& operator=(const ContextAllocator&) = delete;

  // The replay's while the device follows its plan. (allocate_own_segment is the cache's
  // alone, through cache(): a plan places the blocks luma carves, and such an allocation
  // is the driver's own shape; so is set_reuse_at_once: the replay keeps its own fences.)
  AllocResult allocate(std::size_t bytes) noexcept;
  FreeStatus free(void* ptr) noexcept;
  // The cache's empty_cache, plus: pending planned frees completed and, after a
  // divergence, the arena released if nothing in it is live (free does that already).
  std::size_t empty_cache() noexcept;
  void release_all() noexcept;
  // The context is gone: both the arena and the cache forget their memory without a device
  // call (CachingAllocator::drop_device_memory); a plan is not followed any more.
  void drop_device_memory() noexcept;

  bool owns(const void* ptr, std::size_t* size = nullptr) const noexcept;
  bool segment_of(const void* ptr, SegmentRange* out) const noexcept;
  bool block_of(const void* addr, SegmentRange* out) const noexcept;

  // The context's statistics: the cache's plus the arena's (one large-pool segment). Peaks
  // follow PeakRule::parts_at_once (stats.h): exact while the device follows its plan (the
  // cache is idle), an upper bound after a divergence.
  DeviceStats stats() const noexcept;
  // stats() / replay_stats() if every lock they need can be taken by `deadline` (see
  // lock_until, allocator_lock.h); false, and *out unchanged, if not.
  bool try_stats(DeviceStats* out, std::chrono::steady_clock::time_point deadline) const noexcept;
  bool try_replay_stats(ReplayStats* out, std::chrono::steady_clock::time_point deadline) const noexcept;
  std::size_t cached_bytes() const noexcept;

  void set_event_sink(EventSink* sink) noexcept;
  // The live record's slots (CachingAllocator::set_live_writer): one for the cache, one
  // for the plan's arena (the two are written under different locks, and a slot has one
  // writer at a time). Set before use from one thread, like the event sink.
  void set_live_writers(live::SlotWriter* cache, live::SlotWriter* replay) noexcept;
  // Set before use from one thread, like the event sink.
  void set_divergence_sink(DivergenceSink* sink) noexcept { divergence_sink_ = sink; }

  // The cache's violations, then the replay's (prefixed "plan replay: ").
  std::vector<std::string> check() const;

  bool has_plan() const noexcept { return replay_ != nullptr; }
  bool following_plan() const noexcept { return following_.load(std::memory_order_acquire); }
  // Replay statistics (with the cache's real allocations folded in); a device without a
  // plan reports zeros.
  ReplayStats replay_stats() const noexcept;

  CachingAllocator& cache() noexcept { return cache_; }
  const CachingAllocator& cache() const noexcept { return cache_; }

 private:
  class SerializedDevice;

  bool in_arena(const void* ptr) const noexcept;
  // After a divergence the arena serves nothing new: once no block in it is live (at the
  // free of its last block, or at the divergence itself) it goes back to the device, its
  // pending frees waited for first (as cudaFree would synchronize). replay_mu_ held.
  void release_unused_arena() noexcept;

  const int device_index_;
  std::unique_ptr<SerializedDevice> serialized_;  // only with a plan; before cache_
  std::unique_ptr<PlanReplay> replay_;
  mutable std::mutex replay_mu_;
  std::atomic<bool> following_{false};
  // The arena's address range, published once reserved (0, 0 while not held), so frees of
  // other memory are routed without the replay's lock.
  std::atomic<std::uintptr_t> arena_begin_{0};
  std::atomic<std::uintptr_t> arena_end_{0};
  DivergenceSink* divergence_sink_ = nullptr;
  CachingAllocator cache_;
};

}  // namespace luma::core
