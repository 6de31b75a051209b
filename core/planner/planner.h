// planner.h - the planner's entry point: run the strategies asked for on one device's
// lifetimes, check every plan, and keep the one with the smallest arena.
//   tlsf   - the TLSF replay (what tinygrad's planner would do)
//   greedy - the greedy family (every ordering, best and first fit)
//   best   - both, then the improvement search from the greedy's result
// It never returns an unchecked plan: a plan that fails check_plan is a bug and throws
// std::logic_error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/lifetime.h"
#include "planner/plan.h"
#include "planner/search.h"

namespace luma::core {

enum class Strategy { tlsf, greedy, best };
std::optional<Strategy> parse_strategy(std::string_view name);

struct StrategyRun {
  Plan plan;
  double seconds = 0;
};

struct PlanReport {
  std::uint64_t lower_bound = 0;
  std::vector<StrategyRun> runs;  // in the order they ran
  Plan chosen;                    // the smallest arena (the first on ties)
  std::uint64_t search_iterations = 0;  // branch and bound: nodes; local search: iterations
  std::uint64_t search_work = 0;        // branch and bound: work units spent
  bool search_stopped_by_time = false;  // the time limit, not the work budget, ended it
};

PlanReport plan_lifetimes(const std::vector<Lifetime>& lifetimes, Strategy strategy,
                          const SearchOptions& search);

// The lifetimes of one device, and the devices present (sorted).
std::vector<Lifetime> lifetimes_of_device(const std::vector<Lifetime>& lifetimes, int device);
std::vector<int> devices_of(const std::vector<Lifetime>& lifetimes);

}  // namespace luma::core
