// greedy.h - the greedy-by-size family (TFLite / XLA style): buffers in a priority order,
// each put into the best-fitting gap among the already-placed buffers that overlap it in
// time. Deterministic (ties broken by input order). Sub-quadratic in practice: the overlap
// search costs O((k + 1) log n) for k overlapping placed buffers (see overlap_index.h).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "planner/lifetime.h"
#include "planner/placement.h"
#include "planner/plan.h"

namespace luma::core {

enum class GreedyOrder {
  size,      // decreasing size (then longer lifetime)
  lifetime,  // decreasing lifetime length (then larger size)
  area,      // decreasing size * lifetime length
  lower,     // increasing lower (then larger size)
};
inline constexpr GreedyOrder kGreedyOrders[] = {GreedyOrder::size, GreedyOrder::lifetime,
                                                GreedyOrder::area, GreedyOrder::lower};
std::string_view greedy_order_name(GreedyOrder order);

// Input indices in the order's priority.
std::vector<std::uint32_t> greedy_ordering(const std::vector<Lifetime>& lifetimes,
                                           GreedyOrder order);

// Places buffers in `order` (input indices, each once) with the given fit.
Plan place_in_order(const std::vector<Lifetime>& lifetimes,
                    const std::vector<std::uint32_t>& order, Fit fit);

// One ordering with best fit.
Plan plan_greedy(const std::vector<Lifetime>& lifetimes, GreedyOrder order);

// Every ordering (and both fits); the plan with the smallest arena (first on ties).
// Above planner::kGreedyAllOrdersMaxBuffers buffers only by-size best fit.
Plan plan_greedy_best(const std::vector<Lifetime>& lifetimes);

}  // namespace luma::core
