// plan_checker.cpp - validates a plan with a sweep over time keeping the live buffers
// ordered by offset: a new buffer collides with some live one iff it collides with its
// neighbour in offset order (live buffers never overlap each other once checked).
#include "planner/plan_checker.h"

#include <algorithm>
#include <map>

namespace luma::core {

std::vector<std::string> check_plan(const std::vector<Lifetime>& lifetimes, const Plan& plan,
                                    std::size_t max_messages) {
  std::vector<std::string> bad;
  std::size_t dropped = 0;
  auto report = [&](std::string message) {
    if (bad.size() < max_messages) bad.push_back(std::move(message));
    else ++dropped;
  };
  if (plan.offsets.size() != lifetimes.size()) {
    bad.push_back("plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
                  std::to_string(lifetimes.size()) + " buffers");
    return bad;
  }
  auto name = [&](std::size_t i) { return "buffer '" + lifetimes[i].id + "'"; };
  for (std::size_t i = 0; i < lifetimes.size(); ++i) {
    std::uint64_t a = lifetimes[i].alignment ? lifetimes[i].alignment : 1;
    if (plan.offsets[i] % a != 0)
      report(name(i) + " at offset " + std::to_string(plan.offsets[i]) +
             " breaks its alignment " + std::to_string(a));
  }
  if (arena_of(lifetimes, plan.offsets) != plan.arena)
    report("arena " + std::to_string(plan.arena) + " is not the largest offset + size (" +
           std::to_string(arena_of(lifetimes, plan.offsets)) + ")");
  // Sweep: ends before starts at equal times.
  std::vector<std::pair<std::uint64_t, std::size_t>> edges;  // (time*2 + start, index)
  edges.reserve(lifetimes.size() * 2);
  for (std::size_t i = 0; i < lifetimes.size(); ++i) {
    if (lifetimes[i].lower >= lifetimes[i].upper || lifetimes[i].size == 0) continue;
    edges.push_back({lifetimes[i].lower * 2 + 1, i});
    edges.push_back({lifetimes[i].upper * 2, i});
  }
  std::sort(edges.begin(), edges.end());
  std::map<std::uint64_t, std::size_t> live;  // offset -> index; disjoint ranges
  std::vector<bool> inserted(lifetimes.size(), false);
  for (const auto& [key, i] : edges) {
    std::uint64_t off = plan.offsets[i], end = off + lifetimes[i].size;
    if ((key & 1) == 0) {
      if (inserted[i]) {
        live.erase(off);
        inserted[i] = false;
      }
      continue;
    }
    auto next = live.lower_bound(off);
    bool clash = false;
    if (next != live.end() && next->first < end) {
      report(name(i) + " [" + std::to_string(off) + ", " + std::to_string(end) +
             ") overlaps " + name(next->second) + " while both are live");
      clash = true;
    }
    if (next != live.begin()) {
      auto prev = std::prev(next);
      if (prev->first + lifetimes[prev->second].size > off) {
        report(name(i) + " [" + std::to_string(off) + ", " + std::to_string(end) +
               ") overlaps " + name(prev->second) + " while both are live");
        clash = true;
      }
    }
    if (!clash) {
      live.emplace(off, i);
      inserted[i] = true;
    }
  }
  if (dropped) bad.push_back("... and " + std::to_string(dropped) + " more violations");
  return bad;
}

}  // namespace luma::core
