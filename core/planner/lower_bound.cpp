// lower_bound.cpp - peak live bytes by a sweep over sorted boundaries.
#include "planner/lower_bound.h"

#include <algorithm>

namespace luma::core {

std::uint64_t lower_bound_bytes(const std::vector<Lifetime>& lifetimes) {
  // (time, +size or -size); at equal times the ends come first (half-open intervals).
  struct Edge {
    std::uint64_t time;
    bool start;
    std::uint64_t size;
  };
  std::vector<Edge> edges;
  edges.reserve(lifetimes.size() * 2);
  for (const Lifetime& lt : lifetimes) {
    if (lt.lower >= lt.upper) continue;
    edges.push_back({lt.lower, true, lt.size});
    edges.push_back({lt.upper, false, lt.size});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
    return a.time != b.time ? a.time < b.time : (!a.start && b.start);
  });
  std::uint64_t live = 0, peak = 0;
  for (const Edge& e : edges) {
    if (e.start) {
      live += e.size;
      peak = std::max(peak, live);
    } else {
      live -= e.size;
    }
  }
  return peak;
}

}  // namespace luma::core
