// branch_and_bound.h - the exact planner's driver: it turns the decision search of
// canonical_search.h ("does it fit in C bytes?") into a minimisation of the arena.
// First it asks for a packing at the lower bound (these inputs often pack perfectly: then
// the plan is proven optimal and it stops); then it bisects the capacity between the largest
// one known to fail and the best arena found. Each question restarts the search over the
// three static orders with node limits doubling from twice the buffer count (MiniMalloc's
// round robin), so one unlucky order costs little.
//
// The effort is counted in work units (canonical_search.h), not time, so the answer is the
// same on every machine and under any load; the wall-clock limit is only a safety net that
// cuts in when the machine is several times slower than the work budget assumes.
// Never returns a plan with an arena at or above `start_arena`.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/lifetime.h"
#include "planner/plan.h"

namespace luma::core {

struct BranchAndBoundLimits {
  std::uint64_t work = 0;  // work units for the whole minimisation; 0: no bound but the time
  double seconds = 0;      // wall-clock safety net; 0 or less (or above 10^9): none
};

struct BranchAndBoundResult {
  bool ran = false;             // false: the input was too large for it (see the constants)
  std::optional<Plan> plan;     // a plan smaller than the start arena, if one was found
  bool proven_optimal = false;  // the plan's arena was shown to be the smallest possible
  bool stopped_by_time = false; // the wall clock, not the work budget, ended it
  std::uint64_t nodes = 0;
  std::uint64_t work = 0;
};

// Looks for a plan with an arena below `start_arena` (a plan already known, e.g. the
// greedy's), down to `lower_bound`.
BranchAndBoundResult branch_and_bound(const std::vector<Lifetime>& lifetimes,
                                      std::uint64_t lower_bound, std::uint64_t start_arena,
                                      const BranchAndBoundLimits& limits);

}  // namespace luma::core
