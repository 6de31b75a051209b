// stats.h - the allocator's observable state, per device.
// The names follow PyTorch's memory_stats() (counters current / peak / allocated / freed
// for each metric, per pool) and keep the reference design's Stats fields (allocated_bytes,
// reserved_bytes, peak_bytes, live_blocks, free_blocks, segments, cuda_malloc_calls,
// cuda_free_calls) as a view, which is what the JSON form prints under those names.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "base/pool.h"

namespace luma::core {


// One metric: its current value, its peak, and the running totals added and removed.
struct Counter {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::uint64_t allocated = 0;
  std::uint64_t freed = 0;

  void add(std::uint64_t n) noexcept {
    current += static_cast<std::int64_t>(n);
    allocated += n;
    if (current > peak) peak = current;
  }
  void sub(std::uint64_t n) noexcept {
    current -= static_cast<std::int64_t>(n);
    freed += n;
  }
};

// A metric kept for all pools together and for each pool.
struct PoolCounter {
  Counter all;
  std::array<Counter, kPools> pool;  // indexed by Pool

  void add(Pool p, std::uint64_t n) noexcept {
    all.add(n);
    pool[static_cast<std::size_t>(p)].add(n);
  }
  void sub(Pool p, std::uint64_t n) noexcept {
    all.sub(n);
    pool[static_cast<std::size_t>(p)].sub(n);
  }
};

// Every field of the device statistics, written once: DeviceStats below, the hot path's
// copy (LiveStats, live_stats.h), the sums over contexts (accumulate_context) and over the
// parts of one context (ContextAllocator: the plan's arena and the cache), plan replay's
// copy (PlanReplay::stats) and the text and JSON tables (stats_format.cpp) are all made
// from these two lists (X-macros, as mimalloc's MI_STAT_FIELDS).
//
// LUMA_POOL_METRICS(X): X(name, unit, title, summary_row) for each metric kept as a
// PoolCounter (current, peak, allocated, freed; all pools and each pool). `name` is also
// the memory_stats() key, `unit` bytes or count, `title` the memory_summary() row and
// `summary_row` its place there (and in memory_stats()). Listed in the hot path's order:
// the metrics every alloc+free pair touches first, so that they share cache lines.
#define LUMA_POOL_METRICS(X)                                                                   \
  X(allocation, count, "Allocations", 5)                /* blocks the program holds */         \
  X(allocated_bytes, bytes, "Allocated memory", 0)      /* rounded bytes the program holds */  \
  X(requested_bytes, bytes, "Requested memory", 2)      /* bytes the program asked for */      \
  X(active, count, "Active allocs", 6)                  /* held, or freed with fences pending */ \
  X(active_bytes, bytes, "Active memory", 1)            /* bytes of active blocks */           \
  X(inactive_split, count, "Non-releasable allocs", 8)  /* free pieces of a split segment */   \
  X(inactive_split_bytes, bytes, "Non-releasable memory", 4) /* their bytes */                 \
  X(segment, count, "GPU reserved segments", 7)         /* segments reserved from the device */ \
  X(reserved_bytes, bytes, "GPU reserved memory", 3)    /* bytes in segments */

// LUMA_CALL_COUNTERS(X): X(name, line, label) for each running total (a plain count, only
// ever added). `name` is also its JSON key, `label` its line under memory_summary()'s
// table ("" for the two the table's header shows) and `line` the place of that line
// among the summary's count lines (stats_format.cpp's kCountLines, which adds the values
// derived from other fields in the places left free here).
#define LUMA_CALL_COUNTERS(X)                                                                          \
  X(alloc_calls, 2, "Allocation calls")                        /* successful allocations served */      \
  X(free_calls, 4, "Free calls")                               /* successful frees */                   \
  X(num_device_alloc, 0, "Real driver allocations (cudaMalloc)") /* real segment reservations */        \
  X(num_device_free, 1, "Real driver frees (cudaFree)")        /* real segment releases */              \
  X(num_alloc_retries, 13, "")      /* device refused; cache released and retried (in the header) */    \
  X(num_ooms, 14, "")               /* allocations that failed with out-of-memory (in the header) */    \
  X(num_device_errors, 8, "Driver errors (other than OOM)")    /* allocations failed by a device error */ \
  X(num_context_resets, 9, "Context resets (memory went with it)") /* memory went with its context */   \
  X(num_fence_waits, 5, "Waits for a pending free")            /* an allocation waited for a free */    \
  X(num_empty_cache, 6, "empty_cache calls")                   /* empty_cache calls */                  \
  X(invalid_frees, 7, "Invalid frees")                         /* frees of pointers not live here */

#define LUMA_STATS_COUNT_ONE(...) +1
inline constexpr std::size_t kPoolMetrics = 0 LUMA_POOL_METRICS(LUMA_STATS_COUNT_ONE);
#undef LUMA_STATS_COUNT_ONE

struct DeviceStats {
  int device = 0;
#define LUMA_STATS_FIELD(name, ...) PoolCounter name;
  LUMA_POOL_METRICS(LUMA_STATS_FIELD)
#undef LUMA_STATS_FIELD
  // Free blocks in the cache (reusable now), current value.
  std::uint64_t free_blocks = 0;
  // Blocks (and their rounded bytes) the program freed whose fence is still pending, when
  // report_pending_as_freed() moved them out of the active metrics for a final report.
  std::uint64_t pending_free_blocks = 0;
  std::uint64_t pending_free_bytes = 0;
#define LUMA_STATS_FIELD(name, ...) std::uint64_t name = 0;
  LUMA_CALL_COUNTERS(LUMA_STATS_FIELD)
#undef LUMA_STATS_FIELD
};

// The peak rule, for every sum of statistics: a peak is the largest current value seen,
// so the peak of a sum of parts depends on whether the parts' peaks could coincide.
// - parts_at_once (one context's arena and cache, both serving at the same time): the sum
//   of the peaks, an upper bound, exact while only one part moves (a device following its
//   plan leaves the cache idle);
// - parts_in_turn (the CUDA contexts of one device: luma keeps one allocator per context,
//   and a device reset or a program's own cuCtxCreate makes more than one): the larger of
//   the two peaks and of the summed current, exact for contexts that followed one another
//   (the reset loop, by far the common case: a retired context's current is 0), a lower
//   bound for contexts alive at the same time.
// Currents and totals add up either way.
enum class PeakRule : std::uint8_t { parts_at_once, parts_in_turn };

inline void add_part(Counter& into, const Counter& from, PeakRule rule) noexcept {
  into.current += from.current;
  into.allocated += from.allocated;
  into.freed += from.freed;
  if (rule == PeakRule::parts_at_once) {
    into.peak += from.peak;
  } else {
    into.peak = into.peak > from.peak ? into.peak : from.peak;
    if (into.current > into.peak) into.peak = into.current;
  }
}

inline void add_part(PoolCounter& into, const PoolCounter& from, PeakRule rule) noexcept {
  add_part(into.all, from.all, rule);
  for (std::size_t p = 0; p < kPools; ++p) add_part(into.pool[p], from.pool[p], rule);
}

// Every field of `from` added to `into` (which keeps its `device`).
inline void add_part(DeviceStats& into, const DeviceStats& from, PeakRule rule) noexcept {
#define LUMA_STATS_ADD(name, ...) add_part(into.name, from.name, rule);
  LUMA_POOL_METRICS(LUMA_STATS_ADD)
#undef LUMA_STATS_ADD
  into.free_blocks += from.free_blocks;
  into.pending_free_blocks += from.pending_free_blocks;
  into.pending_free_bytes += from.pending_free_bytes;
#define LUMA_STATS_ADD(name, ...) into.name += from.name;
  LUMA_CALL_COUNTERS(LUMA_STATS_ADD)
#undef LUMA_STATS_ADD
}

// Adds the statistics of another CUDA context of the same device, so that statistics are
// reported per device, as PyTorch's are (PeakRule::parts_in_turn). Needs the same device;
// `device` is kept.
inline void accumulate_context(Counter& into, const Counter& from) noexcept {
  add_part(into, from, PeakRule::parts_in_turn);
}
inline void accumulate_context(PoolCounter& into, const PoolCounter& from) noexcept {
  add_part(into, from, PeakRule::parts_in_turn);
}
inline void accumulate_context(DeviceStats& into, const DeviceStats& from) noexcept {
  add_part(into, from, PeakRule::parts_in_turn);
}

// For the report at exit: a block the program freed is freed, even while its fence (the
// work issued before the free) is pending. PyTorch's "active" metrics keep such blocks
// until the fence completes, which at exit reads as blocks still in use ("Active allocs
// 17" after the program freed everything). This moves them from the current values of
// active / active_bytes to pending_free_blocks / _bytes; peaks and totals are unchanged.
inline void report_pending_as_freed(DeviceStats& s) noexcept {
  auto settle = [](Counter& active, const Counter& held) {
    const std::int64_t pending = active.current > held.current ? active.current - held.current : 0;
    active.current -= pending;
    return static_cast<std::uint64_t>(pending);
  };
  s.pending_free_blocks = settle(s.active.all, s.allocation.all);
  s.pending_free_bytes = settle(s.active_bytes.all, s.allocated_bytes.all);
  for (std::size_t p = 0; p < kPools; ++p) {
    settle(s.active.pool[p], s.allocation.pool[p]);
    settle(s.active_bytes.pool[p], s.allocated_bytes.pool[p]);
  }
}

// The reference design's Stats, derived from DeviceStats.
struct ReferenceStats {
  std::size_t allocated_bytes = 0;
  std::size_t reserved_bytes = 0;
  std::size_t peak_bytes = 0;  // peak of allocated_bytes
  std::size_t live_blocks = 0;
  std::size_t free_blocks = 0;
  std::size_t segments = 0;
  std::size_t cuda_malloc_calls = 0;
  std::size_t cuda_free_calls = 0;
};

inline ReferenceStats reference_view(const DeviceStats& s) noexcept {
  ReferenceStats r;
  r.allocated_bytes = static_cast<std::size_t>(s.allocated_bytes.all.current);
  r.reserved_bytes = static_cast<std::size_t>(s.reserved_bytes.all.current);
  r.peak_bytes = static_cast<std::size_t>(s.allocated_bytes.all.peak);
  r.live_blocks = static_cast<std::size_t>(s.allocation.all.current);
  r.free_blocks = static_cast<std::size_t>(s.free_blocks);
  r.segments = static_cast<std::size_t>(s.segment.all.current);
  r.cuda_malloc_calls = static_cast<std::size_t>(s.num_device_alloc);
  r.cuda_free_calls = static_cast<std::size_t>(s.num_device_free);
  return r;
}

}  // namespace luma::core
