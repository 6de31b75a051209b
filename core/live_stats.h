// live_stats.h - the statistics as the allocator's hot path keeps them (cheaper to update
// than DeviceStats), and view() that turns them into DeviceStats.
#pragma once

#include <array>
#include <cstdint>

#include "block.h"
#include "stats.h"

namespace luma::core {

// One metric as the hot path keeps it: per pool only what cannot be derived (current,
// peak, the running total added), and the all-pools peak. The rest is made in view():
// freed = added - current (every change goes through add or sub), and the all-pools
// current and totals are the pools' sums. A sub is then one store, an add four; the
// statistics were about a quarter of an alloc+free pair's instructions when every
// PyTorch field was stored at every change (docs/performance.md).
struct Metric {
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

// DeviceStats with Metric in place of PoolCounter; the metrics every pair touches first.
struct LiveStats {
  Metric allocation, allocated_bytes, requested_bytes, active, active_bytes, inactive_split,
      inactive_split_bytes;
  Metric segment, reserved_bytes;
  std::uint64_t alloc_calls = 0;
  std::uint64_t free_calls = 0;
  std::uint64_t num_device_alloc = 0;
  std::uint64_t num_device_free = 0;
  std::uint64_t num_alloc_retries = 0;
  std::uint64_t num_ooms = 0;
  std::uint64_t num_device_errors = 0;
  std::uint64_t num_context_resets = 0;
  std::uint64_t num_fence_waits = 0;
  std::uint64_t num_empty_cache = 0;
  std::uint64_t invalid_frees = 0;

  // free_blocks: the free index's count (the allocator keeps no counter for it).
  DeviceStats view(int device, std::uint64_t free_blocks) const noexcept {
    DeviceStats d;
    d.device = device;
    d.allocation = allocation.view();
    d.segment = segment.view();
    d.active = active.view();
    d.inactive_split = inactive_split.view();
    d.allocated_bytes = allocated_bytes.view();
    d.requested_bytes = requested_bytes.view();
    d.reserved_bytes = reserved_bytes.view();
    d.active_bytes = active_bytes.view();
    d.inactive_split_bytes = inactive_split_bytes.view();
    d.free_blocks = free_blocks;
    d.alloc_calls = alloc_calls;
    d.free_calls = free_calls;
    d.num_device_alloc = num_device_alloc;
    d.num_device_free = num_device_free;
    d.num_alloc_retries = num_alloc_retries;
    d.num_ooms = num_ooms;
    d.num_device_errors = num_device_errors;
    d.num_context_resets = num_context_resets;
    d.num_fence_waits = num_fence_waits;
    d.num_empty_cache = num_empty_cache;
    d.invalid_frees = invalid_frees;
    return d;
  }
};


}  // namespace luma::core
