// live_stats.h - the statistics as the allocator's hot path keeps them (cheaper to update
// than DeviceStats), and view() that turns them into DeviceStats.
#pragma once

#include <array>
#include <cstdint>

#include "block.h"
#include "stats.h"

namespace luma::core {

// The statistics as the hot path keeps them: per pool a full Counter, for all pools only
// current and peak (its totals are the sums of the pools', made in view()). Half the
// stores of PoolCounter, and always inlined.
struct Metric {
  std::array<Counter, kPools> pool{};
  std::int64_t all_current = 0;
  std::int64_t all_peak = 0;

  [[gnu::always_inline]] void add(Pool p, std::uint64_t n) noexcept {
    Counter& c = pool[pool_index(p)];
    c.current += static_cast<std::int64_t>(n);
    c.allocated += n;
    if (c.current > c.peak) c.peak = c.current;
    all_current += static_cast<std::int64_t>(n);
    if (all_current > all_peak) all_peak = all_current;
  }
  [[gnu::always_inline]] void sub(Pool p, std::uint64_t n) noexcept {
    Counter& c = pool[pool_index(p)];
    c.current -= static_cast<std::int64_t>(n);
    c.freed += n;
    all_current -= static_cast<std::int64_t>(n);
  }
  PoolCounter view() const noexcept {
    PoolCounter v;
    v.pool = pool;
    v.all.current = all_current;
    v.all.peak = all_peak;
    for (const Counter& c : pool) {
      v.all.allocated += c.allocated;
      v.all.freed += c.freed;
    }
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
