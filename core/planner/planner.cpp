// planner.cpp - see planner.h.
#include "planner/planner.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "planner/branch_and_bound.h"
#include "planner/greedy.h"
#include "planner/lower_bound.h"
#include "planner/plan_checker.h"
#include "planner/planner_constants.h"
#include "planner/tlsf_replay.h"

namespace luma::core {

std::optional<Strategy> parse_strategy(std::string_view name) {
  if (name == "tlsf") return Strategy::tlsf;
  if (name == "greedy") return Strategy::greedy;
  if (name == "best") return Strategy::best;
  return std::nullopt;
}

namespace {

template <class F>
StrategyRun timed(const std::vector<Lifetime>& lifetimes, F&& make) {
  auto t0 = std::chrono::steady_clock::now();
  StrategyRun run{make(), 0};
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto bad = check_plan(lifetimes, run.plan);
  if (!bad.empty())
    throw std::logic_error("planner bug: strategy " + run.plan.strategy +
                           " made an invalid plan: " + bad.front());
  return run;
}

}  // namespace

PlanReport plan_lifetimes(const std::vector<Lifetime>& lifetimes, Strategy strategy,
                          const SearchOptions& search) {
  PlanReport report;
  report.lower_bound = lower_bound_bytes(lifetimes);
  if (strategy == Strategy::tlsf || strategy == Strategy::best)
    report.runs.push_back(timed(lifetimes, [&] { return plan_tlsf_replay(lifetimes); }));
  if (strategy == Strategy::greedy || strategy == Strategy::best)
    report.runs.push_back(timed(lifetimes, [&] { return plan_greedy_best(lifetimes); }));
  if (strategy == Strategy::best) {
    const Plan start = report.runs.back().plan;
    report.runs.push_back(timed(lifetimes, [&] {
      // The exact search where its per-node scans stay cheap and its tables small (see the
      // constants); the local search over orders otherwise. Both spend the same work budget.
      if (lifetimes.size() <= planner::kBranchAndBoundMaxBuffers) {
        BranchAndBoundLimits limits;
        limits.seconds = search.time_limit_seconds;
        limits.work = work_budget_of(search);
        BranchAndBoundResult r =
            branch_and_bound(lifetimes, report.lower_bound, start.arena, limits);
        report.search_iterations = r.nodes;
        report.search_work = r.work;
        report.search_stopped_by_time = r.stopped_by_time;
        if (r.plan) {
          r.plan->strategy = r.proven_optimal ? "branch-and-bound (optimal)" : "branch-and-bound";
          return *r.plan;
        }
        if (r.ran) {
          Plan same = start;
          same.strategy = "branch-and-bound (no gain)";
          return same;
        }
      }
      SearchResult r = search_plan(lifetimes, start, report.lower_bound, search);
      report.search_iterations = r.iterations;
      r.plan.strategy = r.improved ? "search" : "search (no gain)";
      return r.plan;
    }));
  }
  std::size_t pick = 0;
  for (std::size_t k = 1; k < report.runs.size(); ++k)
    if (report.runs[k].plan.arena < report.runs[pick].plan.arena) pick = k;
  report.chosen = report.runs[pick].plan;
  return report;
}

std::vector<Lifetime> lifetimes_of_device(const std::vector<Lifetime>& lifetimes, int device) {
  std::vector<Lifetime> out;
  for (const Lifetime& lt : lifetimes)
    if (lt.device == device) out.push_back(lt);
  return out;
}

std::vector<int> devices_of(const std::vector<Lifetime>& lifetimes) {
  std::vector<int> devices;
  for (const Lifetime& lt : lifetimes) devices.push_back(lt.device);
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

}  // namespace luma::core
