// branch_and_bound.h - MiniMalloc-style exact search over canonical solutions, bounded by
// time. Every packing can be pushed down until each buffer rests on one below it (or on 0),
// and its buffers then listed in increasing (offset, preorder rank): a canonical solution.
// The search builds such lists: at each node every unplaced buffer sits at its lowest
// offset (the highest top among the placed buffers it overlaps in time), and the next one
// is chosen among those with (offset, rank) beyond the last placed one's (canonical rule)
// and offset below the lowest top any unplaced buffer could reach (dominance: otherwise a
// gap is left that buffer could fill). Time is cut into sections at lifetime boundaries;
// each section keeps a floor (no later buffer goes below it: the last top placed there, the
// lowest offset of its unplaced buffers, the last offset placed) and the bytes still to
// place in it; a node is cut when some floor + bytes left exceeds the capacity.
// When no unplaced buffer crosses a section boundary, each side is searched on its own
// (dynamic decomposition); a buffer nothing unplaced overlaps ends its sibling loop when it
// fails (hatless pruning). The driver first asks for a packing at the lower bound
// (restarts over three static orders with doubling node budgets, as MiniMalloc does),
// then bisects the capacity between the lower bound and the best arena known.
// Deterministic apart from where the time limit cuts it; never returns a worse plan.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/lifetime.h"
#include "planner/plan.h"

namespace luma::core {

struct BranchAndBoundResult {
  bool ran = false;             // false: the input was too large for it (see the constants)
  std::optional<Plan> plan;     // a plan smaller than the start arena, if one was found
  bool proven_optimal = false;  // its arena was shown to be the smallest possible
  std::uint64_t nodes = 0;
};

// Looks for a plan with an arena below `start_arena` within `time_limit_seconds`.
// `max_nodes` (0 = none) bounds the search too, for reproducible tests.
BranchAndBoundResult branch_and_bound(const std::vector<Lifetime>& lifetimes,
                                      std::uint64_t lower_bound, std::uint64_t start_arena,
                                      double time_limit_seconds, std::uint64_t max_nodes = 0);

}  // namespace luma::core
