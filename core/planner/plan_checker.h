// plan_checker.h - the check every plan passes before it is written: no two buffers whose
// lifetimes overlap share a byte, every offset keeps its buffer's alignment, and the arena
// recorded is the largest offset + size.
#pragma once

#include <string>
#include <vector>

#include "planner/lifetime.h"
#include "planner/plan.h"

namespace luma::core {

// The violations found (at most `max_messages` messages, then a count); empty when valid.
// O(n log n + conflicts reported).
std::vector<std::string> check_plan(const std::vector<Lifetime>& lifetimes, const Plan& plan,
                                    std::size_t max_messages = 20);

}  // namespace luma::core
