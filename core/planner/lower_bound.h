// lower_bound.h - the lower bound on any plan's arena: the largest total size of buffers
// live at one time (half-open lifetimes: one ending at t and one starting at t never meet).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/lifetime.h"

namespace luma::core {

std::uint64_t lower_bound_bytes(const std::vector<Lifetime>& lifetimes);

}  // namespace luma::core
