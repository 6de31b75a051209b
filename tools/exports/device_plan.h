// device_plan.h - what `luma plan` computed for one device: its lifetimes (input order) and
// the planner's report. Shared by the writers of the plan files.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "plan/plan_file.h"
#include "planner/lifetime.h"
#include "planner/planner.h"

namespace luma::tools {

struct DevicePlan {
  int device = 0;
  std::vector<core::Lifetime> lifetimes;
  core::PlanReport report;
  // For plan replay (docs/plan-replay.md): the bytes each lifetime requested (empty: its
  // size), and the layout of a periodic plan (lifetimes are then its warm-up + one period).
  std::vector<std::uint64_t> requested;
  std::optional<core::PeriodicLayout> periodic;
  std::optional<core::FenceSlackLayout> fence_slack;  // a fence-aware plan (lifetimes extended)
};

// arena / lower bound; 1 when both are 0 (nothing to place).
inline double arena_ratio(std::uint64_t arena, std::uint64_t lower_bound) {
  if (lower_bound == 0) return arena == 0 ? 1.0 : 0.0;
  return static_cast<double>(arena) / static_cast<double>(lower_bound);
}

}  // namespace luma::tools
