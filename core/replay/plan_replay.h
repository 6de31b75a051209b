// plan_replay.h - the replay allocator of one device: serves the k-th allocation of the run
// at arena + the k-th planned offset, from ONE arena reserved through core::Device at the
// first allocation, for as long as the run follows the plan.
//
// Following the plan means: the k-th allocation asks for exactly the bytes the plan's k-th
// allocation requested (the match is on the requested bytes, not on a rounded size: see
// docs/plan-replay.md), and the planned bytes are free when it comes. The first allocation
// that does not follow (another size, more allocations than a non-periodic plan holds, a
// planned range still held by a block freed late, an arena the device refuses) is a
// divergence: it is not served here, allocate() says so once, and every later allocation is
// the caller's (the caching allocator's). Blocks already placed stay valid until freed,
// and their frees still come here; nothing is ever moved.
//
// Never hands out bytes that overlap a live block, or a freed block whose fence has not
// completed (the fence contract of core/base/device.h, kept by the same FenceQueue as the
// caching allocator's). A planned allocation whose bytes wait on a fence the device cannot
// wait for now (device.h) is a divergence (live_conflict: an earlier block still holds
// them), so the cache serves it from other memory. This
// does not depend on the plan being valid: before placing allocation k it checks the blocks
// that last held each of its bytes (precomputed from the plan's offsets and order), which
// by induction are the only ones that can still hold them.
//
// Not thread-safe: the owner (ContextAllocator) holds one lock around every call. Never
// throws after construction; the constructor may throw std::bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "base/constants.h"
#include "base/device.h"
#include "base/event.h"
#include "allocator/fence_queue.h"
#include "plan/plan_file.h"
#include "replay/replay_stats.h"
#include "stats/stats.h"

namespace luma::core {

// Told once per device when it stops following its plan, with no allocator lock held.
class DivergenceSink {
 public:
  virtual ~DivergenceSink() = default;
  virtual void on_divergence(int device, const Divergence& divergence) noexcept = 0;
};

struct ReplayAllocation {
  void* ptr = nullptr;        // non-null: served from the plan
  bool diverged_now = false;  // this call diverged (ptr is null): report divergence()
};

class PlanReplay {
 public:
  // `plan` is copied into compact tables (it need not outlive this). `options` gives the
  // alignment the allocator promises and the fence epoch bounds.
  PlanReplay(Device& device, int device_index, const DevicePlanFile& plan,
             const AllocatorOptions& options = {});
  ~PlanReplay();  // the fence queue gives every token back; the arena stays with the device
  PlanReplay(const PlanReplay&) = delete;
  PlanReplay& operator=(const PlanReplay&) = delete;

  // bytes > 0. Serves the next allocation from the plan, or returns null (now diverged).
  ReplayAllocation allocate(std::size_t bytes) noexcept;
  // not_owned: outside the arena. invalid: inside it, but not the start of a live block.
  FreeStatus free(void* ptr) noexcept;

  bool following() const noexcept { return following_; }
  const Divergence& divergence() const noexcept { return divergence_; }

  bool contains(const void* ptr) const noexcept;  // inside the arena (while it is held)
  bool has_live_blocks() const noexcept { return stats_.allocation.all.current != 0; }
  bool owns(const void* ptr, std::size_t* size = nullptr) const noexcept;
  bool block_of(const void* addr, SegmentRange* out) const noexcept;
  bool segment_of(const void* ptr, SegmentRange* out) const noexcept;

  // The arena's share of the device statistics (one large-pool segment and its blocks).
  DeviceStats stats() const noexcept;
  ReplayStats replay_stats() const noexcept;
  // Arena bytes not held by the program.
  std::size_t cached_bytes() const noexcept;

  // empty_cache: completes pending frees; after a divergence, releases the arena once no
  // block in it is live. Returns the bytes released.
  std::size_t empty_cache() noexcept;
  // Releases the arena even with live blocks (tests; an allocator torn down early).
  void release_all() noexcept;
  // The context is gone and the arena with it (CachingAllocator::drop_device_memory):
  // everything is forgotten without a device call; the device stops following its plan
  // (reason context_lost) and the cache serves whatever comes next.
  void drop_device_memory() noexcept;

  void set_event_sink(EventSink* sink) noexcept { sink_ = sink; }
  // The live record's slot of the arena (CachingAllocator::set_live_writer).
  void set_live_writer(live::SlotWriter* writer) noexcept { live_writer_ = writer; }

  // Every violated invariant, one message each: occupied (live or pending) blocks never
  // overlap, the address index and the epochs agree with the slots, the statistics add up.
  std::vector<std::string> check() const;

 private:
  static constexpr std::uint32_t kNone = 0xffffffffu;
  enum class SlotState : std::uint8_t { free, live, pending };
  struct Epoch {
    Fence fence = kNoFence;
    std::uint64_t id = 0;
    std::uint32_t head = kNone;  // slots chained through epoch_next_
    std::uint32_t blocks = 0;
    std::uint64_t bytes = 0;
    std::uint64_t deadline = kNever;  // the earliest sequence number that needs its bytes
  };
  static constexpr std::uint64_t kNever = ~std::uint64_t{0};

  std::uint32_t slot_for(std::uint64_t sequence) const noexcept;
  ReplayAllocation diverge(Divergence d) noexcept;
  bool reserve_arena(int* device_error) noexcept;
  void emit(EventKind kind, std::uintptr_t addr, std::uint64_t size, std::uint64_t requested) noexcept;
  std::uint32_t live_slot_at(std::uintptr_t addr) const noexcept;
  void complete_slot(std::uint32_t slot) noexcept;
  void complete_epoch(std::uint32_t head) noexcept;
  void close_open_epoch() noexcept;
  void process_events() noexcept;
  bool make_free(std::uint32_t slot) noexcept;
  bool drain_pending() noexcept;
  void drop_arena(bool released_by_us) noexcept;
  void forget_live(std::uint32_t slot) noexcept;

  Device& dev_;
  const int device_index_;
  const FenceMode fence_mode_;
  const std::size_t epoch_max_blocks_;
  const std::size_t epoch_max_bytes_;
  EventSink* sink_ = nullptr;
  live::SlotWriter* live_writer_ = nullptr;

  // The plan, compact. Slot s = planned allocation s (periodic: warm-up + one period).
  std::uint64_t arena_bytes_ = 0;     // the reservation (the plan's arena, rounded up)
  std::uint64_t plan_arena_ = 0;
  std::uint64_t alignment_ = 0;
  std::uint64_t warmup_ = 0;
  std::uint64_t period_ = 0;          // 0: not periodic
  std::vector<std::uint64_t> offset_, size_, requested_;
  std::vector<std::uint32_t> offset_index_;  // slot -> index into distinct_offsets_
  std::vector<std::uint64_t> distinct_offsets_;  // sorted
  std::uint64_t max_size_ = 0;
  // The blocks that last held the bytes of each slot before it, as CSR lists: for the
  // first pass over the slots, and (periodic) for the period's later iterations.
  std::vector<std::uint32_t> first_start_, first_pred_;
  std::vector<std::uint32_t> steady_start_, steady_pred_;
  // Fence-aware plans (fence_slack in the plan file): how many allocations after a slot's
  // own allocation the first later allocation on its bytes comes (kNever: none), and how
  // many allocations ahead of that need the open epoch's fence is recorded (lead_; while
  // the GPU keeps up, plan::kKeptUpFenceLead). The frees of a burst join the open epoch
  // until one of them is needed within the lead, so one fence covers as many frees as the
  // plan's slack allows. Plain plans have lead_ = kNever: the fence is recorded at the
  // next allocation after a burst.
  std::vector<std::uint64_t> next_use_;
  std::uint64_t lead_ = kNever;
  // Whether the GPU keeps up: the last fence allocate() recorded was done at the next
  // allocation, with no wait in between (judged there once). Fence-aware plans only.
  bool keeping_up_ = false;
  bool judging_ = false;
  std::uint64_t waits_at_close_ = 0;
  Divergence incompatible_;  // reason != none: the plan cannot be served at all

  // Run state.
  bool following_ = true;
  Divergence divergence_;
  std::uint64_t next_ = 0;  // the next allocation's sequence number
  std::uintptr_t base_ = 0;  // the arena, 0 while not held
  bool arena_released_ = false;
  std::vector<SlotState> state_;
  std::vector<std::uint64_t> instance_;  // sequence number of the slot's current block
  std::vector<std::uint64_t> epoch_of_;  // pending: the epoch holding it
  std::vector<std::uint32_t> epoch_next_;
  std::vector<std::uint32_t> live_at_;   // per distinct offset: the live slot there
  DeviceStats stats_;
  Epoch open_;
  FenceQueue<Epoch> closed_{dev_, stats_.num_fence_waits};
  std::uint64_t next_epoch_id_ = 1;

  std::uint64_t arena_reservations_ = 0;
};

}  // namespace luma::core
