// bench_pairs.h - the timed loop every yardstick shares: fill the live set, then per
// iteration free one pregenerated victim and allocate its pregenerated replacement.
// Setup and teardown are outside the timed region.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "bench_workload.h"

namespace luma::bench {

// Live-block counts of the benchmark: 10^2, 10^4, 10^6.
inline void live_counts(benchmark::internal::Benchmark* b) {
  for (long n : {100L, 10'000L, 1'000'000L}) b->Arg(n);
}

// Alloc(size) -> void* (nullptr on failure); Free(void*).
template <typename Alloc, typename Free>
void run_pairs(benchmark::State& state, Alloc&& alloc, Free&& release) {
  const auto live = static_cast<std::size_t>(state.range(0));
  static std::size_t cached_live = 0;
  static Workload w;
  if (cached_live != live) {  // the same workload for every yardstick and repetition
    w = make_workload(live);
    cached_live = live;
  }
  std::vector<void*> slots(live);
  for (std::size_t i = 0; i < live; ++i) {
    slots[i] = alloc(w.initial[i]);
    if (slots[i] == nullptr) {
      state.SkipWithError("allocation failed while filling the live set");
      return;
    }
  }
  std::size_t step = 0;
  bool failed = false;
  for (auto _ : state) {
    const std::size_t k = step++ & (kSteps - 1);
    void*& slot = slots[w.victim[k]];
    release(slot);
    slot = alloc(w.size[k]);
    failed |= slot == nullptr;
    benchmark::DoNotOptimize(slot);
  }
  if (failed) state.SkipWithError("an allocation failed in the timed loop");
  for (void* p : slots)  // after the loop: not timed
    if (p != nullptr) release(p);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("alloc+free pairs");
}

}  // namespace luma::bench
