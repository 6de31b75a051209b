// caching_allocator.cpp - the caching allocator of one device (see caching_allocator.h).
//
// Structures (each in its own header), chosen so that every hot-path step is O(1) and
// allocates no host memory unless an index has to grow:
// - Segment and Block records (block.h) from RecordPools (record_pool.h): a segment's
//   blocks are a doubly linked list in address order that tiles it exactly.
// - Free index (free_index.h): TLSF-style segregated lists, one per pool and per
//   "oversize" class (blocks >= max_split_size live apart, so a normal request never sees
//   them and PyTorch's oversize rule costs nothing). Good fit within 1/64, exact reuse of a
//   block freed at the same size.
// - Pointer map (pointer_map.h): cache-line buckets keyed by block address, exactly the
//   allocated blocks, each as its record's number and its size (LiveBlock, block.h).
// - Pending frees (epoch.h, fence_queue.h): with a batched-fence device a free only
//   appends the block to the open epoch (no device call). The epoch is closed with one
//   record_fence() when an allocation finds nothing else that fits, when it reaches
//   epoch_max_blocks / _bytes, or by empty_cache / the OOM path / release_all. Closed
//   epochs wait in the fence queue, polled oldest first at each allocate (PyTorch's
//   process_events, backing off while the oldest fence stays not done:
//   fence_poll_max_gap) and waited on, oldest first, before the allocator grows; when the
//   device cannot wait now (device.h) the allocator grows instead. A fence recorded after
//   a free covers at least the work issued before it, so reuse stays safe; kNoFence frees
//   the epoch at once. per_free devices are the same with a one-block epoch; none devices
//   skip it all.
// - Segments: sorted by base in short runs (segment_index.h), and by base in a map for the
//   block that starts one; the wholly free ones also in a list per pool, in the order they
//   became so (idle_segments.h), kept up to date where a block becomes or stops being its
//   segment's only block (complete, take).
// - Growth (grow): a new segment sized by the pool rules (segment_size_for); before it
//   would raise reserved above its high-water mark, the wholly free segments are released
//   from those lists (release_for_growth), and near a memory limit placement turns tight
//   (pressure). The policy and its measurements: docs/placement.md.
// - The lock (allocator_lock.h): one per device, a compare-exchange to take.
// All index memory is reserved at the start of allocate (reserve_capacity), before any
// state changes, so a host allocation failure leaves the allocator untouched.
//
// With a million live blocks the records and the map are far larger than any cache, and
// each dependent miss costs 150-300 ns on the development VM; the hot path therefore
// starts the loads it will need before it needs them: free() prefetches the block record
// its epoch's completion will read, and completing an epoch prefetches the neighbours of
// the block two places on (and, for big allocators, first every block's neighbours and
// their list links), so those misses overlap instead of following one another.
//
// Must never: throw out of a public method, call the device or the event sink without the
// lock, release memory to the device outside empty_cache / the OOM path / release_all.
#include "allocator/caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <array>
#include <bit>
#include <mutex>  // std::lock_guard
#include <map>
#include <new>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "allocator/allocator_lock.h"
#include "allocator/block.h"
#include "allocator/epoch.h"
#include "allocator/fence_queue.h"
#include "allocator/free_index.h"
#include "allocator/idle_segments.h"
#include "allocator/live_stats.h"
#include "allocator/page_pool.h"
#include "allocator/pointer_map.h"
#include "allocator/record_pool.h"
#include "allocator/segment_index.h"
#include "live/live_writer.h"

namespace luma::core {
namespace {

// Requests above this are refused as out-of-memory without asking the device: no GPU
// has 4 EiB, and it keeps every rounding and size-class computation far from overflow.
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

// Completing an epoch loads its records in passes first (complete_epoch) only when there
// are more block records than fit in a 1 MiB L2 cache (64 bytes each): below that they are
// cached anyway and the passes would only cost instructions.
constexpr std::size_t kPrefetchAboveBlocks = (std::size_t{1} << 20) / sizeof(Block);

const char* pool_name(Pool p) noexcept { return p == Pool::small ? "small" : "large"; }
constexpr Pool other(Pool p) noexcept { return p == Pool::small ? Pool::large : Pool::small; }

std::size_t round_up(std::size_t v, std::size_t a) noexcept {
  if (a <= 1) return v;
  const std::size_t r = v % a;
  return r == 0 ? v : v + (a - r);
}

AllocatorOptions sanitize(AllocatorOptions o) noexcept {
  // config.cpp validates user input; this only keeps the arithmetic below well defined
  // for any options a caller may construct by hand.
  o.alignment = std::bit_ceil(std::max<std::size_t>(o.alignment, 1));
  o.min_split = std::max(round_up(o.min_split, o.alignment), o.alignment);
  o.min_segment = std::max(round_up(o.min_segment, o.alignment), o.alignment);
  o.large_round = std::max(round_up(o.large_round, o.alignment), o.alignment);
  return o;
}

}  // namespace

std::size_t segment_size_for(const AllocatorOptions& options, std::size_t rounded) noexcept {
  std::size_t s = 0;
  if (pool_for(options, rounded) == Pool::small) {
    s = std::max(options.small_segment, rounded);
  } else if (rounded < options.min_large_alloc) {
    s = std::max(options.large_segment, rounded);
  } else {
    s = round_up(rounded, std::max<std::size_t>(options.large_round, 1));
  }
  s = std::max(s, options.min_segment);
  return round_up(s, std::bit_ceil(std::max<std::size_t>(options.alignment, 1)));
}

struct CachingAllocator::Impl {
  Impl(Device& d, int index, const AllocatorOptions& o)
      : dev(d), device_index(index), opt(sanitize(o)), fence_mode(d.fence_mode()),
        epoch_max_blocks(std::clamp<std::size_t>(opt.epoch_max_blocks, 1, Epoch::kCapacity)) {
    const auto shift = static_cast<unsigned>(std::countr_zero(opt.alignment));
    for (auto& per_pool : index_)
      for (FreeIndex& fi : per_pool) fi.set_unit_shift(shift);
  }

  Device& dev;
  const int device_index;
  const AllocatorOptions opt;
  const FenceMode fence_mode;
  // opt.epoch_max_blocks, raised to the device's fence_batch_blocks() (asked after each
  // fence: a context's streams come and go), capped by Epoch::kCapacity.
  std::size_t epoch_max_blocks;
  const std::size_t align_mask = opt.alignment - 1;  // a power of two (sanitize)
  const unsigned unit_shift = static_cast<unsigned>(std::countr_zero(opt.alignment));
  mutable AllocatorLock mu;
  EventSink* sink = nullptr;
  live::SlotWriter* live_writer = nullptr;
  LiveStats stats;

  RecordPool<Block> blocks;
  RecordPool<Segment, 10> segment_records;  // 1024 per chunk: a program has few segments
  SegmentIndex segments;  // sorted by base
  // Segment base -> record: an own segment's block finds its segment at its free
  // (own_segment_at), and the invariant check finds every segment by its base.
  PointerMap<Segment*> segment_at;
  // Each segment by its first block's record number. A segment's first block is the same
  // record for the segment's whole life (a block merges into its lower neighbour, and a
  // split keeps the lower part), so this is written once, when the segment is made, and a
  // block that becomes its segment's only one finds the segment with one load instead of a
  // lookup in segment_at (became_whole: every free that empties a segment). Entries of
  // numbers that are not a first block are stale and never read.
  std::vector<Segment*> segment_of_first;
  // The wholly free segments of each pool, in the order they became so.
  std::array<IdleSegments, kPools> idle;
  PointerMap<LiveBlock> live;
  std::array<std::array<FreeIndex, 2>, kPools> index_;  // [pool][oversize]
  // Pending frees: the open epoch (no fence yet) and the closed ones (fenced), oldest
  // first; closed_blocks counts the closed epochs' blocks per pool.
  Epoch open_epoch;
  FenceQueue<Epoch> closed{dev, stats.num_fence_waits};
  std::array<std::size_t, kPools> closed_blocks{};
  // Fence polling backoff (poll_fences): the current gap, and the allocations left to skip.
  std::size_t poll_gap = 0;
  std::size_t polls_to_skip = 0;
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
  // Blocks at or above this are "oversize" (never split, indexed apart): max_split_size,
  // or no limit with expandable segments, whose free pages are unmapped instead (set at
  // the first growth, before any block exists).
  std::size_t split_max = opt.max_split_size;
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

  bool oversize(std::size_t size) const noexcept { return size >= split_max; }

  [[gnu::always_inline]] FreeIndex& index_for(Pool p, std::size_t size) noexcept {
    return index_[pool_index(p)][oversize(size) ? 1 : 0];
  }

  // The free-block count is the indexes' own (free_block_count), not a statistic kept
  // on the hot path.
  [[gnu::always_inline]] void index_insert(Block* b) noexcept { index_for(b->pool, b->size).insert(b); }
  [[gnu::always_inline]] void index_remove(Block* b) noexcept { index_for(b->pool, b->size).remove(b); }
  std::uint64_t free_block_count() const noexcept {
    std::uint64_t n = 0;
    for (const auto& per_pool : index_)
      for (const FreeIndex& fi : per_pool) n += fi.count();
    return n;
  }
  DeviceStats view() const noexcept { return stats.view(device_index, free_block_count()); }

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

  Segment* segment_containing(std::uintptr_t addr) const noexcept {
    return segments.containing(addr);
  }

  // A free block that became its segment's only block: its segment goes to the back of the
  // pool's idle list, and the block keeps the record (block.h) for take() to find.
  void became_whole(Block* b) noexcept {
    Segment* s = segment_of_first[b->self];  // its first block: b->prev == nullptr
    b->requested = reinterpret_cast<std::uintptr_t>(s);
    idle[pool_index(b->pool)].push_back(s);
  }
  static Segment* whole_segment(const Block* b) noexcept { return reinterpret_cast<Segment*>(b->requested); }

  // Everything allocate may need, reserved before anything changes; the test is a few
  // compares, the growth (which may throw) rare.
  [[gnu::always_inline]] void reserve_capacity() {
    // (A new segment's record and index slot are grow()'s own business.)
    if (blocks.spare() >= 2 && live.has_room() && !closed.full()) [[likely]]
      return;
    blocks.ensure(2);  // a new segment's block and a split remainder
    live.reserve_for(live.size() + 1);
    if (closed.full()) closed.grow();  // room to close the open epoch
  }

  // A block whose fences are done (or that had none) becomes free and merges with its
  // free neighbours; inactive_split follows PyTorch's free_block net-change accounting.
  [[gnu::always_inline]] void complete(Block* b) noexcept {
    const Pool p = b->pool;
    stats.active.sub(p, 1);
    stats.active_bytes.sub(p, b->size);
    stats.requested_bytes.sub(p, b->requested);
    emit(EventKind::free_completed, b->addr, b->size, 0);
    b->state = BlockState::free;
    merge_free(b);
  }

  // The block b just became free (and is in no index): it merges with its free
  // neighbours and is indexed. Returns the merged block.
  [[gnu::always_inline]] Block* merge_free(Block* b) noexcept {
    const Pool p = b->pool;
    std::int64_t net_blocks = 0;
    std::int64_t net_bytes = 0;
    if (Block* prev = b->prev; prev != nullptr && prev->state == BlockState::free) {
      index_remove(prev);
      net_blocks -= 1;
      net_bytes -= static_cast<std::int64_t>(prev->size);
      prev->size += b->size;
      prev->next = b->next;
      if (b->next != nullptr) b->next->prev = prev;
      blocks.put(b);
      b = prev;
    }
    if (Block* next = b->next; next != nullptr && next->state == BlockState::free) {
      index_remove(next);
      net_blocks -= 1;
      net_bytes -= static_cast<std::int64_t>(next->size);
      b->size += next->size;
      b->next = next->next;
      if (next->next != nullptr) next->next->prev = b;
      blocks.put(next);
    }
    if (!b->is_split()) [[unlikely]]
      became_whole(b);
    index_insert(b);
    if (b->is_split()) {
      net_blocks += 1;
      net_bytes += static_cast<std::int64_t>(b->size);
    }
    apply_net(stats.inactive_split, p, net_blocks);
    apply_net(stats.inactive_split_bytes, p, net_bytes);
    return b;
  }

  static void apply_net(LiveMetric& c, Pool p, std::int64_t n) noexcept {
    if (n > 0) c.add(p, static_cast<std::uint64_t>(n));
    if (n < 0) c.sub(p, static_cast<std::uint64_t>(-n));
  }

  // Makes every block of an epoch free (its fence, if any, is done and released by now).
  // With a million live blocks each record a completion touches is a cache miss, and one
  // step's misses depend on the last's (block -> its neighbours -> their list links); so
  // for a batch the levels are loaded one pass each first, letting a whole level's misses
  // overlap instead of following one another (see the file comment).
  void complete_epoch(const Epoch& e) noexcept {
    if (e.count > 1 && blocks.in_use() > kPrefetchAboveBlocks) {
      for (std::uint32_t i = 0; i < e.count; ++i) __builtin_prefetch(e.blocks[i], 1);
      for (std::uint32_t i = 0; i < e.count; ++i) {
        const Block* b = e.blocks[i];
        if (b->prev != nullptr) __builtin_prefetch(b->prev, 1);
        if (b->next != nullptr) __builtin_prefetch(b->next, 1);
      }
      for (std::uint32_t i = 0; i < e.count; ++i) {
        const Block* b = e.blocks[i];
        for (const Block* n : {b->prev, b->next}) {
          if (n == nullptr || n->state != BlockState::free) continue;
          if (n->list_prev != nullptr) __builtin_prefetch(n->list_prev, 1);
          if (n->list_next != nullptr) __builtin_prefetch(n->list_next, 1);
        }
      }
    }
    // And at any size, while one block completes, the address neighbours of the block two
    // places on start loading (its record was prefetched at its free): at 10^4 live blocks
    // the records are beyond the L1 cache, and this overlapped enough of those misses to
    // save 5 ns per alloc+free pair (docs/performance.md).
    for (std::uint32_t i = 0; i < e.count; ++i) {
      if (i + 2 < e.count) {
        const Block* ahead = e.blocks[i + 2];
        if (ahead->prev != nullptr) __builtin_prefetch(ahead->prev, 1);
        if (ahead->next != nullptr) __builtin_prefetch(ahead->next, 1);
      }
      complete(e.blocks[i]);
    }
  }

  // Closes the open epoch with one fence recorded now, after every free in it. kNoFence:
  // its blocks are free at once. Needs room in `closed` (reserve_capacity, or the queue's
  // own grow); without it, waits for the fence instead of queueing it (fence_queue.h).
  [[gnu::always_inline]] void close_epoch() noexcept {
    if (open_epoch.empty()) return;
    using Closed = FenceQueue<Epoch>::Closed;
    if (closed.close(open_epoch, [this](Epoch& e) noexcept { complete_epoch(e); }) == Closed::queued)
      for (std::size_t p = 0; p < kPools; ++p) closed_blocks[p] += open_epoch.per_pool[p];
    // (Closed::stranded: its blocks stay pending for good, never reused: fence_queue.h.)
    reset_open_epoch();
    if (fence_mode == FenceMode::batched) epoch_max_blocks = epoch_blocks(dev.fence_batch_blocks());
  }

  // How many blocks the next epoch may list, given the device's wish (device.h).
  std::size_t epoch_blocks(std::size_t device_wish) const noexcept {
    return std::clamp<std::size_t>(std::max(opt.epoch_max_blocks, device_wish), 1, Epoch::kCapacity);
  }

  void reset_open_epoch() noexcept {
    open_epoch.count = 0;
    open_epoch.per_pool = {};
    open_epoch.bytes = 0;
    open_epoch.fence = kNoFence;
  }

  // The queue's callback for a closed epoch whose fence is done.
  auto finished() noexcept {
    return [this](Epoch& e) noexcept {
      for (std::size_t p = 0; p < kPools; ++p) closed_blocks[p] -= e.per_pool[p];
      complete_epoch(e);
    };
  }

  // PyTorch's process_events: complete the oldest closed epochs whose fences are done,
  // stopping at the first that is not (later ones are later in time too).
  void process_events() noexcept { closed.poll(finished()); }

  // process_events at the start of an allocation, with backoff (constants.h,
  // fence_poll_max_gap): after a not-done answer the next poll_gap allocations skip it.
  void poll_fences() noexcept {
    if (polls_to_skip != 0) {
      --polls_to_skip;
      return;
    }
    if (closed.poll(finished()) != 0) {
      poll_gap = 0;
      return;
    }
    poll_gap = std::min<std::size_t>(poll_gap == 0 ? 1 : poll_gap * 2, opt.fence_poll_max_gap);
    polls_to_skip = poll_gap;
  }

  // Every pending free made reusable: for empty_cache, the OOM path and release_all. False
  // when the device cannot wait now: some stay pending.
  bool drain_pending() noexcept {
    close_epoch();
    return closed.drain(finished());
  }

  // Pending blocks of pool p exist: make some reusable, cheapest way first. Returns false
  // when there are none left to wait for.
  bool reclaim_pending(Pool p) noexcept {
    const std::size_t i = pool_index(p);
    if (closed_blocks[i] == 0) {
      if (open_epoch.per_pool[i] == 0) return false;
      close_epoch();     // only the open epoch can provide: fence it now ...
      process_events();  // ... and take it at once if its work is already done
      return true;
    }
    // Polls first (the backoff may have skipped the fence since it completed), then waits
    // rather than grow.
    if (closed.poll(finished()) == 0) {
      if (!closed.wait_oldest(finished())) return false;  // cannot wait now: grow instead
      process_events();
    }
    poll_gap = 0;
    polls_to_skip = 0;
    return true;
  }

  // `tight`: under pressure a large request takes no block more than large_round bigger
  // than it (a new segment of its own size instead), so no piece is left that is too
  // small for what comes next; allocate() still splits such a block rather than fail.
  [[gnu::always_inline]] Block* find_free(Pool p, std::size_t rounded, bool tight) noexcept {
    Block* b = index_for(p, rounded).find(rounded);
    // PyTorch's max_non_split_rounding: an oversize request does not take a block so much
    // bigger that the rest (which is never split off) would be wasted.
    if (b != nullptr && oversize(rounded) && b->size >= rounded + opt.large_segment) return nullptr;
    if (tight && b != nullptr && p == Pool::large && b->size >= rounded + opt.large_round) [[unlikely]]
      return nullptr;
    return b;
  }

  // Gives the wholly free segment s back to the device and forgets it; false when the
  // device keeps it (it stays listed, as free as before).
  bool release_idle(Segment* s) noexcept {
    if (!dev.release(reinterpret_cast<void*>(s->base), s->size)) return false;
    idle[pool_index(s->pool)].remove(s);
    index_remove(s->first);
    blocks.put(s->first);
    drop_segment_stats(s);
    forget_segment_record(s);
    return true;
  }

  // Drops s from `segments` and the base map and puts its record back.
  void forget_segment_record(Segment* s) noexcept {
    segments.erase(s);
    Segment* gone = nullptr;
    segment_at.take(s->base, &gone);
    segment_records.put(s);
  }

  // Releases every wholly free segment, and every whole free page of the expandable
  // segments; returns the bytes released.
  std::size_t release_free_segments() noexcept {
    std::size_t released = 0;
    for (std::size_t p = 0; p < kPools; ++p) unmap_free(static_cast<Pool>(p), kAll, 0, 0);
    released += trim_pages();
    for (IdleSegments& list : idle) {
      for (Segment* s = list.front(); s != nullptr;) {
        Segment* next = s->idle_next;
        const std::size_t size = s->size;
        if (release_idle(s)) released += size;
        s = next;
      }
    }
    return released;
  }

  // Releases every wholly free segment of pool p, then the other pool's, least recently
  // freed first, until `want` bytes are released in all (AllocatorOptions::
  // release_free_segments). Touches only the segments it releases (idle_segments.h).
  void release_for_growth(Pool p, std::size_t want) noexcept {
    std::size_t released = 0;
    for (Segment* s = idle[pool_index(p)].front(); s != nullptr;) {
      Segment* next = s->idle_next;
      const std::size_t size = s->size;
      if (release_idle(s)) released += size;
      s = next;
    }
    for (Segment* s = idle[pool_index(other(p))].front(); s != nullptr && released < want;) {
      Segment* next = s->idle_next;
      const std::size_t size = s->size;
      if (release_idle(s)) released += size;
      s = next;
    }
  }

  void drop_segment_stats(Segment* s) noexcept {
    stats.segment.sub(s->pool, 1);
    stats.reserved_bytes.sub(s->pool, s->size);
    ++stats.num_device_free;
    emit(EventKind::segment_release, s->base, s->size, 0);
  }

  void record_oom(std::size_t requested) noexcept {
    ++stats.num_ooms;
    emit(EventKind::oom, 0, 0, requested);
  }

  // Reserves a new segment for `rounded`, through the OOM retry; the segment's single
  // free block is in the index on return. nullptr with *error = 0: out of memory (host
  // or device); with *error != 0: the device's own error, which no retry can mend.
  // own: a segment of exactly `rounded` for one block (allocate_own_segment).
  Block* grow(Pool p, std::size_t rounded, int* error, bool own = false) noexcept {
    *error = 0;
    if (!own && expandable()) {
      bool refused = false;
      Block* b = grow_expandable(p, rounded, error, &refused);
      if (!refused) return b;
      *error = 0;  // no address space for an expanse: an ordinary segment instead
    }
    std::size_t preferred = own ? rounded : segment_size_for(opt, rounded);
    try {  // before the device call, so a host allocation failure changes nothing
      segment_records.ensure(1);
      segment_at.reserve_for(segment_at.size() + 1);
      segments.reserve_insert();
      // The new first block's number is at most blocks.made() (a number not given out yet).
      if (segment_of_first.size() <= blocks.made()) segment_of_first.resize(blocks.made() + 1 + blocks.made() / 2);
    } catch (...) {
      return nullptr;
    }
    // The segment the pool rules ask for, else one of just the request's size: a 1 MiB+
    // request wants a 20 MiB segment, which a nearly full device may refuse where the
    // driver alone would still have served the request itself (min_segment still holds).
    // Only then is the cache released (it would have to be rebuilt), and both tried again.
    const std::size_t exact = own ? rounded : std::max(rounded, opt.min_segment);
    std::size_t size = preferred;
    auto reserve = [&]() {
      size = preferred;
      Reservation got = reserve_aligned(size);
      if (got.base == nullptr && got.error == 0 && exact < preferred) {
        size = exact;
        got = reserve_aligned(size);
      }
      return got;
    };
    // Near the device's limit: release every free segment, and a segment of the request's
    // own size. Otherwise, above the high-water mark, release enough free segments (and
    // all of this pool's) that the new one does not raise it.
    const Device::Headroom room = dev.headroom();
    pressure = opt.pressure_divisor != 0 && room.left < room.limit / opt.pressure_divisor;
    if (pressure) {
      release_free_segments();
      if (p == Pool::large && !own) preferred = std::max(round_up(rounded, opt.large_round), opt.min_segment);
    } else if (opt.release_free_segments) {
      const auto reserved = static_cast<std::size_t>(stats.reserved_bytes.all_current());
      if (reserved + preferred > reserved_high_water) release_for_growth(p, reserved + preferred - reserved_high_water);
    }
    Reservation r = reserve();
    if (r.base == nullptr && r.error == 0 && opt.release_on_oom) {
      drain_pending();
      release_free_segments();
      ++stats.num_alloc_retries;
      r = reserve();
    }
    if (r.base == nullptr) {
      *error = r.error;
      return nullptr;
    }
    Segment* s = segment_records.get();
    s->base = reinterpret_cast<std::uintptr_t>(r.base);
    s->size = size;
    s->pool = p;
    s->own = own;
    own_segments += own ? 1 : 0;
    Block* b = blocks.get();
    b->addr = s->base;
    b->size = size;
    b->pool = p;
    s->first = b;
    segment_of_first[b->self] = s;
    segments.insert(s);
    segment_at.insert(s->base, s);
    stats.segment.add(p, 1);
    stats.reserved_bytes.add(p, size);
    reserved_high_water = std::max(reserved_high_water, static_cast<std::size_t>(stats.reserved_bytes.all_current()));
    ++stats.num_device_alloc;
    emit(EventKind::segment_reserve, s->base, size, 0);
    b->requested = reinterpret_cast<std::uintptr_t>(s);  // see became_whole
    idle[pool_index(p)].push_back(s);  // wholly free until take() cuts it
    index_insert(b);
    return b;
  }

  // ---- expandable segments (docs/placement.md, "Expandable segments") ----------------
  // A pool's memory is pages mapped into address space it reserved once (an expanse): a
  // request no free block serves maps the pages it lacks right after a free block, or in
  // the lowest hole that has room, so the pool grows by what it needs (to the page), and
  // a free block next to the new pages merges with them. Whole free pages are unmapped
  // where ordinary segments would be released: before growth above the high-water mark,
  // near a limit, at empty_cache and out of memory. Pending blocks are never unmapped.

  static constexpr std::size_t kAll = ~std::size_t{0};

  // Whether this allocator makes expandable segments: asked of the device once, at the
  // first growth (no block exists yet, so the oversize rule can still change).
  bool expandable() noexcept {
    if (!vm_asked) [[unlikely]] {
      vm_asked = true;
      if (opt.expandable_segments) {
        const Device::VirtualMemory v = dev.virtual_memory();
        // A page must keep every block aligned, and an expanse must hold a page and its
        // guard page; a device answering otherwise gets ordinary segments.
        if (v.page != 0 && std::has_single_bit(v.page) && v.page % opt.alignment == 0 &&
            v.address_space / 2 >= v.page) {
          vm = v;
          pages.set_page(v.page);
          chunk = v.page;
          if (blocks.in_use() == 0) split_max = kAll;
        }
      }
    }
    return vm.page != 0;
  }

  std::size_t page_up(std::size_t v) const noexcept { return (v + vm.page - 1) & ~(vm.page - 1); }

  void unmapped_push(Block* u) noexcept {
    Block*& head = unmapped[pool_index(u->pool)];
    u->list_prev = nullptr;
    u->list_next = head;
    if (head != nullptr) head->list_prev = u;
    head = u;
  }
  void unmapped_remove(Block* u) noexcept {
    if (u->list_prev != nullptr) {
      u->list_prev->list_next = u->list_next;
    } else {
      unmapped[pool_index(u->pool)] = u->list_next;
    }
    if (u->list_next != nullptr) u->list_next->list_prev = u->list_prev;
    u->list_prev = u->list_next = nullptr;
  }

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
  // Walks the run from `start` exactly as map_room will map it.
  Room room_from(Block* start, std::size_t rounded) const noexcept {
    Room r{start, start->addr, 0};
    std::size_t have = 0;
    for (const Block* b = start; b != nullptr && have < rounded && b->state != BlockState::in_use; b = b->next) {
      if (b->state == BlockState::free) {
        have += b->size;
        r.end = b->addr + b->size;
        continue;
      }
      const std::size_t take = std::min(mappable(b), page_up(rounded - have));
      if (take == 0) break;
      have += take;
      r.map += take;
      r.end = b->addr + take;
      if (take < b->size) break;  // the rest stays unmapped
    }
    if (have < rounded) r.start = nullptr;
    return r;
  }
  // The lowest-addressed run of pool p with room for `rounded`; start nullptr if none.
  Room find_room(Pool p, std::size_t rounded) const noexcept {
    Room best;
    for (Block* u = unmapped[pool_index(p)]; u != nullptr; u = u->list_next) {
      Block* start = u->prev != nullptr && u->prev->state == BlockState::free ? u->prev : u;
      if (best.start != nullptr && start->addr >= best.start->addr) continue;
      const Room r = room_from(start, rounded);
      if (r.start != nullptr) best = r;
    }
    return best;
  }

  // Spare memories of the page pool a map used or gave back: they were counted in
  // reserved (in the pool they were unmapped from); now as mapped memory, or not at all.
  void spare_used(const std::array<std::size_t, kPools>& before) noexcept {
    for (std::size_t q = 0; q < kPools; ++q)
      if (pages.spare(static_cast<Pool>(q)) < before[q])
        stats.reserved_bytes.sub(static_cast<Pool>(q), before[q] - pages.spare(static_cast<Pool>(q)));
  }
  std::array<std::size_t, kPools> spare_now() const noexcept { return {pages.spare(Pool::small), pages.spare(Pool::large)}; }

  // Segment events of an expandable segment: one per page mapped or unmapped, so that a
  // trace says which addresses have memory behind them and every release pairs with a
  // reserve at its address. (Driver allocations are the page pool's memories, counted in
  // num_device_alloc; a page event is not one.)
  void emit_pages(EventKind kind, std::uintptr_t addr, std::size_t bytes) noexcept {
    if (sink == nullptr) return;
    // requested == size: pages of an expandable segment, not a segment (event.h)
    for (std::uintptr_t a = addr; a < addr + bytes; a += vm.page) emit(kind, a, vm.page, vm.page);
  }
  // The pages of every run of mapped blocks of the expanse s, as released.
  void emit_mapped_pages_released(const Segment* s) noexcept {
    if (sink == nullptr) return;
    for (const Block* b = s->first; b != nullptr;) {
      if (b->state == BlockState::unmapped) {
        b = b->next;
        continue;
      }
      const std::uintptr_t a = b->addr;  // a run of mapped blocks: whole pages
      std::uintptr_t e = b->addr;
      for (; b != nullptr && b->state != BlockState::unmapped; b = b->next) e = b->addr + b->size;
      emit_pages(EventKind::segment_release, a, e - a);
    }
  }

  // Gives back the memories none of whose pages is mapped; returns the bytes.
  std::size_t trim_pages() noexcept {
    const PagePool::Trimmed t = pages.trim();
    std::size_t bytes = 0;
    for (std::size_t q = 0; q < kPools; ++q) {
      stats.reserved_bytes.sub(static_cast<Pool>(q), t.bytes[q]);
      bytes += t.bytes[q];
    }
    stats.num_device_free += t.memories;
    return bytes;
  }

  // A new expanse for pool p, big enough for `rounded`: one unmapped block. nullptr when
  // there is no host memory for its records (*refused false), or no such address space
  // (*refused true: the device refused it, or it cannot be).
  Segment* new_expanse(Pool p, std::size_t rounded, bool* refused) noexcept {
    *refused = false;
    const std::size_t bytes = std::max(page_up(vm.address_space), page_up(rounded) + vm.page);
    if (bytes < rounded) {  // (overflow: no such address space)
      *refused = true;
      return nullptr;
    }
    try {
      blocks.ensure(1);
      segment_records.ensure(1);
      segment_at.reserve_for(segment_at.size() + 1);
      segments.reserve_insert();
      if (segment_of_first.size() <= blocks.made()) segment_of_first.resize(blocks.made() + 1 + blocks.made() / 2);
      expanses[pool_index(p)].reserve(expanses[pool_index(p)].size() + 1);
    } catch (...) {
      return nullptr;
    }
    const Reservation r = dev.reserve_address(bytes);
    if (r.base == nullptr) {
      *refused = true;
      return nullptr;
    }
    if (reinterpret_cast<std::uintptr_t>(r.base) % vm.page != 0) {  // breaks the device contract
      dev.release_address(r.base, bytes);
      *refused = true;
      return nullptr;
    }
    Segment* s = segment_records.get();
    s->base = reinterpret_cast<std::uintptr_t>(r.base);
    s->size = bytes;
    s->pool = p;
    s->expandable = true;
    s->mapped = 0;
    Block* u = blocks.get();
    u->addr = s->base;
    u->size = bytes;
    u->pool = p;
    u->state = BlockState::unmapped;
    s->first = u;
    segment_of_first[u->self] = s;
    segments.insert(s);
    segment_at.insert(s->base, s);
    expanses[pool_index(p)].push_back(s);
    unmapped_push(u);
    stats.segment.add(p, 1);
    return s;
  }

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
  void adapt_chunk() noexcept {
    const std::uint64_t per = opt.expandable_allocations_per_memory;
    if (per == 0) return;
    const std::uint64_t made = stats.num_device_alloc * per;
    if (made > stats.alloc_calls + kFreeMemories * per) {
      chunk = std::min(chunk * 2, kMaxChunk);
    } else if (made < stats.alloc_calls && chunk > vm.page) {
      chunk /= 2;
    }
  }

  // Maps the pages of `room` in address order; each mapped range becomes free and merges
  // with its free neighbours. Returns the free block that holds the request, or nullptr
  // with the device's answer in *r (what was mapped before a refusal stays, free).
  Block* map_room(const Room& room, std::size_t rounded, Reservation* r) noexcept {
    Block* b = room.start;
    while (b->state != BlockState::free || b->size < rounded) {
      Block* u = b->state == BlockState::unmapped ? b : b->next;  // (room_from's walk)
      const std::size_t have = b->state == BlockState::free ? b->size : 0;
      const std::size_t bytes = std::min(mappable(u), page_up(rounded - have));
      try {  // before the device call, so a host allocation failure changes nothing
        blocks.ensure(1);
      } catch (...) {
        *r = Reservation::out_of_memory();
        return nullptr;
      }
      const auto before = spare_now();
      const std::uint64_t made_before = pages.made(), released_before = pages.released();
      std::size_t made = 0;
      const std::size_t unit = std::max(page_up(bytes / kPiecesPerGrowth), chunk);
      const std::size_t got = pages.map(u->addr, bytes, mappable(u), unit, r, &made);
      if (got == 0) return nullptr;
      spare_used(before);
      stats.num_device_alloc += pages.made() - made_before;
      stats.num_device_free += pages.released() - released_before;  // (spare_used counted their bytes)
      emit_pages(EventKind::segment_reserve, u->addr, got);
      b = mapped(u, got);
    }
    return b;
  }

  // The first `bytes` of the unmapped block u were just mapped: they become a free block.
  Block* mapped(Block* u, std::size_t bytes) noexcept {
    const Pool p = u->pool;
    Segment* s = segment_containing(u->addr);
    unmapped_remove(u);
    if (bytes < u->size) {
      Block* rest = blocks.get();
      rest->addr = u->addr + bytes;
      rest->size = u->size - bytes;
      rest->pool = p;
      rest->state = BlockState::unmapped;
      rest->prev = u;
      rest->next = u->next;
      if (u->next != nullptr) u->next->prev = rest;
      u->next = rest;
      u->size = bytes;
      unmapped_push(rest);
    }
    s->mapped += bytes;
    stats.reserved_bytes.add(p, bytes);
    reserved_high_water = std::max(reserved_high_water, static_cast<std::size_t>(stats.reserved_bytes.all_current()));
    u->state = BlockState::free;
    u->requested = 0;
    return merge_free(u);
  }

  // Unmaps the memories of pool p's expanses that lie wholly in a free block outside
  // [lo, hi) (a memory is unmapped whole: page_pool.h), until `want` bytes are unmapped
  // (kAll: every one). They become spare: still reserved, until a map takes them or
  // trim_pages gives them back. Stops where the device keeps one mapped (a capture
  // underway). Returns the bytes unmapped.
  std::size_t unmap_free(Pool p, std::size_t want, std::uintptr_t lo, std::uintptr_t hi) noexcept {
    std::size_t released = 0;
    if (vm.page == 0) return 0;
    for (Segment* s : expanses[pool_index(p)]) {
      for (Block* b = s->first; b != nullptr && released < want;) {
        const PagePool::Mapping m = b->state == BlockState::free && b->size >= vm.page &&
                                            !(b->addr < hi && b->addr + b->size > lo)
                                        ? pages.mapping_from(b->addr)
                                        : PagePool::Mapping{};
        if (m.size == 0 || m.start + m.size > b->addr + b->size) {
          b = b->next;
          continue;
        }
        try {
          blocks.ensure(2);
        } catch (...) {
          return released;
        }
        if (!pages.unmap(p, m.start)) return released;
        emit_pages(EventKind::segment_release, m.start, m.size);
        b = unmapped_range(s, b, m.start, m.size);  // b's free rest after it, if any, is next
        released += m.size;
      }
    }
    return released;
  }

  // [a, a + bytes) of the free block b (one memory) was just unmapped: b splits into its
  // free head, the unmapped range (merged with unmapped neighbours) and its free tail.
  // Returns the block after the unmapped range (the free tail, if any).
  Block* unmapped_range(Segment* s, Block* b, std::uintptr_t a, std::size_t bytes) noexcept {
    const Pool p = b->pool;
    const std::uintptr_t end = b->addr + b->size;
    index_remove(b);
    stats.inactive_split.sub(p, 1);  // an expanse's blocks are always split (its guard page)
    stats.inactive_split_bytes.sub(p, b->size);
    auto add_free = [&](Block* f) {
      index_insert(f);
      stats.inactive_split.add(p, 1);
      stats.inactive_split_bytes.add(p, f->size);
    };
    Block* mid = b;
    if (a > b->addr) {
      mid = blocks.get();
      mid->addr = a;
      mid->pool = p;
      mid->prev = b;
      mid->next = b->next;
      if (b->next != nullptr) b->next->prev = mid;
      b->next = mid;
      b->size = a - b->addr;
      add_free(b);
    }
    mid->state = BlockState::unmapped;
    mid->requested = 0;
    mid->size = bytes;
    if (a + bytes < end) {
      Block* tail = blocks.get();
      tail->addr = a + bytes;
      tail->size = end - (a + bytes);
      tail->pool = p;
      tail->state = BlockState::free;
      tail->prev = mid;
      tail->next = mid->next;
      if (mid->next != nullptr) mid->next->prev = tail;
      mid->next = tail;
      add_free(tail);
    }
    if (Block* prev = mid->prev; prev != nullptr && prev->state == BlockState::unmapped) {
      prev->size += mid->size;
      prev->next = mid->next;
      if (mid->next != nullptr) mid->next->prev = prev;
      blocks.put(mid);
      mid = prev;
    } else {
      unmapped_push(mid);
    }
    if (Block* next = mid->next; next != nullptr && next->state == BlockState::unmapped) {
      unmapped_remove(next);
      mid->size += next->size;
      mid->next = next->next;
      if (next->next != nullptr) next->next->prev = mid;
      blocks.put(next);
    }
    s->mapped -= bytes;  // (still reserved: a spare memory of pool p)
    return mid->next;
  }

  // Unmaps free pages outside the room, pool p's first, then the other pool's, until
  // `want` bytes are unmapped (release before growth, with pages for segments).
  void unmap_for_growth(Pool p, std::size_t want, const Room& room) noexcept {
    want = std::min(want, room.map);  // pages to move, not to give back
    const std::uintptr_t lo = room.start->addr, hi = room.end;
    std::size_t released = unmap_free(p, want, lo, hi);
    if (released < want) released += unmap_free(other(p), want - released, lo, hi);
    // Ordinary segments (own segments the device kept) are released as before.
    if (released < want) release_for_growth(p, want - released);
  }

  // grow() with expandable segments: the pages `rounded` lacks, mapped where it fits.
  // *refused: no expanse has room and no new one can be reserved (grow() then makes an
  // ordinary segment).
  Block* grow_expandable(Pool p, std::size_t rounded, int* error, bool* refused) noexcept {
    adapt_chunk();
    Room room = find_room(p, rounded);
    if (room.start == nullptr) {
      bool& no_space = expanse_refused[pool_index(p)];
      *refused = no_space;
      if (no_space) return nullptr;
      if (new_expanse(p, rounded, refused) == nullptr) {
        // A pool's usual range refused: not asked again. A range larger than usual, for
        // one huge request, may be refused where the usual one would not.
        if (*refused && page_up(rounded) + vm.page <= page_up(vm.address_space)) no_space = true;
        return nullptr;  // (not refused: no host memory, out of memory)
      }
      room = find_room(p, rounded);
      if (room.start == nullptr) return nullptr;
    }
    // As grow(): near the limit, free pages move to the room rather than new memory be
    // made; otherwise only above the high-water mark, enough that it is not raised.
    const Device::Headroom headroom = dev.headroom();
    const bool near_limit = opt.pressure_divisor != 0 && headroom.left < headroom.limit / opt.pressure_divisor;
    const auto reserved = static_cast<std::size_t>(stats.reserved_bytes.all_current());
    if (near_limit) {
      unmap_for_growth(p, kAll, room);
    } else if (opt.release_free_segments && reserved + room.map > reserved_high_water) {
      unmap_for_growth(p, reserved + room.map - reserved_high_water, room);
    }
    Reservation r;
    Block* b = map_room(room, rounded, &r);
    if (b == nullptr && r.error == 0 && opt.release_on_oom) {
      drain_pending();
      release_free_segments();
      ++stats.num_alloc_retries;
      room = find_room(p, rounded);
      if (room.start != nullptr) b = map_room(room, rounded, &r);
    }
    trim_pages();  // memory whose pages all moved elsewhere, or were not needed
    if (b == nullptr) *error = r.error;
    return b;
  }

  Reservation reserve_aligned(std::size_t size) noexcept {
    Reservation r = dev.reserve(size);
    if (r.base != nullptr && reinterpret_cast<std::uintptr_t>(r.base) % opt.alignment != 0) {
      // Breaks the device contract; treat as a refusal rather than hand out misaligned blocks.
      dev.release(r.base, size);
      return Reservation::out_of_memory();
    }
    return r;
  }

  // Takes the free block b for a request: split off the rest when allowed, account.
  [[gnu::always_inline]] void* take(Block* b, std::size_t rounded, std::size_t requested) noexcept {
    index_remove(b);
    const Pool p = b->pool;
    const bool was_split = b->is_split();
    if (!was_split) [[unlikely]]
      idle[pool_index(p)].remove(whole_segment(b));
    const std::size_t remaining = b->size - rounded;
    if (!oversize(rounded) && remaining >= opt.min_split) {
      Block* r = blocks.get();
      r->addr = b->addr + rounded;
      r->size = remaining;
      r->pool = b->pool;
      r->prev = b;
      r->next = b->next;
      if (b->next != nullptr) b->next->prev = r;
      b->next = r;
      b->size = rounded;
      index_insert(r);
      if (was_split) {
        stats.inactive_split_bytes.sub(p, rounded);  // an inactive split block shrinks
      } else {
        stats.inactive_split.add(p, 1);  // a new inactive split block appears
        stats.inactive_split_bytes.add(p, remaining);
      }
    } else if (was_split) {
      stats.inactive_split.sub(p, 1);
      stats.inactive_split_bytes.sub(p, b->size);
    }
    b->state = BlockState::in_use;
    b->requested = requested;
    live.insert(b->addr, LiveBlock::make(*b, unit_shift));
    stats.allocation.add(p, 1);
    stats.allocated_bytes.add(p, b->size);
    stats.requested_bytes.add(p, requested);
    stats.active.add(p, 1);
    stats.active_bytes.add(p, b->size);
    ++stats.alloc_calls;
    emit(EventKind::alloc, b->addr, b->size, requested);
    return reinterpret_cast<void*>(b->addr);
  }

  // The own segment (allocate_own_segment) that starts at addr, or nullptr.
  [[gnu::noinline, gnu::cold]] Segment* own_segment_at(std::uintptr_t addr) const noexcept {
    Segment* const* s = segment_at.find(addr);
    return s != nullptr && (*s)->own ? *s : nullptr;
  }

  // The segment s, whose one block b is free and in no index, went back to the device:
  // forget both.
  [[gnu::noinline, gnu::cold]] void forget_released_own(Segment* s, Block* b) noexcept {
    blocks.put(b);
    drop_segment_stats(s);
    --own_segments;
    forget_segment_record(s);
  }

  // free() of an own segment's block: the driver's free is the program's own, and
  // synchronizes as cudaFree does, so the segment goes back at once, with no fence. False
  // when the device keeps it (a capture underway): from then on it is an ordinary segment,
  // its block fenced like any free, and released by empty_cache.
  [[gnu::noinline, gnu::cold]] bool free_own_now(Block* b, Pool p) noexcept {
    Segment* s = own_segment_at(b->addr);
    if (s == nullptr) return false;
    if (!dev.release(reinterpret_cast<void*>(s->base), s->size)) {
      s->own = false;
      --own_segments;
      return false;
    }
    stats.active.sub(p, 1);
    stats.active_bytes.sub(p, b->size);
    stats.requested_bytes.sub(p, b->requested);
    emit(EventKind::free_completed, b->addr, b->size, 0);
    forget_released_own(s, b);
    return true;
  }

  // own: a segment of its own for this one block (allocate_own_segment): no free block is
  // looked for, and the segment is exactly the rounded request. One body for both, so the
  // hot path's helpers keep a single caller each (and stay inlined).
  [[gnu::noinline]] AllocResult allocate(std::size_t bytes, bool own) noexcept {
    if (bytes > kMaxRequest) {
      record_oom(bytes);
      return {nullptr, AllocStatus::out_of_memory};
    }
    try {
      reserve_capacity();
    } catch (...) {  // host memory for the index is gone: nothing has changed
      record_oom(bytes);
      return {nullptr, AllocStatus::out_of_memory};
    }
    // round_size() without its per-call bit_ceil and saturation: opt is sanitized (the
    // alignment a power of two) and bytes <= kMaxRequest, so the mask cannot overflow.
    const std::size_t rounded = (bytes + align_mask) & ~align_mask;
    const Pool p = pool_for(opt, rounded);
    if (!closed.empty()) poll_fences();
    Block* b = nullptr;
    if (!own) [[likely]] {
      b = find_free(p, rounded, pressure);
      // Waiting for a pending free of this pool is cheaper than a new segment.
      while (b == nullptr && reclaim_pending(p)) b = find_free(p, rounded, pressure);
    }
    if (b == nullptr) {
      int error = 0;
      b = grow(p, rounded, &error, own);
      if (b == nullptr && error != 0) {
        ++stats.num_device_errors;
        return {nullptr, AllocStatus::device_error, error};
      }
      if (b == nullptr) b = find_free(p, rounded, false);  // tight placement refused a fit
    }
    if (b == nullptr) {
      record_oom(bytes);
      return {nullptr, AllocStatus::out_of_memory};
    }
    return {take(b, rounded, bytes), AllocStatus::ok};
  }

  // Reads one pointer-map bucket and never the block record (until the block's epoch
  // completes): see LiveBlock (block.h) and epoch.h. requested_bytes drops when the free
  // completes, with active_bytes, as PyTorch's does (its free_block).
  [[gnu::always_inline]] FreeStatus free(const void* ptr) noexcept {
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    LiveBlock lb;
    if (!live.take(addr, &lb)) {
      if (segment_containing(addr) == nullptr) return FreeStatus::not_owned;
      ++stats.invalid_frees;
      return FreeStatus::invalid;
    }
    Block* b = blocks.at(lb.block);
    // Its completion, up to an epoch of frees later, will read and merge the record: start
    // loading it now (a prefetch, so nothing here waits for it). Measured 4 ns per pair
    // at 10^4 live blocks.
    __builtin_prefetch(b, 1);
    const Pool p = lb.pool();
    const std::size_t size = lb.size_in_record() ? b->size : lb.size(unit_shift);
    stats.allocation.sub(p, 1);
    stats.allocated_bytes.sub(p, size);
    ++stats.free_calls;
    emit(EventKind::free_requested, addr, size, 0);
    if (own_segments != 0 && free_own_now(b, p)) [[unlikely]]
      return FreeStatus::ok;
    if (fence_mode == FenceMode::none || reuse_now.load(std::memory_order_relaxed)) {
      complete(b);
      return FreeStatus::ok;
    }
    open_epoch.push(b, p, size);
    if (fence_mode == FenceMode::per_free || open_epoch.count >= epoch_max_blocks ||
        open_epoch.bytes >= opt.epoch_max_bytes)
      close_epoch();
    return FreeStatus::ok;
  }

  std::size_t empty_cache() noexcept {
    drain_pending();
    const std::size_t released = release_free_segments();
    ++stats.num_empty_cache;
    emit(EventKind::empty_cache, 0, released, 0);
    return released;
  }

  void release_all() noexcept {
    if (!drain_pending()) return;  // work may still use pending blocks: release nothing
    segments.remove_if([this](Segment* s) {
      if (s->expandable) {
        if (!release_expanse(s)) return false;
      } else if (!dev.release(reinterpret_cast<void*>(s->base), s->size)) {
        return false;  // the device kept it, so do we
      }
      if (!s->expandable) ++stats.num_device_free;
      forget_segment(s);
      return true;
    });
  }

  // The device's memory is gone with its context: every segment and block is forgotten,
  // no device call made, pending fences given back unchecked (their events went too).
  void drop_device_memory() noexcept {
    closed.drop([](Epoch&) noexcept {});
    closed_blocks = {};
    reset_open_epoch();
    segments.for_each([this](Segment* s) {
      if (!s->expandable) ++segments_dropped;
      forget_segment(s);
    });
    segments.clear();
    for (std::size_t q = 0; q < kPools; ++q) stats.reserved_bytes.sub(static_cast<Pool>(q), pages.spare(static_cast<Pool>(q)));
    segments_dropped += pages.forget();
    ++stats.num_context_resets;
  }

  // Unmaps every memory of the expanse s (live blocks included), gives them back, and
  // frees its address range. false: the device kept some of it (the allocator keeps the
  // segment).
  bool release_expanse(Segment* s) noexcept {
    emit_mapped_pages_released(s);  // (before: a device that keeps some is an error anyway)
    for (PagePool::Mapping m = pages.mapping_from(s->base); m.size != 0 && m.start < s->base + s->size;
         m = pages.mapping_from(m.start + m.size)) {
      if (!pages.unmap(s->pool, m.start)) return false;
      s->mapped -= m.size;  // (spare now: trim_pages gives it back)
    }
    trim_pages();
    return dev.release_address(reinterpret_cast<void*>(s->base), s->size);
  }

  // Drops one segment and its blocks from every structure and statistic, as if each live
  // block had been freed and the segment released (the caller counts the release).
  // Pending blocks must no longer be listed in an epoch that will complete them.
  void forget_segment(Segment* s) noexcept {
    const Pool p = s->pool;
    if (s->own) --own_segments;
    if (s->expandable && s->mapped != 0) emit_mapped_pages_released(s);  // (release_expanse did)
    for (Block* b = s->first; b != nullptr;) {
      Block* next = b->next;
      if (b->state == BlockState::unmapped) unmapped_remove(b);
      if (b->state == BlockState::in_use) {
        LiveBlock lb;
        if (live.take(b->addr, &lb)) {  // allocated (else pending: its free was counted)
          stats.allocation.sub(p, 1);
          stats.allocated_bytes.sub(p, b->size);
          emit(EventKind::free_requested, b->addr, b->size, 0);
        }
        stats.active.sub(p, 1);
        stats.active_bytes.sub(p, b->size);
        stats.requested_bytes.sub(p, b->requested);
        emit(EventKind::free_completed, b->addr, b->size, 0);
      } else if (b->state == BlockState::free) {
        index_remove(b);
        if (b->is_split()) {
          stats.inactive_split.sub(p, 1);
          stats.inactive_split_bytes.sub(p, b->size);
        }
      }
      blocks.put(b);
      b = next;
    }
    stats.segment.sub(p, 1);
    stats.reserved_bytes.sub(p, s->held());
    if (!s->expandable) emit(EventKind::segment_release, s->base, s->size, 0);
    if (s->idle) idle[pool_index(p)].remove(s);
    if (s->expandable) std::erase(expanses[pool_index(p)], s);
    Segment* gone = nullptr;
    segment_at.take(s->base, &gone);
    segment_records.put(s);
  }

  BlockSnapshot block_snapshot(const Block* b) const noexcept {
    // Allocated means in the pointer map; an in-use block that is not is a pending free.
    BlockSnapshotState state = BlockSnapshotState::inactive;
    if (b->state == BlockState::in_use)
      state = live.find(b->addr) != nullptr ? BlockSnapshotState::active_allocated
                                            : BlockSnapshotState::active_pending_free;
    return {b->addr, b->size, state == BlockSnapshotState::inactive ? 0 : b->requested, state};
  }

  std::vector<std::string> check() const;
};

std::vector<std::string> CachingAllocator::Impl::check() const {
  std::vector<std::string> v;
  auto fail = [&v](std::string msg) { v.push_back(std::move(msg)); };

  struct Tally {
    std::int64_t segments = 0, reserved = 0;
    std::int64_t allocated = 0, allocated_bytes = 0, requested_bytes = 0;
    std::int64_t pending = 0, pending_bytes = 0;
    std::int64_t free = 0, free_bytes = 0;
    std::int64_t split_free = 0, split_free_bytes = 0;
    std::int64_t unmapped = 0;
  };
  std::array<Tally, kPools> t{};
  const std::size_t max_blocks = blocks.in_use() + 1;  // bounds every walk over a broken list

  // Which in-use blocks are pending: those the epochs list (each exactly once).
  std::unordered_map<const Block*, int> in_epochs;
  auto list_epoch = [&](const Epoch& e) {
    for (std::uint32_t i = 0; i < e.count && i < Epoch::kCapacity; ++i) ++in_epochs[e.blocks[i]];
  };
  list_epoch(open_epoch);
  for (std::size_t i = 0; i < closed.size(); ++i) list_epoch(closed.at(i));

  // The segments in address order (check may allocate; the hot path never does).
  std::vector<const Segment*> segs;
  segs.reserve(segments.size());
  segments.for_each([&segs](const Segment* s) { segs.push_back(s); });
  if (!segments.consistent()) fail("the segment index is inconsistent (bases unsorted or stale, or a run empty)");

  std::uintptr_t prev_end = 0;
  std::uint64_t device_allocations = pages.memories();  // ordinary segments and memories
  std::size_t mapped_in_expanses = 0;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const Segment* s = segs[i];
    Tally& tp = t[pool_index(s->pool)];
    tp.segments += 1;
    tp.reserved += static_cast<std::int64_t>(s->held());
    std::size_t mapped = 0;
    if (s->expandable && (vm.page == 0 || s->mapped % vm.page != 0 || s->base % vm.page != 0))
      fail(fmt::format("expandable segment {:#x}: not in whole pages", s->base));
    if (s->expandable) {
      mapped_in_expanses += s->mapped;
    } else {
      ++device_allocations;
    }
    if (i > 0 && s->base < prev_end)
      fail(fmt::format("segment {:#x} overlaps or is out of order with the previous one", s->base));
    prev_end = s->base + s->size;
    if (s->base % opt.alignment != 0) fail(fmt::format("segment {:#x} is misaligned", s->base));
    std::uintptr_t cursor = s->base;
    const Block* prev = nullptr;
    std::size_t n = 0;
    for (const Block* b = s->first; b != nullptr; prev = b, b = b->next) {
      if (++n > max_blocks) {
        fail(fmt::format("segment {:#x}: block list does not end", s->base));
        break;
      }
      if (b->pool != s->pool) fail(fmt::format("block {:#x} names another pool than its segment", b->addr));
      if (b->prev != prev) fail(fmt::format("block {:#x}: prev link is wrong", b->addr));
      if (b->addr != cursor)
        fail(fmt::format("segment {:#x}: block at {:#x} where {:#x} was expected (gap or overlap)",
                         s->base, b->addr, cursor));
      if (b->size == 0 || b->size % opt.alignment != 0)
        fail(fmt::format("block {:#x}: size {} is not a positive multiple of the alignment", b->addr, b->size));
      if (b->addr % opt.alignment != 0) fail(fmt::format("block {:#x} is misaligned", b->addr));
      cursor = b->addr + b->size;
      if (b->state != BlockState::unmapped) {
        mapped += b->size;
        if (s->expandable && vm.page != 0 && !pages.covered(b->addr, b->size))
          fail(fmt::format("block {:#x} of an expandable segment is not all mapped", b->addr));
      }
      const auto bytes = static_cast<std::int64_t>(b->size);
      const LiveBlock* lb = live.find(b->addr);
      const auto listed = in_epochs.find(b);
      const bool pending = listed != in_epochs.end();
      switch (b->state) {
        case BlockState::in_use:
          if (lb != nullptr && pending)
            fail(fmt::format("block {:#x} is both allocated (pointer map) and pending (epoch)", b->addr));
          if (lb == nullptr && !pending)
            fail(fmt::format("in-use block {:#x} is neither in the pointer map nor in an epoch", b->addr));
          if (pending) {
            if (listed->second != 1) fail(fmt::format("pending block {:#x} is in {} epochs", b->addr, listed->second));
            tp.pending += 1;
            tp.pending_bytes += bytes;
            tp.requested_bytes += static_cast<std::int64_t>(b->requested);
          } else if (lb != nullptr) {
            tp.allocated += 1;
            tp.allocated_bytes += bytes;
            tp.requested_bytes += static_cast<std::int64_t>(b->requested);
            if (blocks.at(lb->block) != b)
              fail(fmt::format("pointer map entry {:#x} names another block record", b->addr));
            if (lb->pool() != b->pool) fail(fmt::format("pointer map entry {:#x}: wrong pool", b->addr));
            if (lb->size_in_record() ? (b->size >> unit_shift) < LiveBlock::kSizeInRecord
                                     : lb->size(unit_shift) != b->size)
              fail(fmt::format("pointer map entry {:#x}: wrong size for the block's {}", b->addr, b->size));
          }
          if (b->requested > b->size || b->requested == 0)
            fail(fmt::format("in-use block {:#x}: requested {} outside (0, size {}]", b->addr, b->requested, b->size));
          break;
        case BlockState::free:
          tp.free += 1;
          tp.free_bytes += bytes;
          if (b->is_split()) {
            tp.split_free += 1;
            tp.split_free_bytes += bytes;
          }
          if (prev != nullptr && prev->state == BlockState::free)
            fail(fmt::format("blocks {:#x} and {:#x} are adjacent and both free", prev->addr, b->addr));
          if (lb != nullptr) fail(fmt::format("free block {:#x} is in the pointer map", b->addr));
          if (pending) fail(fmt::format("free block {:#x} is in an epoch", b->addr));
          break;
        case BlockState::unmapped:
          tp.unmapped += 1;
          if (!s->expandable) fail(fmt::format("block {:#x} is unmapped in an ordinary segment", b->addr));
          if (vm.page != 0 && (b->addr % vm.page != 0 || b->size % vm.page != 0))
            fail(fmt::format("unmapped block {:#x} is not whole pages", b->addr));
          if (prev != nullptr && prev->state == BlockState::unmapped)
            fail(fmt::format("blocks {:#x} and {:#x} are adjacent and both unmapped", prev->addr, b->addr));
          if (lb != nullptr || pending) fail(fmt::format("unmapped block {:#x} is in use", b->addr));
          break;
      }
    }
    if (s->expandable) {
      if (mapped != s->mapped)
        fail(fmt::format("expandable segment {:#x}: {} bytes mapped, its blocks hold {}", s->base, s->mapped, mapped));
      if (prev == nullptr || prev->state != BlockState::unmapped || prev->size < vm.page)
        fail(fmt::format("expandable segment {:#x} does not end with its unmapped guard page", s->base));
      if (std::find(expanses[pool_index(s->pool)].begin(), expanses[pool_index(s->pool)].end(), s) ==
          expanses[pool_index(s->pool)].end())
        fail(fmt::format("expandable segment {:#x} is not listed in its pool", s->base));
    }
    if (cursor != s->base + s->size)
      fail(fmt::format("segment {:#x}: blocks end at {:#x}, the segment at {:#x}", s->base, cursor,
                       s->base + s->size));
  }

  // Wholly free segments: exactly those are listed, each once, in its own pool's list;
  // the base map holds exactly the segments.
  {
    std::size_t wholly = 0;
    for (const Segment* s : segs) {
      if (s->wholly_free() != s->idle)
        fail(fmt::format("segment {:#x} is {}wholly free but {}listed as such", s->base, s->wholly_free() ? "" : "not ",
                         s->idle ? "" : "not "));
      wholly += s->wholly_free() ? 1 : 0;
      if (s->wholly_free() && whole_segment(s->first) != s)
        fail(fmt::format("wholly free segment {:#x}: its block does not name it", s->base));
      Segment* const* at = segment_at.find(s->base);
      if (at == nullptr || *at != s) fail(fmt::format("segment {:#x} is not in the base map", s->base));
      if (s->first->self >= segment_of_first.size() || segment_of_first[s->first->self] != s)
        fail(fmt::format("segment {:#x} is not found from its first block", s->base));
    }
    if (segment_at.size() != segments.size())
      fail(fmt::format("the base map holds {} segments, {} are held", segment_at.size(), segments.size()));
    std::size_t listed = 0;
    for (std::size_t p = 0; p < kPools; ++p) {
      std::size_t n = 0;
      const Segment* prev = nullptr;
      for (const Segment* s = idle[p].front(); s != nullptr && n <= segments.size(); prev = s, s = s->idle_next) {
        ++n;
        if (!s->idle || pool_index(s->pool) != p || s->idle_prev != prev)
          fail(fmt::format("{} pool's list of wholly free segments: entry {:#x} is wrong", pool_name(static_cast<Pool>(p)),
                           s->base));
      }
      if (n != idle[p].size())
        fail(fmt::format("{} pool: {} wholly free segments listed, the list counts {}", pool_name(static_cast<Pool>(p)), n,
                         idle[p].size()));
      listed += n;
    }
    if (listed != wholly) fail(fmt::format("{} segments are wholly free, {} listed", wholly, listed));
  }

  // Pages: the page pool's own invariants; its mapped pages are exactly the expanses'.
  if (vm.page != 0) {
    for (std::string& m : pages.check()) fail(std::move(m));
    if (pages.mapped_bytes() != mapped_in_expanses)
      fail(fmt::format("the page pool maps {} bytes, the expandable segments {}", pages.mapped_bytes(), mapped_in_expanses));
  }
  for (std::size_t p = 0; p < kPools; ++p) t[p].reserved += static_cast<std::int64_t>(pages.spare(static_cast<Pool>(p)));

  // Unmapped ranges: each pool's list holds exactly its unmapped blocks, each once.
  for (std::size_t p = 0; p < kPools; ++p) {
    std::int64_t n = 0;
    const Block* lp = nullptr;
    for (const Block* b = unmapped[p]; b != nullptr && n <= static_cast<std::int64_t>(max_blocks); lp = b, b = b->list_next) {
      ++n;
      if (b->state != BlockState::unmapped || pool_index(b->pool) != p || b->list_prev != lp)
        fail(fmt::format("{} pool's list of unmapped ranges: entry {:#x} is wrong", pool_name(static_cast<Pool>(p)), b->addr));
    }
    if (n != t[p].unmapped)
      fail(fmt::format("{} pool: {} unmapped blocks, {} listed", pool_name(static_cast<Pool>(p)), t[p].unmapped, n));
  }

  // Free index: every entry a free block of the right pool, class and oversize side; the
  // bitmaps agree with the lists; every free block is indexed (counts match).
  std::array<std::int64_t, kPools> indexed{};
  for (std::size_t p = 0; p < kPools; ++p) {
    for (std::size_t o = 0; o < 2; ++o) {
      const FreeIndex& fi = index_[p][o];
      std::size_t listed = 0;
      fi.for_each_class([&](FreeIndex::Class c, const Block* head) {
        if ((head != nullptr) != fi.bitmap_says_nonempty(c))
          fail(fmt::format("{} pool index: bitmap disagrees with class ({}, {})", pool_name(static_cast<Pool>(p)), c.fl, c.sl));
        const Block* lp = nullptr;
        std::size_t n = 0;
        for (const Block* b = head; b != nullptr; lp = b, b = b->list_next) {
          if (++n > max_blocks) {
            fail(fmt::format("free list ({}, {}) does not end", c.fl, c.sl));
            break;
          }
          ++listed;
          if (b->list_prev != lp) fail(fmt::format("free list entry {:#x}: back link is wrong", b->addr));
          if (b->state != BlockState::free)
            fail(fmt::format("free list holds block {:#x} that is in use", b->addr));
          if (pool_index(b->pool) != p) fail(fmt::format("block {:#x} is indexed in the wrong pool", b->addr));
          const FreeIndex::Class bc = fi.class_of(b->size);
          if (bc.fl != c.fl || bc.sl != c.sl)
            fail(fmt::format("block {:#x} of {} bytes is in class ({}, {}) instead of ({}, {})", b->addr,
                             b->size, c.fl, c.sl, bc.fl, bc.sl));
          if (oversize(b->size) != (o == 1))
            fail(fmt::format("block {:#x} is on the wrong side of max_split_size", b->addr));
        }
      });
      for (unsigned fl = 0; fl < FreeIndex::kFl; ++fl)
        if (!fi.fl_bit_matches(fl)) fail(fmt::format("first-level bitmap bit {} is wrong", fl));
      if (listed != fi.count()) fail(fmt::format("free index counts {} blocks, lists hold {}", fi.count(), listed));
      indexed[p] += static_cast<std::int64_t>(listed);
    }
    if (indexed[p] != t[p].free)
      fail(fmt::format("{} pool: {} free blocks in segments, {} in the free index", pool_name(static_cast<Pool>(p)),
                       t[p].free, indexed[p]));
  }

  // Epochs: the open one unfenced, every closed one fenced; together they hold exactly
  // the pending blocks, each once, and their per-pool counts and bytes add up.
  {
    std::array<std::int64_t, kPools> queued{};
    std::array<std::size_t, kPools> closed_sum{};
    auto walk = [&](const Epoch& e, const char* which) {
      std::array<std::size_t, kPools> n{};
      std::size_t bytes = 0;
      if (e.count > Epoch::kCapacity) {
        fail(fmt::format("{} epoch counts {} blocks, more than it can hold", which, e.count));
        return n;
      }
      for (std::uint32_t i = 0; i < e.count; ++i) {
        const Block* b = e.blocks[i];
        if (b == nullptr || b->state != BlockState::in_use) {
          fail(fmt::format("{} epoch entry {} is not an in-use block", which, i));
          continue;
        }
        ++n[pool_index(b->pool)];
        bytes += b->size;
      }
      const std::array<std::size_t, kPools> counted{e.per_pool[0], e.per_pool[1]};
      if (n != counted)
        fail(fmt::format("{} epoch: counts {}+{} blocks, holds {}+{}", which, counted[0], counted[1], n[0], n[1]));
      if (bytes != e.bytes) fail(fmt::format("{} epoch: counts {} bytes, holds {}", which, e.bytes, bytes));
      for (std::size_t p = 0; p < kPools; ++p) queued[p] += static_cast<std::int64_t>(n[p]);
      return n;
    };
    if (open_epoch.fence != kNoFence) fail("the open epoch has a fence");
    walk(open_epoch, "open");
    for (std::size_t i = 0; i < closed.size(); ++i) {
      const Epoch& e = closed.at(i);
      if (e.fence == kNoFence) fail(fmt::format("closed epoch {} has no fence", i));
      if (e.empty()) fail(fmt::format("closed epoch {} is empty", i));
      const auto n = walk(e, "closed");
      for (std::size_t p = 0; p < kPools; ++p) closed_sum[p] += n[p];
    }
    if (closed_sum != closed_blocks) fail("closed epochs' per-pool block counts are wrong");
    for (std::size_t p = 0; p < kPools; ++p)
      if (queued[p] != t[p].pending)
        fail(fmt::format("{} pool: {} pending blocks in segments, {} in epochs", pool_name(static_cast<Pool>(p)),
                         t[p].pending, queued[p]));
  }

  // Pointer map: exactly the allocated blocks.
  std::int64_t allocated_total = t[0].allocated + t[1].allocated;
  if (static_cast<std::int64_t>(live.size()) != allocated_total)
    fail(fmt::format("pointer map holds {} entries, {} blocks are allocated", live.size(), allocated_total));
  live.for_each([&](std::uintptr_t key, const LiveBlock& lb) {
    const Block* r = lb.block < blocks.made() ? blocks.at(lb.block) : nullptr;
    if (r == nullptr || r->addr != key || r->state != BlockState::in_use)
      fail(fmt::format("pointer map entry {:#x} is not an allocated block at that address", key));
  });

  // Statistics against the tally, per pool and for all pools.
  const DeviceStats ds = view();
  auto expect = [&](const char* name, const PoolCounter& c, std::int64_t small, std::int64_t large) {
    if (c.pool[0].current != small) fail(fmt::format("stats {} (small pool) = {}, counted {}", name, c.pool[0].current, small));
    if (c.pool[1].current != large) fail(fmt::format("stats {} (large pool) = {}, counted {}", name, c.pool[1].current, large));
    if (c.all.current != small + large) fail(fmt::format("stats {} (all) = {}, counted {}", name, c.all.current, small + large));
  };
  expect("segment", ds.segment, t[0].segments, t[1].segments);
  expect("reserved_bytes", ds.reserved_bytes, t[0].reserved, t[1].reserved);
  expect("allocation", ds.allocation, t[0].allocated, t[1].allocated);
  expect("allocated_bytes", ds.allocated_bytes, t[0].allocated_bytes, t[1].allocated_bytes);
  expect("requested_bytes", ds.requested_bytes, t[0].requested_bytes, t[1].requested_bytes);
  expect("active", ds.active, t[0].allocated + t[0].pending, t[1].allocated + t[1].pending);
  expect("active_bytes", ds.active_bytes, t[0].allocated_bytes + t[0].pending_bytes,
         t[1].allocated_bytes + t[1].pending_bytes);
  expect("inactive_split", ds.inactive_split, t[0].split_free, t[1].split_free);
  expect("inactive_split_bytes", ds.inactive_split_bytes, t[0].split_free_bytes, t[1].split_free_bytes);
  if (static_cast<std::int64_t>(ds.free_blocks) != t[0].free + t[1].free)
    fail(fmt::format("stats free_blocks = {}, counted {}", ds.free_blocks, t[0].free + t[1].free));
  for (std::size_t p = 0; p < kPools; ++p)
    if (t[p].reserved != t[p].allocated_bytes + t[p].pending_bytes + t[p].free_bytes +
                            static_cast<std::int64_t>(pages.spare(static_cast<Pool>(p))))
      fail(fmt::format("{} pool: reserved {} != allocated + pending + free + spare memory", pool_name(static_cast<Pool>(p)),
                       t[p].reserved));
  if (stats.num_device_alloc - stats.num_device_free - segments_dropped != device_allocations)
    fail("device alloc calls - device free calls - segments lost with a context != segments and memories");
  return v;
}

// ---- public interface: lock, then delegate -------------------------------------------

CachingAllocator::CachingAllocator(Device& device, int device_index, const AllocatorOptions& options)
    : impl_(std::make_unique<Impl>(device, device_index, options)) {}

// Memory stays with the device (never freed at exit); the fence queue gives every token
// back exactly once.
CachingAllocator::~CachingAllocator() = default;

AllocResult CachingAllocator::allocate(std::size_t bytes) noexcept {
  if (bytes == 0) return {nullptr, AllocStatus::invalid_size};
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const AllocResult r = impl_->allocate(bytes, false);
  impl_->publish_live();
  return r;
}

void CachingAllocator::set_reuse_at_once(bool on) noexcept {
  impl_->reuse_now.store(on, std::memory_order_relaxed);
}
bool CachingAllocator::reuse_at_once() const noexcept {
  return impl_->reuse_now.load(std::memory_order_relaxed);
}

AllocResult CachingAllocator::allocate_own_segment(std::size_t bytes) noexcept {
  if (bytes == 0) return {nullptr, AllocStatus::invalid_size};
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const AllocResult r = impl_->allocate(bytes, true);
  impl_->publish_live();
  return r;
}

FreeStatus CachingAllocator::free(void* ptr) noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const FreeStatus r = impl_->free(ptr);
  impl_->publish_live_held();
  return r;
}

std::size_t CachingAllocator::empty_cache() noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const std::size_t released = impl_->empty_cache();
  impl_->publish_live();
  return released;
}

void CachingAllocator::release_all() noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  impl_->release_all();
  impl_->publish_live();
}

void CachingAllocator::drop_device_memory() noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  impl_->drop_device_memory();
  impl_->publish_live();
}

bool CachingAllocator::owns(const void* ptr, std::size_t* size) const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const LiveBlock* lb = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (lb == nullptr) return false;
  if (size != nullptr) *size = impl_->blocks.at(lb->block)->size;
  return true;
}

bool CachingAllocator::block_of(const void* addr, SegmentRange* out) const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (const LiveBlock* lb = impl_->live.find(a)) {  // the start of a block: O(1)
    if (out != nullptr) *out = {reinterpret_cast<void*>(a), impl_->blocks.at(lb->block)->size};
    return true;
  }
  const Segment* s = impl_->segment_containing(a);  // O(log segments) ...
  if (s == nullptr) return false;
  const Block* b = s->first;
  while (b != nullptr && a - b->addr >= b->size) b = b->next;  // ... then a walk
  // Allocated means in the pointer map; an in-use block that is not is a pending free.
  if (b == nullptr || b->state != BlockState::in_use || impl_->live.find(b->addr) == nullptr) return false;
  if (out != nullptr) *out = {reinterpret_cast<void*>(b->addr), b->size};
  return true;
}

bool CachingAllocator::segment_of(const void* ptr, SegmentRange* out) const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const Segment* s = impl_->segment_containing(reinterpret_cast<std::uintptr_t>(ptr));
  if (s == nullptr) return false;
  if (out != nullptr) *out = {reinterpret_cast<void*>(s->base), s->size, s->own, s->expandable};
  return true;
}

DeviceStats CachingAllocator::stats() const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  return impl_->view();
}

bool CachingAllocator::try_stats(DeviceStats* out, std::chrono::steady_clock::time_point deadline) const noexcept {
  if (!lock_until(impl_->mu, deadline)) return false;
  std::lock_guard<AllocatorLock> lock(impl_->mu, std::adopt_lock);
  *out = impl_->view();
  return true;
}

std::size_t CachingAllocator::cached_bytes() const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  return static_cast<std::size_t>(impl_->stats.reserved_bytes.all_current() - impl_->stats.allocated_bytes.all_current());
}

std::size_t CachingAllocator::largest_free_block() const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  std::size_t largest = 0;
  impl_->segments.for_each([&largest](const Segment* s) {
    for (const Block* b = s->first; b != nullptr; b = b->next)
      if (b->state == BlockState::free) largest = std::max(largest, b->size);
  });
  return largest;
}

AllocatorSnapshot CachingAllocator::snapshot() const {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  AllocatorSnapshot out;
  out.reserve(impl_->segments.size());
  impl_->segments.for_each([&](const Segment* s) {
    if (s->expandable) {  // each run of mapped pages, as a segment of its own
      SegmentSnapshot* run = nullptr;
      for (const Block* b = s->first; b != nullptr; b = b->next) {
        if (b->state == BlockState::unmapped) {
          run = nullptr;
          continue;
        }
        if (run == nullptr) {
          run = &out.emplace_back();
          run->address = b->addr;
          run->pool = s->pool;
          run->expandable = true;
        }
        run->size += b->size;
        run->blocks.push_back(impl_->block_snapshot(b));
      }
      return;
    }
    SegmentSnapshot& seg = out.emplace_back();
    seg.address = s->base;
    seg.size = s->size;
    seg.pool = s->pool;
    for (const Block* b = s->first; b != nullptr; b = b->next) seg.blocks.push_back(impl_->block_snapshot(b));
  });
  return out;
}

void CachingAllocator::set_event_sink(EventSink* sink) noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  impl_->sink = sink;
}

void CachingAllocator::set_live_writer(live::SlotWriter* writer) noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  impl_->live_writer = writer;
  impl_->publish_live();
}

const AllocatorOptions& CachingAllocator::options() const noexcept { return impl_->opt; }

std::vector<std::string> CachingAllocator::check() const {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  return impl_->check();
}

}  // namespace luma::core
