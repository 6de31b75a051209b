// allocator_impl.h - the caching allocator's state, and its methods, declared: one struct
// whose methods live in the files named below by idea (core/allocator/README.md maps them).
// Private to core/allocator/: only the allocator's own files include it.
//
// Structures (each in its own header), chosen so that every hot-path step is O(1) and
// allocates no host memory unless an index has to grow:
// - Segment and Block records (block.h) from RecordPools (record_pool.h): a segment's
//   blocks are a doubly linked list in address order that tiles it exactly.
// - Free blocks (free_blocks.h, owning its invariant): a TLSF-style index (free_index.h)
//   per pool and per side of max_split_size (oversize blocks live apart, so a normal
//   request never sees them and PyTorch's oversize rule costs nothing). Good fit within
//   1/64, exact reuse of a block freed at the same size.
// - Pointer map (pointer_map.h): cache-line buckets keyed by block address, exactly the
//   allocated blocks, each as its record's number and its size (LiveBlock, block.h).
// - Pending frees (pending_frees.h, owning its invariant): the open epoch, the closed
//   ones waiting on fences, polled, reclaimed before growth.
// - Segments (segment_table.h, owning its invariant): each found by address, by base and
//   by its first block; the wholly free ones also in a list per pool, in the order they
//   became so (idle_segments.h), kept up to date where a block becomes or stops being its
//   segment's only block (complete, take).
// - Growth (grow): a new segment sized by the pool rules (segment_size_for); before it
//   would raise reserved above its high-water mark, the wholly free segments are released
//   from those lists (release_for_growth), and near a memory limit placement turns tight
//   (pressure, limit_pressure.cpp). The policy and its measurements: docs/placement.md.
// - The lock (allocator_lock.h): one per device, a compare-exchange to take.
// All index memory is reserved at the start of allocate (reserve_capacity), before any
// state changes, so a host allocation failure leaves the allocator untouched.
//
// Must never: throw out of a public method, call the device or the event sink without the
// lock, release memory to the device outside empty_cache / the OOM path / release_all.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/allocator_lock.h"
#include "allocator/block.h"
#include "allocator/caching_allocator.h"
#include "allocator/epoch.h"
#include "allocator/free_blocks.h"
#include "allocator/live_stats.h"
#include "allocator/page_pool.h"
#include "allocator/pending_frees.h"
#include "allocator/pointer_map.h"
#include "allocator/record_pool.h"
#include "allocator/segment_table.h"
#include "live/live_writer.h"

namespace luma::core {

// -Dcheck=full (core/meson.build defines LUMA_CHECK_FULL): every public call that changes
// the allocator ends with the whole invariant check (Impl::check_after). Off, the default
// and every shipped build, the check's call compiles away.
#ifdef LUMA_CHECK_FULL
inline constexpr bool kCheckFull = true;
#else
inline constexpr bool kCheckFull = false;
#endif

constexpr Pool other(Pool p) noexcept { return p == Pool::small ? Pool::large : Pool::small; }

inline std::size_t round_up(std::size_t v, std::size_t a) noexcept {
  if (a <= 1) return v;
  const std::size_t r = v % a;
  return r == 0 ? v : v + (a - r);
}

inline AllocatorOptions sanitize(AllocatorOptions o) noexcept {
  // config.cpp validates user input; this only keeps the arithmetic below well defined
  // for any options a caller may construct by hand.
  o.alignment = std::bit_ceil(std::max<std::size_t>(o.alignment, 1));
  o.min_split = std::max(round_up(o.min_split, o.alignment), o.alignment);
  o.min_segment = std::max(round_up(o.min_segment, o.alignment), o.alignment);
  o.large_round = std::max(round_up(o.large_round, o.alignment), o.alignment);
  return o;
}

struct CachingAllocator::Impl {
  Impl(Device& d, int index, const AllocatorOptions& o)
      : dev(d), device_index(index), opt(sanitize(o)), fence_mode(d.fence_mode()) {}

  Device& dev;
  const int device_index;
  const AllocatorOptions opt;
  const FenceMode fence_mode;
  const std::size_t align_mask = opt.alignment - 1;  // a power of two (sanitize)
  const unsigned unit_shift = static_cast<unsigned>(std::countr_zero(opt.alignment));
  mutable AllocatorLock mu;
  EventSink* sink = nullptr;
  live::SlotWriter* live_writer = nullptr;
  LiveStats stats;

  RecordPool<Block> blocks;
  // The segments held, found by address, base and first block; the wholly free ones per
  // pool in the order they became so (segment_table.h).
  SegmentTable segments;
  PointerMap<LiveBlock> live;
  // The free blocks by pool and size; blocks at or above the split limit (max_split_size,
  // lifted for expandable segments, whose free pages are unmapped instead) apart
  // (free_blocks.h).
  FreeBlocks free_blocks{unit_shift, opt.max_split_size};
  PendingFrees pending{dev, fence_mode, opt, stats.num_fence_waits};
  // Segments forgotten with a lost context (drop_device_memory): neither held nor freed.
  std::uint64_t segments_dropped = 0;
  // Own segments (allocate_own_segment) held now: while there are none, a completed free
  // costs no segment lookup.
  std::size_t own_segments = 0;
  // set_reuse_at_once: frees complete at once while every use is in one stream's order.
  std::atomic<bool> reuse_now{false};
  // The most bytes reserved so far: growth above it releases free segments first.
  std::size_t reserved_high_water = 0;
  // Near the device's memory limit (grow asks the device): tight placement, see
  // AllocatorOptions::pressure_divisor.
  bool pressure = false;
  // Expandable segments (AllocatorOptions::expandable_segments): the device's virtual
  // memory, asked at the first growth (page 0: ordinary segments); each pool's expanses
  // (segments of address space, block.h) and its unmapped ranges (blocks in the state
  // unmapped, listed through list_prev/list_next; few: the tail of each expanse and the
  // holes left where free pages were unmapped).
  bool vm_asked = false;
  // The device refused to reserve a pool its usual address space (cuMemAddressReserve: a
  // process short of address space, a driver's limit): that pool's further growth beyond
  // its expanses takes ordinary segments, and the device is not asked again. (Beside
  // vm_asked, in its padding: the hot members keep their places.)
  std::array<bool, kPools> expanse_refused{};
  Device::VirtualMemory vm;
  std::array<std::vector<Segment*>, kPools> expanses;
  std::array<Block*, kPools> unmapped{};
  // The physical memory behind the expanses (page_pool.h).
  PagePool pages{dev};
  // The least size of a new memory (adapt_chunk), a multiple of the page.
  std::size_t chunk = 0;
  static constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

  // ---- helpers ----------------------------------------------------------------------
  void emit(EventKind kind, std::uintptr_t addr, std::size_t size, std::size_t requested) noexcept {
    if (sink != nullptr) sink->on_event(Event{kind, device_index, addr, size, requested});
  }

  DeviceStats view() const noexcept { return stats.view(device_index, free_blocks.count()); }

  // The live record's slot (set_live_writer), from the statistics as they are at the end
  // of a public call: once per call, not per event (the inlined per-event updates made the
  // hot functions too big to inline, costing a pair more than the updates themselves).
  // Pending-free bytes are the active bytes the program no longer holds.
  [[gnu::always_inline]] void publish_live() noexcept {
    if (live_writer == nullptr) [[likely]]
      return;
    const std::int64_t allocated = stats.allocated_bytes.all_current();
    live_writer->publish({static_cast<std::uint64_t>(allocated),
                          static_cast<std::uint64_t>(stats.reserved_bytes.all_current()),
                          static_cast<std::uint64_t>(stats.allocated_bytes.all_peak),
                          static_cast<std::uint64_t>(stats.reserved_bytes.all_peak),
                          static_cast<std::uint64_t>(stats.active_bytes.all_current() - allocated),
                          stats.num_ooms});
  }
  // After a free: only the held and the pending bytes can have moved.
  [[gnu::always_inline]] void publish_live_held() noexcept {
    if (live_writer == nullptr) [[likely]]
      return;
    const std::int64_t allocated = stats.allocated_bytes.all_current();
    live_writer->publish_held(static_cast<std::uint64_t>(allocated),
                              static_cast<std::uint64_t>(stats.active_bytes.all_current() - allocated));
  }

  static Segment* whole_segment(const Block* b) noexcept { return reinterpret_cast<Segment*>(b->requested); }

  static void apply_net(LiveMetric& c, Pool p, std::int64_t n) noexcept {
    if (n > 0) c.add(p, static_cast<std::uint64_t>(n));
    if (n < 0) c.sub(p, static_cast<std::uint64_t>(-n));
  }

  static constexpr std::size_t kAll = ~std::size_t{0};

  std::size_t page_up(std::size_t v) const noexcept { return (v + vm.page - 1) & ~(vm.page - 1); }

  // The bytes of the unmapped block u that may be mapped: all but an expanse's last page.
  std::size_t mappable(const Block* u) const noexcept { return u->next == nullptr ? u->size - vm.page : u->size; }

  // Where `rounded` fits by mapping pages: a run of free and unmapped blocks starting at
  // `start` (a free block followed by an unmapped one, or an unmapped one), up to `end`,
  // for which `map` bytes must be mapped.
  struct Room {
    Block* start = nullptr;
    std::uintptr_t end = 0;
    std::size_t map = 0;
  };

  std::array<std::size_t, kPools> spare_now() const noexcept { return {pages.spare(Pool::small), pages.spare(Pool::large)}; }

  // The size of new memory. A memory is unmapped only whole (page_pool.h), so small ones
  // let free memory move sooner, and each costs a driver allocation (cuMemCreate, far
  // dearer than a map). Two rules (docs/placement.md, "Expandable segments"):
  // - a growth's new memory comes in at most kPiecesPerGrowth pieces: a 400 MiB tensor is
  //   four 100 MiB memories, not two hundred pages;
  // - at most one driver allocation per opt.expandable_allocations_per_memory allocations,
  //   beyond the first kFreeMemories: while more were made, the least piece (`chunk`)
  //   doubles; while fewer than half as many, it halves, down to a page.
  // Measured on four training sequences, 1.008-1.039 x peak live with 0.72-1.76 driver
  // allocations per 100 allocations; pages alone: 1.001-1.020 x, but up to 32 per 100.
  static constexpr std::size_t kPiecesPerGrowth = 4;
  static constexpr std::uint64_t kFreeMemories = 256;

  std::vector<std::string> check() const;

  // At the end of a public call that changed the allocator, under its lock: in a
  // check=full build the whole check (O(blocks)), aborting on a failure; else nothing.
  [[gnu::always_inline]] void check_after(const char* call) const noexcept {
    if constexpr (kCheckFull) check_or_abort(call);
  }
  [[gnu::noinline, gnu::cold]] void check_or_abort(const char* call) const noexcept;

  // The block b just became free (and is in no index): it merges with its free
  // neighbours and is indexed. Returns the merged block.
  [[gnu::always_inline]] Block* merge_free(Block* b) noexcept {
    const Pool p = b->pool;
    std::int64_t net_blocks = 0;
    std::int64_t net_bytes = 0;
    if (Block* prev = b->prev; prev != nullptr && prev->state == BlockState::free) {
      free_blocks.remove(prev);
      net_blocks -= 1;
      net_bytes -= static_cast<std::int64_t>(prev->size);
      prev->size += b->size;
      prev->next = b->next;
      if (b->next != nullptr) b->next->prev = prev;
      blocks.put(b);
      b = prev;
    }
    if (Block* next = b->next; next != nullptr && next->state == BlockState::free) {
      free_blocks.remove(next);
      net_blocks -= 1;
      net_bytes -= static_cast<std::int64_t>(next->size);
      b->size += next->size;
      b->next = next->next;
      if (next->next != nullptr) next->next->prev = b;
      blocks.put(next);
    }
    if (!b->is_split()) [[unlikely]]
      became_whole(b);
    free_blocks.insert(b);
    if (b->is_split()) {
      net_blocks += 1;
      net_bytes += static_cast<std::int64_t>(b->size);
    }
    apply_net(stats.inactive_split, p, net_blocks);
    apply_net(stats.inactive_split_bytes, p, net_bytes);
    return b;
  }

  // ---- caching_allocator.cpp: the hot path: allocate, free, a free block taken and split, a
  // freed block completed and merged (complete_epoch: what PendingFrees calls when done)
  [[gnu::always_inline]] inline void reserve_capacity();
  [[gnu::always_inline]] inline Block* find_free(Pool p, std::size_t rounded, bool tight) noexcept;
  [[gnu::always_inline]] inline void* take(Block* b, std::size_t rounded, std::size_t requested) noexcept;
  [[gnu::noinline]] AllocResult allocate(std::size_t bytes, bool own) noexcept;
  [[gnu::always_inline]] inline FreeStatus free(const void* ptr) noexcept;
  [[gnu::always_inline]] inline void complete(Block* b) noexcept;
  void became_whole(Block* b) noexcept;
  void complete_epoch(const Epoch& e) noexcept;

  // ---- segment_growth.cpp: a new segment: its size, the device call, the out-of-memory retry
  Block* grow(Pool p, std::size_t rounded, int* error, bool own = false) noexcept;
  Reservation reserve_aligned(std::size_t size) noexcept;
  void record_oom(std::size_t requested) noexcept;

  // ---- limit_pressure.cpp: what growth gives back first: everything near a memory limit
  // (tight placement), enough above the high-water mark not to raise it
  bool near_limit() const noexcept;
  std::size_t release_before_growth(Pool p, std::size_t rounded, std::size_t preferred, bool own) noexcept;

  // ---- segment_release.cpp: segments given back or forgotten: before growth, empty_cache,
  // release_all, a lost context
  bool release_idle(Segment* s) noexcept;
  std::size_t release_free_segments() noexcept;
  void release_for_growth(Pool p, std::size_t want) noexcept;
  void drop_segment_stats(Segment* s) noexcept;
  std::size_t empty_cache() noexcept;
  void release_all() noexcept;
  void drop_device_memory() noexcept;
  void forget_segment(Segment* s) noexcept;

  // ---- expandable_growth.cpp: expandable segments: expanses of address space, pages mapped
  // where a request needs them, free pages unmapped
  bool expandable() noexcept;
  void unmapped_push(Block* u) noexcept;
  void unmapped_remove(Block* u) noexcept;
  Room room_from(Block* start, std::size_t rounded) const noexcept;
  Room find_room(Pool p, std::size_t rounded) const noexcept;
  void spare_used(const std::array<std::size_t, kPools>& before) noexcept;
  void emit_pages(EventKind kind, std::uintptr_t addr, std::size_t bytes) noexcept;
  void emit_mapped_pages_released(const Segment* s) noexcept;
  std::size_t trim_pages() noexcept;
  Segment* new_expanse(Pool p, std::size_t rounded, bool* refused) noexcept;
  void adapt_chunk() noexcept;
  Block* map_room(const Room& room, std::size_t rounded, Reservation* r) noexcept;
  Block* mapped(Block* u, std::size_t bytes) noexcept;
  std::size_t unmap_free(Pool p, std::size_t want, std::uintptr_t lo, std::uintptr_t hi) noexcept;
  Block* unmapped_range(Segment* s, Block* b, std::uintptr_t a, std::size_t bytes) noexcept;
  void unmap_for_growth(Pool p, std::size_t want, const Room& room) noexcept;
  Block* grow_expandable(Pool p, std::size_t rounded, int* error, bool* refused) noexcept;
  bool release_expanse(Segment* s) noexcept;

  // ---- own_segments.cpp: the program's own segments (allocate_own_segment): one block each,
  // given back at its free
  [[gnu::noinline, gnu::cold]] Segment* own_segment_at(std::uintptr_t addr) const noexcept;
  [[gnu::noinline, gnu::cold]] void forget_released_own(Segment* s, Block* b) noexcept;
  [[gnu::noinline, gnu::cold]] bool free_own_now(Block* b, Pool p) noexcept;

  // ---- allocator_stats.cpp: statistics and snapshots read from the structures
  BlockSnapshot block_snapshot(const Block* b) const noexcept;
};

// Defined in pending_frees.cpp, for this owner only.
extern template bool PendingFrees::reclaim(Pool, CachingAllocator::Impl&) noexcept;
extern template bool PendingFrees::drain(CachingAllocator::Impl&) noexcept;

}  // namespace luma::core
