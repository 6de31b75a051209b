// live_stats.h - the statistics as the allocator's hot path keeps them (cheaper to update
// than DeviceStats), and view() that turns them into DeviceStats.
#pragma once

#include <array>
#include <cstdint>

#include "allocator/block.h"
#include "stats/stats.h"

namespace luma::core {

// One metric as the hot path keeps it: per pool only what cannot be derived (current,
// peak, the running total added), and the all-pools peak. The rest is made in view():
// freed = added - current (every change goes through add or sub), and the all-pools
// current and totals are the pools' sums. A sub is then one store, an add four; the
// statistics were about a quarter of an alloc+free pair's instructions when every
// PyTorch field was stored at every change (docs/performance.md).
struct LiveMetric {
  struct Gauge {
    std::int64_t current = 0;
    std::int64_t peak = 0;
    std::uint64_t added = 0;
  };
  std::array<Gauge, kPools> pool{};
  std::int64_t all_peak = 0;

  [[gnu::always_inline]] void add(Pool p, std::uint64_t n) noexcept {
    Gauge& g = pool[pool_index(p)];
    g.current += static_cast<std::int64_t>(n);
    g.added += n;
    // Branches, not selects: a peak rarely moves once a program is in its steady state.
    if (g.current > g.peak) g.peak = g.current;
    const std::int64_t all = all_current();
    if (all > all_peak) all_peak = all;
  }
  [[gnu::always_inline]] void sub(Pool p, std::uint64_t n) noexcept {
    pool[pool_index(p)].current -= static_cast<std::int64_t>(n);
  }
  std::int64_t all_current() const noexcept { return pool[0].current + pool[1].current; }

  PoolCounter view() const noexcept {
    PoolCounter v;
    for (std::size_t i = 0; i < kPools; ++i) {
      const Gauge& g = pool[i];
      Counter& c = v.pool[i];
      c.current = g.current;
      c.peak = g.peak;
      c.allocated = g.added;
      c.freed = g.added - static_cast<std::uint64_t>(g.current);
      v.all.allocated += c.allocated;
      v.all.freed += c.freed;
    }
    v.all.current = all_current();
    v.all.peak = all_peak;
    return v;
  }
};

// DeviceStats with LiveMetric in place of PoolCounter (the fields: stats.h's lists, in
// the hot path's order there).
struct LiveStats {
#define LUMA_STATS_FIELD(name, ...) LiveMetric name;
  LUMA_POOL_METRICS(LUMA_STATS_FIELD)
#undef LUMA_STATS_FIELD
#define LUMA_STATS_FIELD(name, ...) std::uint64_t name = 0;
  LUMA_CALL_COUNTERS(LUMA_STATS_FIELD)
#undef LUMA_STATS_FIELD

  // free_blocks: the free index's count (the allocator keeps no counter for it).
  DeviceStats view(int device, std::uint64_t free_blocks) const noexcept {
    DeviceStats d;
    d.device = device;
#define LUMA_STATS_VIEW(name, ...) d.name = name.view();
    LUMA_POOL_METRICS(LUMA_STATS_VIEW)
#undef LUMA_STATS_VIEW
    d.free_blocks = free_blocks;
#define LUMA_STATS_VIEW(name, ...) d.name = name;
    LUMA_CALL_COUNTERS(LUMA_STATS_VIEW)
#undef LUMA_STATS_VIEW
    return d;
  }
};

}  // namespace luma::core
