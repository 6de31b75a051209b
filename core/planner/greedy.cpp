// greedy.cpp - see greedy.h.
#include "planner/greedy.h"

#include <algorithm>
#include <numeric>

#include "planner/offset_buckets.h"
#include "planner/overlap_index.h"
#include "planner/planner_constants.h"

namespace luma::core {

std::string_view greedy_order_name(GreedyOrder order) {
  switch (order) {
    case GreedyOrder::size: return "size";
    case GreedyOrder::lifetime: return "lifetime";
    case GreedyOrder::area: return "area";
    case GreedyOrder::lower: return "lower";
  }
  return "?";
}

std::vector<std::uint32_t> greedy_ordering(const std::vector<Lifetime>& lifetimes,
                                           GreedyOrder order) {
  std::vector<std::uint32_t> idx(lifetimes.size());
  std::iota(idx.begin(), idx.end(), 0u);
  auto len = [&](std::uint32_t i) { return lifetimes[i].upper - lifetimes[i].lower; };
  auto size = [&](std::uint32_t i) { return lifetimes[i].size; };
  auto by = [&](auto cmp) { std::stable_sort(idx.begin(), idx.end(), cmp); };
  switch (order) {
    case GreedyOrder::size:
      by([&](std::uint32_t a, std::uint32_t b) {
        return size(a) != size(b) ? size(a) > size(b) : len(a) > len(b);
      });
      break;
    case GreedyOrder::lifetime:
      by([&](std::uint32_t a, std::uint32_t b) {
        return len(a) != len(b) ? len(a) > len(b) : size(a) > size(b);
      });
      break;
    case GreedyOrder::area:
      // long double: size * length can exceed 64 bits.
      by([&](std::uint32_t a, std::uint32_t b) {
        long double x = static_cast<long double>(size(a)) * static_cast<long double>(len(a));
        long double y = static_cast<long double>(size(b)) * static_cast<long double>(len(b));
        return x != y ? x > y : size(a) > size(b);
      });
      break;
    case GreedyOrder::lower:
      by([&](std::uint32_t a, std::uint32_t b) {
        return lifetimes[a].lower != lifetimes[b].lower ? lifetimes[a].lower < lifetimes[b].lower
                                                        : size(a) > size(b);
      });
      break;
  }
  return idx;
}

Plan place_in_order(const std::vector<Lifetime>& lifetimes,
                    const std::vector<std::uint32_t>& order, Fit fit) {
  Plan plan;
  plan.offsets.assign(lifetimes.size(), 0);
  // Time buckets hand over the overlapping buffers already in offset order; inputs whose
  // lifetimes would fill too many buckets use the overlap tree and a sort per buffer.
  OffsetBuckets buckets(lifetimes);
  if (buckets.worth_it()) {
    for (std::uint32_t i : order) {
      const Lifetime& lt = lifetimes[i];
      GapScan scan(lt.size, lt.alignment, fit);
      buckets.for_each_overlap(lt.lower, lt.upper,
                               [&](std::uint64_t off, std::uint64_t end) { scan.add(off, end); });
      plan.offsets[i] = scan.result();
      buckets.insert(lt, plan.offsets[i]);
    }
    plan.arena = arena_of(lifetimes, plan.offsets);
    return plan;
  }
  OverlapIndex index(lifetimes);
  std::vector<std::uint32_t> hits;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;
  for (std::uint32_t i : order) {
    const Lifetime& lt = lifetimes[i];
    hits.clear();
    busy.clear();
    index.query(lt.lower, lt.upper, hits);
    for (std::uint32_t j : hits)
      if (lifetimes[j].size > 0) busy.emplace_back(plan.offsets[j], plan.offsets[j] + lifetimes[j].size);
    plan.offsets[i] = place(busy, lt.size, lt.alignment, fit);
    index.insert(i);
  }
  plan.arena = arena_of(lifetimes, plan.offsets);
  return plan;
}

Plan plan_greedy(const std::vector<Lifetime>& lifetimes, GreedyOrder order) {
  Plan plan = place_in_order(lifetimes, greedy_ordering(lifetimes, order), Fit::best);
  plan.strategy = "greedy-" + std::string(greedy_order_name(order));
  return plan;
}

Plan plan_greedy_best(const std::vector<Lifetime>& lifetimes) {
  Plan best;
  bool have = false;
  // Large inputs get the classic ordering only: each ordering costs a full placement.
  const bool large = lifetimes.size() > planner::kGreedyAllOrdersMaxBuffers;
  for (GreedyOrder order : kGreedyOrders) {
    if (large && order != GreedyOrder::size) continue;
    for (Fit fit : {Fit::best, Fit::first}) {
      if (large && fit != Fit::best) continue;
      Plan plan = place_in_order(lifetimes, greedy_ordering(lifetimes, order), fit);
      plan.strategy = "greedy-" + std::string(greedy_order_name(order)) +
                      (fit == Fit::best ? "" : "-firstfit");
      if (!have || plan.arena < best.arena) {
        best = std::move(plan);
        have = true;
      }
    }
  }
  if (!have) best.strategy = "greedy";
  return best;
}

}  // namespace luma::core
