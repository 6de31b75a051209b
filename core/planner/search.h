// search.h - the improvement search: a randomized local search over placement orders
// ("squeaky wheel" optimisation). An order is decoded by placing each buffer at the lowest
// offset where it fits among the overlapping buffers already placed (MiniMalloc's canonical
// placement); the search moves buffers that end on top of the arena earlier in the order,
// swaps neighbours, keeps changes that do not make the (arena, bytes above the lower bound)
// cost worse, and goes back to the best order when stuck. It stops at the lower bound (a
// proven optimum), after max_iterations (or as many as the work budget buys), or at the
// time limit. Never returns a plan worse than `start`. Deterministic for a given input, seed
// and budget, unless the time limit cuts in first.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/lifetime.h"
#include "planner/plan.h"

namespace luma::core {

struct SearchOptions {
  double time_limit_seconds = 1.5;  // a safety net: the work budget ends a search first
  std::uint64_t seed = 0;
  // Local search: iterations; 0 = as many as the work budget buys (each decode of an order
  // costs about buffers + overlapping pairs work units).
  std::uint64_t max_iterations = 0;
  // Work units (canonical_search.h) for the whole improvement search; 0 = time_limit_seconds
  // x planner::kBranchAndBoundWorkPerSecond. The result then does not depend on the machine
  // or its load, unless the time limit cuts in first (a machine several times slower).
  std::uint64_t work_budget = 0;
};

// The work units a search with these options may spend (at least 1).
std::uint64_t work_budget_of(const SearchOptions& options);

struct SearchResult {
  Plan plan;
  std::uint64_t iterations = 0;
  bool improved = false;  // found a smaller arena than start
};

SearchResult search_plan(const std::vector<Lifetime>& lifetimes, const Plan& start,
                         std::uint64_t lower_bound, const SearchOptions& options);

}  // namespace luma::core
