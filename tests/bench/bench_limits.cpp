// bench_limits.cpp - what a memory limit costs (docs/settings.md "Memory limits"), in one
// run: no limit, a process limit (core::ProcessBudget) and a group limit (the shared table
// of shim/budgets/group_budget.h, in POSIX shared memory), each through core::LimitedDevice.
//   BM_Pair_*    - an alloc+free pair of the caching allocator at 10^4 live blocks: the
//                  budget is asked only when a segment is reserved or released, so a pair
//                  served from the cache pays nothing.
//   BM_Segment_* - a reserve+release pair of one segment through the decorator, the worst
//                  case (every allocation a new real allocation, e.g. at the limit); the
//                  group's cost grows with the members it sums (argument: members).
// Built, never run by meson test:  build/tests/bench/bench_limits --benchmark_min_time=0.2
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "address_only_device.h"
#include "bench_pairs.h"
#include "allocator/caching_allocator.h"
#include "budgets/group_budget.h"
#include "limits/limited_device.h"
#include "limits/memory_budget.h"

namespace {

using luma::bench::AddressOnlyDevice;
using luma::core::MiB;

constexpr std::size_t kLimit = std::size_t{1} << 50;  // never reached: the cost, not refusals

bool always_alive(luma::shim::MemberId) { return true; }

// A group table with `members` members (this process plus members - 1 acted ones, each
// holding a little on device 0), removed again when done.
struct Group {
  explicit Group(std::size_t members) {
    name = "/luma.bench-" + std::to_string(getpid());
    luma::shim::GroupTable::remove(name);
    std::string error;
    for (std::size_t i = 0; i < members; ++i) {
      tables.push_back(luma::shim::GroupTable::open(
          name, luma::shim::member_id(static_cast<std::uint32_t>(1000 + i), 1), &always_alive,
          &error));
      if (!tables.back()) return;
      if (i > 0) tables.back()->take(0, MiB, kLimit);
    }
    budget = std::make_unique<luma::shim::GroupBudget>(*tables.front(), 0, kLimit);
  }
  ~Group() { luma::shim::GroupTable::remove(name); }
  std::string name;
  std::vector<std::unique_ptr<luma::shim::GroupTable>> tables;
  std::unique_ptr<luma::shim::GroupBudget> budget;
};

// reserves_per_pair: segment reservations (each one budget take) per timed pair, the
// reservations made while filling the live set left out, as in bench_allocator's BM_Luma.
void pairs(benchmark::State& state, luma::core::Device& dev, const AddressOnlyDevice& inner) {
  luma::core::CachingAllocator a(dev, 0);
  const auto live = static_cast<std::size_t>(state.range(0));
  std::size_t calls = 0;
  std::uint64_t fill_reserves = 0;
  luma::bench::run_pairs(
      state,
      [&](std::size_t n) {
        if (calls++ == live) fill_reserves = inner.reserves();
        return a.allocate(n).ptr;
      },
      [&](void* p) { a.free(p); });
  const double pairs = static_cast<double>(state.iterations());
  state.counters["reserves_per_pair"] =
      pairs > 0 && calls > live ? static_cast<double>(inner.reserves() - fill_reserves) / pairs : 0.0;
}

void BM_Pair_NoLimit(benchmark::State& state) {
  AddressOnlyDevice dev;
  pairs(state, dev, dev);
}
void BM_Pair_ProcessLimit(benchmark::State& state) {
  AddressOnlyDevice inner;
  luma::core::ProcessBudget budget(kLimit);
  luma::core::LimitedDevice dev(inner, budget);
  pairs(state, dev, inner);
}
void BM_Pair_GroupLimit(benchmark::State& state) {
  AddressOnlyDevice inner;
  Group g(1);
  if (!g.budget) return state.SkipWithError("no shared memory");
  luma::core::LimitedDevice dev(inner, *g.budget);
  pairs(state, dev, inner);
}
BENCHMARK(BM_Pair_NoLimit)->Arg(10'000);
BENCHMARK(BM_Pair_ProcessLimit)->Arg(10'000);
BENCHMARK(BM_Pair_GroupLimit)->Arg(10'000);

void segments(benchmark::State& state, luma::core::Device& dev) {
  for (auto _ : state) {
    luma::core::Reservation r = dev.reserve(2 * MiB);
    benchmark::DoNotOptimize(r.base);
    dev.release(r.base, 2 * MiB);
  }
}

void BM_Segment_NoLimit(benchmark::State& state) {
  AddressOnlyDevice dev;
  segments(state, dev);
}
void BM_Segment_ProcessLimit(benchmark::State& state) {
  AddressOnlyDevice inner;
  luma::core::ProcessBudget budget(kLimit);
  luma::core::LimitedDevice dev(inner, budget);
  segments(state, dev);
}
void BM_Segment_GroupLimit(benchmark::State& state) {
  AddressOnlyDevice inner;
  Group g(static_cast<std::size_t>(state.range(0)));
  if (!g.budget) return state.SkipWithError("no shared memory");
  luma::core::LimitedDevice dev(inner, *g.budget);
  segments(state, dev);
}
BENCHMARK(BM_Segment_NoLimit);
BENCHMARK(BM_Segment_ProcessLimit);
BENCHMARK(BM_Segment_GroupLimit)->Arg(1)->Arg(8)->Arg(64);

}  // namespace

BENCHMARK_MAIN();
