// bench_allocator.cpp - Google Benchmark of luma's caching allocator: alloc+free pairs at
// 10^2, 10^4 and 10^6 live blocks (bench_workload.h), against glibc malloc here and CUB
// (cub_yardstick.cpp, when its header is found). Built, never run by meson test:
//   build/tests/bench/bench_allocator --benchmark_min_time=0.2
#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <limits>

#include "address_only_device.h"
#include "bench_pairs.h"
#include "caching_allocator.h"

namespace {

using luma::bench::AddressOnlyDevice;

// Counters: segments at the end, and reserves_per_pair over the timed loop only (the
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
  state.counters["segments"] = static_cast<double>(a.stats().segment.all.current);
  state.counters["reserves_per_pair"] =
      pairs > 0 && calls > live ? static_cast<double>(dev.reserves() - fill_reserves) / pairs : 0.0;
}
BENCHMARK(BM_Luma)->Apply(luma::bench::live_counts);

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
