// stats.h - the allocator's observable state, per device.
// The names follow PyTorch's memory_stats() (counters current / peak / allocated / freed
// for each metric, per pool) and keep the reference design's Stats fields (allocated_bytes,
// reserved_bytes, peak_bytes, live_blocks, free_blocks, segments, cuda_malloc_calls,
// cuda_free_calls) as a view, which is what the JSON form prints under those names.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace luma::core {

enum class Pool : std::uint8_t { small = 0, large = 1 };
inline constexpr std::size_t kPools = 2;

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

struct DeviceStats {
  int device = 0;
  // Counts.
  PoolCounter allocation;      // blocks the program holds (alloc .. free)
  PoolCounter segment;         // segments reserved from the device
  PoolCounter active;          // blocks not reusable yet: held, or freed with fences pending
  PoolCounter inactive_split;  // free blocks that are pieces of a split segment
  // Bytes.
  PoolCounter allocated_bytes;       // rounded bytes the program holds
  PoolCounter requested_bytes;       // bytes the program asked for
  PoolCounter reserved_bytes;        // bytes in segments
  PoolCounter active_bytes;          // bytes of active blocks
  PoolCounter inactive_split_bytes;  // bytes of inactive split blocks
  // Free blocks in the cache (reusable now), current value.
  std::uint64_t free_blocks = 0;
  // Calls.
  std::uint64_t alloc_calls = 0;         // successful allocations served
  std::uint64_t free_calls = 0;          // successful frees
  std::uint64_t num_device_alloc = 0;    // real segment reservations (successful)
  std::uint64_t num_device_free = 0;     // real segment releases
  std::uint64_t num_alloc_retries = 0;   // device refused; cache released and retried
  std::uint64_t num_ooms = 0;            // allocations that failed with out-of-memory
  std::uint64_t num_device_errors = 0;   // allocations failed by a device error (not OOM)
  std::uint64_t num_context_resets = 0;  // times the memory went with its context (reset)
  std::uint64_t num_fence_waits = 0;     // times an allocation waited for a pending free
  std::uint64_t num_empty_cache = 0;     // empty_cache calls
  std::uint64_t invalid_frees = 0;       // frees of pointers not live in this allocator
};

// Adds the statistics of another CUDA context of the same device (luma keeps one allocator
// per context; a device reset or a program's own cuCtxCreate makes more than one), so that
// statistics are reported per device, as PyTorch's are. Totals and currents add up. A peak
// becomes the larger of the two peaks and of the summed current: exact for contexts that
// followed one another (the reset loop, by far the common case: a retired context's
// current is 0), a lower bound for contexts alive at the same time, whose peaks may or may
// not have coincided. Needs the same device; `device` is kept.
inline void accumulate_context(Counter& into, const Counter& from) noexcept {
  into.current += from.current;
  into.allocated += from.allocated;
  into.freed += from.freed;
  into.peak = into.peak > from.peak ? into.peak : from.peak;
  if (into.current > into.peak) into.peak = into.current;
}

inline void accumulate_context(PoolCounter& into, const PoolCounter& from) noexcept {
  accumulate_context(into.all, from.all);
  for (std::size_t p = 0; p < kPools; ++p) accumulate_context(into.pool[p], from.pool[p]);
}

inline void accumulate_context(DeviceStats& into, const DeviceStats& from) noexcept {
  for (PoolCounter DeviceStats::*m :
       {&DeviceStats::allocation, &DeviceStats::segment, &DeviceStats::active, &DeviceStats::inactive_split,
        &DeviceStats::allocated_bytes, &DeviceStats::requested_bytes, &DeviceStats::reserved_bytes,
        &DeviceStats::active_bytes, &DeviceStats::inactive_split_bytes})
    accumulate_context(into.*m, from.*m);
  for (std::uint64_t DeviceStats::*m :
       {&DeviceStats::free_blocks, &DeviceStats::alloc_calls, &DeviceStats::free_calls,
        &DeviceStats::num_device_alloc, &DeviceStats::num_device_free, &DeviceStats::num_alloc_retries,
        &DeviceStats::num_ooms, &DeviceStats::num_device_errors, &DeviceStats::num_context_resets,
        &DeviceStats::num_fence_waits, &DeviceStats::num_empty_cache, &DeviceStats::invalid_frees})
    into.*m += from.*m;
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
