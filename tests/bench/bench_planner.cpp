// bench_planner.cpp - planner speed: raw TLSF alloc/free pairs, the TLSF replay (events/s,
// sort included) and the greedy on up to 10^6 buffers. Inputs are reproducible random
// lifetimes (tests/planner/random_lifetimes.h): short lifetimes, so about 100 buffers are
// live at a time, like an ML schedule's activations.
#include <benchmark/benchmark.h>

#include "../planner/random_lifetimes.h"
#include "planner/greedy.h"
#include "planner/lower_bound.h"
#include "planner/planner_constants.h"
#include "planner/tlsf.h"
#include "planner/tlsf_replay.h"

namespace {

using namespace luma::core;

std::vector<Lifetime> input(std::size_t n) {
  // horizon n so ~max_len/2 = 100 buffers overlap any time.
  return testing::random_lifetimes(n, 42, n, 200, 1 << 20);
}

void BM_TlsfAllocFree(benchmark::State& state) {
  const std::size_t live = static_cast<std::size_t>(state.range(0));
  Tlsf tlsf(std::uint64_t{1} << 40, 0, planner::kTlsfBlockSize, planner::kTlsfLevel2Count);
  std::vector<std::uint64_t> ring(live, 0);
  std::uint64_t x = 1;
  for (std::size_t i = 0; i < live; ++i) {
    x = x * 6364136223846793005ull + 1;
    ring[i] = tlsf.alloc(256 + (x >> 44));
  }
  std::size_t k = 0;
  for (auto _ : state) {
    x = x * 6364136223846793005ull + 1;
    tlsf.free(ring[k]);
    ring[k] = tlsf.alloc(256 + (x >> 44));
    k = k + 1 == live ? 0 : k + 1;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 2);  // events
}
BENCHMARK(BM_TlsfAllocFree)->Arg(100)->Arg(10000);

void BM_TlsfReplay(benchmark::State& state) {
  auto lts = input(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(plan_tlsf_replay(lts).arena);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * lts.size() * 2));
  state.SetLabel("items = events");
}
BENCHMARK(BM_TlsfReplay)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);

void BM_GreedyBySize(benchmark::State& state) {
  auto lts = input(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(plan_greedy(lts, GreedyOrder::size).arena);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * lts.size()));
  state.SetLabel("items = buffers");
}
BENCHMARK(BM_GreedyBySize)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);

void BM_GreedyAllOrders(benchmark::State& state) {
  auto lts = input(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(plan_greedy_best(lts).arena);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * lts.size()));
}
BENCHMARK(BM_GreedyAllOrders)->Arg(1000000)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_LowerBound(benchmark::State& state) {
  auto lts = input(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(lower_bound_bytes(lts));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * lts.size()));
}
BENCHMARK(BM_LowerBound)->Arg(1000000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
