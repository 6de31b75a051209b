// search.h - the improvement search: a randomized local search over placement orders
// ("squeaky wheel" optimisation). An order is decoded by placing each buffer at the lowest
// offset where it fits among the overlapping buffers already placed (MiniMalloc's canonical
// placement); the search moves buffers that end on top of the arena earlier in the order,
// swaps neighbours, keeps changes that do not make the (arena, bytes above the lower bound)
// cost worse, and goes back to the best order when stuck. It stops at the lower bound (a
// proven optimum), at the time limit, or at max_iterations.
// Never returns a plan worse than `start`. Deterministic for a given input, seed and
// iteration count; with a time limit, how many iterations run depends on the machine.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/lifetime.h"
#include "planner/plan.h"

namespace luma::core {

struct SearchOptions {
  double time_limit_seconds = 1.5;
  std::uint64_t seed = 0;
  std::uint64_t max_iterations = 0;  // 0: no limit but the time (branch and bound: nodes)
};

struct SearchResult {
  Plan plan;
  std::uint64_t iterations = 0;
  bool improved = false;  // found a smaller arena than start
};

SearchResult search_plan(const std::vector<Lifetime>& lifetimes, const Plan& start,
                         std::uint64_t lower_bound, const SearchOptions& options);

}  // namespace luma::core
