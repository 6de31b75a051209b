// periodic.h - repeating work (`luma plan --periodic`): find where a device's allocation
// sequence starts repeating, and plan the warm-up plus one period so that the period's
// placement can be served again and again, back to back, for any number of iterations.
//
// Time here is the allocation index of one device: allocation k happens at time k, and a
// free that happens after k allocations were made happens at time k (before allocation k).
// Detection, the cyclic model and the checks are described in docs/plan-replay.md.
// Never returns an unchecked plan: a periodic plan that fails its checks is a bug and
// throws std::logic_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan_constants.h"
#include "planner/lifetime.h"
#include "planner/planner.h"

namespace luma::core {

// One device's allocations in sequence order.
struct AllocationSequence {
  std::vector<std::uint64_t> key;      // what must repeat: bytes requested (the size if unknown)
  std::vector<std::uint64_t> size;     // bytes placed
  std::vector<std::uint64_t> free_at;  // allocations made before its free (> its own index);
                                       // count() when freed after the last one, or never
  std::vector<std::size_t> input;      // its index in the lifetimes it was made from
  std::size_t count() const noexcept { return key.size(); }
};

// The lifetimes of ONE device in allocation order (by lower, ties in input order); `keys`
// parallel to `lifetimes` (requested bytes), or empty to use the sizes.
AllocationSequence allocation_sequence(const std::vector<Lifetime>& lifetimes,
                                       const std::vector<std::uint64_t>& keys = {});

struct Period {
  std::uint64_t warmup = 0;  // W: allocations before the repetition starts
  std::uint64_t period = 0;  // P: allocations per iteration
};

struct PeriodSearch {
  std::optional<Period> found;
  bool budget_exhausted = false;  // stopped by the comparison budget before finishing
  std::uint64_t comparisons = 0;
};

// The (W, P) with the smallest W + P (the shortest plan; ties: the smaller P) such that
// from W to the end of the sequence every allocation k has the key of k + P, is freed
// before allocation k + P is made, and k + P is freed P allocations after k is (or, where
// that is past the end of the trace, after the last allocation), with at least
// plan::kMinPeriodRepeats full periods from W to the end.
PeriodSearch find_period(const AllocationSequence& sequence,
                         std::uint64_t budget = plan::kPeriodSearchBudget);

struct PeriodicPlan {
  std::uint64_t warmup = 0;           // W' = detected W + phase: slots [0, W') run once
  std::uint64_t period = 0;           // P: slots [W', W' + P) repeat
  std::uint64_t detected_warmup = 0;  // W
  std::uint64_t captured_iterations = 0;  // full periods from W' to the end of the input
  std::uint64_t boundary_bytes = 0;   // bytes live across the cut (planned exclusively)
  std::vector<Lifetime> slots;        // W' + P lifetimes of the cyclic model
  std::vector<std::size_t> slot_input;  // input index of each slot's first instance
  std::vector<std::uint64_t> slot_key;  // key (requested bytes) of each slot
  PlanReport report;                  // the planner's report over `slots`
};

// Plans `lifetimes` (one device, the ones `sequence` was made from) with period `period`.
// The period's phase is moved to where the fewest bytes are live across the boundary.
PeriodicPlan plan_periodic(const std::vector<Lifetime>& lifetimes, const AllocationSequence& sequence,
                           const Period& period, Strategy strategy, const SearchOptions& search);

// Checks a periodic plan against the whole input sequence (every captured allocation at
// its slot's offset, with its real lifetime) and against `iterations` periods unrolled
// after the warm-up; empty when valid.
std::vector<std::string> check_periodic_plan(const AllocationSequence& sequence, const PeriodicPlan& plan,
                                             std::uint64_t iterations = plan::kPeriodicCheckIterations);

}  // namespace luma::core
