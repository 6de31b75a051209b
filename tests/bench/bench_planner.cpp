// bench_planner.cpp - planner speed and quality, the three figures of docs/planner.md
// ("Measured") and their targets:
//  - TLSF replay, events per second with the sort included (items = events), at 2x10^5,
//    2x10^6 and 10^7 events (target >= 5 M/s at 2x10^6 and larger);
//  - the greedy by size on 10^6 buffers (target <= 10 s);
//  - `best` on each MiniMalloc benchmark file with `luma plan`'s defaults: time per file
//    (target <= 2 s) and the counters ratio = arena / LB, proven (1: optimal), work; all
//    eleven together with their geometric mean (target <= 1.02); D and J with
//    `--time-limit 10` (arena and ratio), and whether they pack at the lower bound within
//    10^6 nodes per static order (and whether any time window of D is a local proof that
//    it does not).
// Plus raw TLSF alloc+free pairs and the lower bound. Random inputs are reproducible
// (tests/planner/random_lifetimes.h): short lifetimes, about 100 buffers live at a time, like
// an ML schedule's activations, in random input order (the worst case for the replay's
// memory traffic: a schedule's buffers come in time order).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "../planner/random_lifetimes.h"
#include "planner/canonical_search.h"
#include "planner/greedy.h"
#include "planner/input/lifetime_reader.h"
#include "planner/lower_bound.h"
#include "planner/planner.h"
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

// range(0) buffers = twice as many events.
void BM_TlsfReplay(benchmark::State& state) {
  auto lts = input(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(plan_tlsf_replay(lts).arena);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * lts.size() * 2));
  state.SetLabel("items = events");
}
BENCHMARK(BM_TlsfReplay)->Arg(100000)->Arg(1000000)->Arg(5000000)->Unit(benchmark::kMillisecond);

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

// ---- MiniMalloc benchmark files: `luma plan FILE` (strategy best, default time limit) ----

const char* const kFiles[] = {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K"};
constexpr int kFileCount = static_cast<int>(std::size(kFiles));

std::vector<Lifetime> minimalloc_file(const char* name) {
  const std::filesystem::path path =
      std::filesystem::path(LUMA_MINIMALLOC_DIR) / (std::string(name) + ".1048576.csv");
  return std::filesystem::exists(path) ? read_lifetimes_file(path.string(), builtin_readers())
                                       : std::vector<Lifetime>{};
}

SearchOptions cli_defaults() {
  SearchOptions search;
  search.time_limit_seconds = planner::kDefaultTimeLimitSeconds;
  search.seed = planner::kSearchSeed;
  return search;
}

// Reads, plans (tlsf, greedy, branch and bound) and checks, as `luma plan` does.
void BM_MiniMallocBest(benchmark::State& state) {
  const char* name = kFiles[state.range(0)];
  if (minimalloc_file(name).empty()) {
    state.SkipWithError("no MiniMalloc data");
    return;
  }
  PlanReport report;
  for (auto _ : state) {
    auto lts = minimalloc_file(name);
    report = plan_lifetimes(lts, Strategy::best, cli_defaults());
  }
  state.counters["ratio"] = static_cast<double>(report.chosen.arena) / static_cast<double>(report.lower_bound);
  state.counters["proven"] = report.chosen.strategy == "branch-and-bound (optimal)" ? 1 : 0;
  state.counters["work"] = static_cast<double>(report.search_work);
  state.counters["by_time"] = report.search_stopped_by_time ? 1 : 0;
  state.SetLabel(name);
}
BENCHMARK(BM_MiniMallocBest)->DenseRange(0, kFileCount - 1)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

// D and J (the two files not packed at the lower bound) with `luma plan --time-limit 10`.
void BM_MiniMallocTenSeconds(benchmark::State& state) {
  const char* name = state.range(0) == 0 ? "D" : "J";
  if (minimalloc_file(name).empty()) {
    state.SkipWithError("no MiniMalloc data");
    return;
  }
  SearchOptions search = cli_defaults();
  search.time_limit_seconds = 10;
  PlanReport report;
  for (auto _ : state) {
    auto lts = minimalloc_file(name);
    report = plan_lifetimes(lts, Strategy::best, search);
  }
  state.counters["arena"] = static_cast<double>(report.chosen.arena);
  state.counters["ratio"] = static_cast<double>(report.chosen.arena) / static_cast<double>(report.lower_bound);
  state.counters["by_time"] = report.search_stopped_by_time ? 1 : 0;
  state.SetLabel(name);
}
BENCHMARK(BM_MiniMallocTenSeconds)->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->Iterations(1)->MeasureProcessCPUTime()->UseRealTime();

// The optimality question for D and J: does either pack at its lower bound? One search per
// static order with `range(1)` nodes; counters: 1 per order that found a packing / proved
// none exists (0 and 0: undecided within the nodes).
void BM_MiniMallocDecideAtLowerBound(benchmark::State& state) {
  const char* name = state.range(0) == 0 ? "D" : "J";
  const auto lts = minimalloc_file(name);
  if (lts.empty()) {
    state.SkipWithError("no MiniMalloc data");
    return;
  }
  const std::uint64_t lower_bound = lower_bound_bytes(lts);
  int found = 0, infeasible = 0;
  std::uint64_t nodes = 0;
  for (auto _ : state) {
    CanonicalSearch search(lts, planner::kBranchAndBoundMaxOverlaps);
    for (auto order : {CanonicalSearch::Order::wat, CanonicalSearch::Order::taw,
                       CanonicalSearch::Order::twa}) {
      CanonicalSearch::Limits limits;
      limits.nodes = static_cast<std::uint64_t>(state.range(1));
      const auto outcome = search.solve(lower_bound, order, limits);
      found += outcome == CanonicalSearch::Outcome::found;
      infeasible += outcome == CanonicalSearch::Outcome::infeasible;
    }
    nodes = search.nodes();
  }
  state.counters["found"] = found;
  state.counters["infeasible"] = infeasible;
  state.counters["nodes"] = static_cast<double>(nodes);
  state.SetLabel(name);
}
BENCHMARK(BM_MiniMallocDecideAtLowerBound)->ArgsProduct({{0, 1}, {1000000}})->Unit(benchmark::kMillisecond)->Iterations(1)->MeasureProcessCPUTime()->UseRealTime();

// A local proof that D does not pack at its lower bound would be a time window whose buffers,
// cut to the window, do not pack there (cutting lifetimes only removes overlaps, so the cut
// problem packs whenever the whole does). Every window of up to `range(0)` consecutive
// distinct times is decided at D's lower bound with `range(1)` nodes per static order;
// counters: windows found packed, proven not to pack (a proof), undecided.
void BM_MiniMallocWindowsAtLowerBound(benchmark::State& state) {
  const auto lts = minimalloc_file("D");
  if (lts.empty()) {
    state.SkipWithError("no MiniMalloc data");
    return;
  }
  const std::uint64_t lower_bound = lower_bound_bytes(lts);
  std::vector<std::uint64_t> times;
  for (const Lifetime& lt : lts) {
    times.push_back(lt.lower);
    times.push_back(lt.upper);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  const auto widest = static_cast<std::size_t>(state.range(0));
  int found = 0, infeasible = 0, undecided = 0;
  for (auto _ : state) {
    found = infeasible = undecided = 0;
    for (std::size_t i = 0; i < times.size(); ++i)
      for (std::size_t j = i + 1; j < times.size() && j - i <= widest; ++j) {
        std::vector<Lifetime> cut;
        for (Lifetime lt : lts) {
          lt.lower = std::max(lt.lower, times[i]);
          lt.upper = std::min(lt.upper, times[j]);
          if (lt.lower < lt.upper) cut.push_back(lt);
        }
        CanonicalSearch search(cut, planner::kBranchAndBoundMaxOverlaps);
        auto outcome = CanonicalSearch::Outcome::limit;
        for (auto order : {CanonicalSearch::Order::wat, CanonicalSearch::Order::taw,
                           CanonicalSearch::Order::twa}) {
          CanonicalSearch::Limits limits;
          limits.nodes = static_cast<std::uint64_t>(state.range(1));
          outcome = search.solve(lower_bound, order, limits);
          if (outcome != CanonicalSearch::Outcome::limit) break;
        }
        found += outcome == CanonicalSearch::Outcome::found;
        infeasible += outcome == CanonicalSearch::Outcome::infeasible;
        undecided += outcome == CanonicalSearch::Outcome::limit;
      }
  }
  state.counters["found"] = found;
  state.counters["infeasible"] = infeasible;
  state.counters["undecided"] = undecided;
}
BENCHMARK(BM_MiniMallocWindowsAtLowerBound)->Args({45, 5000})->Unit(benchmark::kMillisecond)->Iterations(1)->MeasureProcessCPUTime()->UseRealTime();

void BM_MiniMallocAllFiles(benchmark::State& state) {
  double mean = 0;
  for (auto _ : state) {
    double log_sum = 0;
    for (const char* name : kFiles) {
      auto lts = minimalloc_file(name);
      if (lts.empty()) {
        state.SkipWithError("no MiniMalloc data");
        return;
      }
      PlanReport r = plan_lifetimes(lts, Strategy::best, cli_defaults());
      log_sum += std::log(static_cast<double>(r.chosen.arena) / static_cast<double>(r.lower_bound));
    }
    mean = std::exp(log_sum / static_cast<double>(std::size(kFiles)));
  }
  state.counters["geomean"] = mean;
}
BENCHMARK(BM_MiniMallocAllFiles)->Unit(benchmark::kMillisecond)->Iterations(1)->MeasureProcessCPUTime()->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
