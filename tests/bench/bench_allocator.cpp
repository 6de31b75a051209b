// bench_allocator.cpp - Google Benchmark of luma's caching allocator: alloc+free pairs at
// 10^2, 10^4 and 10^6 live blocks (bench_workload.h), against glibc malloc here and CUB
// (cub_yardstick.cpp, when its header is found), and two floors that are not allocators:
// the lock alone, and the lock with one pointer-map lookup per free (what refusing a
// pointer it does not own costs any allocator). Built, never run by meson test:
//   build/tests/bench/bench_allocator --benchmark_min_time=0.2
#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "address_only_device.h"
#include "allocator/allocator_lock.h"
#include "bench_pairs.h"
#include "bench_workload.h"
#include "allocator/block.h"
#include "allocator/caching_allocator.h"
#include "allocator/pointer_map.h"

namespace {

using luma::bench::AddressOnlyDevice;

// Counters: segments at the end, peak reserved / peak allocated bytes, and reserves_per_pair over the timed loop only (the
// reserves made while filling the live set are subtracted): in a steady state nearly every
// pair is served from the cache, so this must stay far below 1.
void BM_Luma(benchmark::State& state) {
  AddressOnlyDevice dev;
  luma::core::CachingAllocator a(dev, 0);
  const auto live = static_cast<std::size_t>(state.range(0));
  std::size_t calls = 0;
  std::uint64_t fill_reserves = 0;
  luma::bench::run_pairs(
      state,
      [&](std::size_t n) {
        if (calls++ == live) fill_reserves = dev.reserves();  // first timed allocation
        return a.allocate(n).ptr;
      },
      [&](void* p) { a.free(p); });
  const double pairs = static_cast<double>(state.iterations());
  const luma::core::DeviceStats st = a.stats();
  state.counters["segments"] = static_cast<double>(st.segment.all.current);
  // Peak reserved per peak allocated byte: what the driver calls bought (or cost) in memory.
  state.counters["peak_reserved_per_allocated"] =
      st.allocated_bytes.all.peak > 0
          ? static_cast<double>(st.reserved_bytes.all.peak) / static_cast<double>(st.allocated_bytes.all.peak)
          : 0.0;
  state.counters["reserves_per_pair"] =
      pairs > 0 && calls > live ? static_cast<double>(dev.reserves() - fill_reserves) / pairs : 0.0;
}
BENCHMARK(BM_Luma)->Apply(luma::bench::live_counts);

// The floor: the least any allocator must do per pair when a free of a pointer it does not
// own is refused (luma's answer is CUDA_ERROR_INVALID_VALUE, docs/architecture.md). Each
// call takes the lock, and the free finds (and removes) the pointer in luma's own pointer
// map, which the allocation fills; the allocation itself is a bump of an address counter,
// with no cache, no free index, no statistics and no reuse. Not an allocator: a yardstick of
// what the lock and one lookup of a random pointer cost at each live-block count
// (docs/performance.md).
void BM_ValidatedFreeFloor(benchmark::State& state) {
  luma::bench::AddressSpace space;
  luma::core::PointerMap<luma::core::LiveBlock> map;
  luma::core::AllocatorLock mu;
  std::uint32_t n = 0;
  map.reserve_for(static_cast<std::size_t>(state.range(0)) + 2);
  luma::bench::run_pairs(
      state,
      [&](std::size_t bytes) -> void* {
        std::lock_guard<luma::core::AllocatorLock> g(mu);
        void* p = space.take(bytes);
        map.insert(reinterpret_cast<std::uintptr_t>(p), luma::core::LiveBlock{n++, 0});
        return p;
      },
      [&](void* p) {
        std::lock_guard<luma::core::AllocatorLock> g(mu);
        luma::core::LiveBlock lb;
        benchmark::DoNotOptimize(map.take(reinterpret_cast<std::uintptr_t>(p), &lb));
        benchmark::DoNotOptimize(lb);
      });
}
BENCHMARK(BM_ValidatedFreeFloor)->Apply(luma::bench::live_counts);

// The floor's first part alone: the same loop and lock, no lookup. Shows that the
// benchmark's own random pick among the live slots is not what grows with the live count.
void BM_LockOnlyFloor(benchmark::State& state) {
  luma::bench::AddressSpace space;
  luma::core::AllocatorLock mu;
  luma::bench::run_pairs(
      state,
      [&](std::size_t bytes) -> void* {
        std::lock_guard<luma::core::AllocatorLock> g(mu);
        return space.take(bytes);
      },
      [&](void* p) {
        std::lock_guard<luma::core::AllocatorLock> g(mu);
        benchmark::DoNotOptimize(p);
      });
}
BENCHMARK(BM_LockOnlyFloor)->Apply(luma::bench::live_counts);

// glibc kept in its heap: the largest mmap threshold it accepts (32 MiB on 64-bit; bigger
// blocks are still mmapped) and no trimming, so it does not hand memory back each free.
// Not run at 10^6 live: that many blocks of this mix would need terabytes of real pages.
void BM_Glibc(benchmark::State& state) {
  static const bool tuned = [] {
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    return true;
  }();
  (void)tuned;
  luma::bench::run_pairs(state, [](std::size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); });
}
BENCHMARK(BM_Glibc)->Arg(100)->Arg(10'000);

}  // namespace

BENCHMARK_MAIN();
