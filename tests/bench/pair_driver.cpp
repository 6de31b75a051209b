// pair_driver.cpp - bench_allocator's pattern as a plain program, for counting tools that
// need a fixed amount of work (cachegrind, perf stat), which Google Benchmark's adaptive
// iteration counts do not give: fills LIVE blocks, runs one warm-up ring of steps, then
// PAIRS alloc+free pairs. Counts per pair = (count with PAIRS - count with 0) / PAIRS:
//   valgrind --tool=cachegrind --cache-sim=yes --LL=1048576,16,64
//       build-rel/tests/bench/pair_driver 10000 100000
// (docs/performance.md). With a third argument `time`, runs the PAIRS 7 times instead and
// prints the best wall time per pair: for interleaved A/B runs of two builds, where the
// VM's noise would swamp Google Benchmark's medians. With `live` (also after `time`), the
// allocator keeps a live record's slot current (LUMA_LIVE_DIR, tests/bench/bench_live.cpp),
// as libluma.so's do. Built, never run by meson test.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "address_only_device.h"
#include "bench_workload.h"
#include "allocator/caching_allocator.h"
#include "live/live_writer.h"

int main(int argc, char** argv) {
  bool timed = false, published = false, bad = argc < 3;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "time") == 0) timed = true;
    else if (std::strcmp(argv[i], "live") == 0) published = true;
    else bad = true;
  }
  if (bad) {
    std::fprintf(stderr, "usage: pair_driver LIVE PAIRS [time] [live]\n");
    return 2;
  }
  const std::size_t live = std::strtoull(argv[1], nullptr, 10);
  const std::size_t pairs = std::strtoull(argv[2], nullptr, 10);
  if (timed && pairs == 0) {
    std::fprintf(stderr, "pair_driver: PAIRS must be at least 1 to time them\n");
    return 2;
  }
  if (live == 0) {
    std::fprintf(stderr, "pair_driver: LIVE must be at least 1\n");
    return 2;
  }
  const luma::bench::Workload w = luma::bench::make_workload(live);
  luma::bench::AddressOnlyDevice dev;  // the same device as bench_allocator's
  luma::core::CachingAllocator a(dev, 0);
  std::vector<unsigned char> record(luma::core::live::kRecordBytes);
  luma::core::live::SlotWriter writer;
  if (published) {
    luma::core::live::init_record(record.data(), {});
    writer.bind(record.data(), 0, 0, std::nullopt, false);
    a.set_live_writer(&writer);
  }
  std::vector<void*> slots(live);
  for (std::size_t i = 0; i < live; ++i) slots[i] = a.allocate(w.initial[i]).ptr;
  auto step = [&](std::size_t k) {
    void*& slot = slots[w.victim[k]];
    a.free(slot);
    slot = a.allocate(w.size[k]).ptr;
  };
  for (std::size_t k = 0; k < luma::bench::kSteps; ++k) step(k);  // warm-up: steady state
  if (timed) {
    double best = 0;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < pairs; ++i) step(i & (luma::bench::kSteps - 1));
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(pairs);
      if (r == 0 || ns < best) best = ns;
    }
    std::printf("best of 7: %.1f ns per pair\n", best);
  } else {
    for (std::size_t i = 0; i < pairs; ++i) step(i & (luma::bench::kSteps - 1));
  }
  std::size_t failed = 0;
  for (void* p : slots) failed += p == nullptr;
  std::printf("%zu live, %zu pairs, %zu failed allocations\n", live, pairs, failed);
  return failed == 0 ? 0 : 1;
}
