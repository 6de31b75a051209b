// fence_slack.cpp - see fence_slack.h.
#include "planner/fence_slack.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>

#include "planner/planner_constants.h"

namespace luma::core {
namespace {

// The allocation instants of each device, sorted: the clock fence slack is counted in.
std::map<int, std::vector<std::uint64_t>> lowers_by_device(const std::vector<Lifetime>& lifetimes) {
  std::map<int, std::vector<std::uint64_t>> by;
  for (const Lifetime& l : lifetimes) by[l.device].push_back(l.lower);
  for (auto& [d, v] : by) std::sort(v.begin(), v.end());
  return by;
}

}  // namespace

std::vector<Lifetime> with_fence_slack(std::vector<Lifetime> lifetimes, std::uint64_t slack) {
  if (slack == 0) return lifetimes;
  const auto by = lowers_by_device(lifetimes);
  for (Lifetime& l : lifetimes) {
    const std::vector<std::uint64_t>& lowers = by.at(l.device);
    // j: the first allocation at or after the free (frees come before allocations at the
    // same instant, the planner's rule). None: the buffer lives to the end; nothing to keep.
    const auto j = static_cast<std::uint64_t>(std::lower_bound(lowers.begin(), lowers.end(), l.upper) - lowers.begin());
    if (j >= lowers.size()) continue;
    if (j + slack < lowers.size()) {
      l.upper = lowers[j + slack];
    } else {
      // Past the device's last allocation: one instant after it holds the bytes from every
      // allocation there is (and keeps lower < upper for an empty lifetime).
      l.upper = std::max(l.upper, lowers.back() + 1);
    }
  }
  return lifetimes;
}

std::vector<Lifetime> with_selective_fence_slack(std::vector<Lifetime> lifetimes, std::uint64_t slack,
                                                 std::uint64_t* kept) {
  if (kept != nullptr) *kept = 0;
  if (slack == 0) return lifetimes;
  std::map<int, std::vector<std::size_t>> by_device;
  for (std::size_t i = 0; i < lifetimes.size(); ++i) by_device[lifetimes[i].device].push_back(i);
  for (const auto& [device, members] : by_device) {
    // The device's allocations in time order (ties in input order), and its frees.
    std::vector<std::size_t> allocs = members, frees = members;
    std::stable_sort(allocs.begin(), allocs.end(),
                     [&](std::size_t a, std::size_t b) { return lifetimes[a].lower < lifetimes[b].lower; });
    std::stable_sort(frees.begin(), frees.end(),
                     [&](std::size_t a, std::size_t b) { return lifetimes[a].upper < lifetimes[b].upper; });
    const std::size_t n = allocs.size();
    std::vector<std::uint64_t> lowers(n);
    for (std::size_t k = 0; k < n; ++k) lowers[k] = lifetimes[allocs[k]].lower;
    // held[k]: bytes live just before allocation k (frees at its instant come first);
    // live[k]: with allocation k itself. Live bytes peak at allocations.
    std::vector<std::uint64_t> held(n), live(n);
    std::uint64_t bytes = 0, peak = 0;
    for (std::size_t k = 0, f = 0; k < n; ++k) {
      for (; f < frees.size() && lifetimes[frees[f]].upper <= lowers[k]; ++f) bytes -= lifetimes[frees[f]].size;
      held[k] = bytes;
      bytes += lifetimes[allocs[k]].size;
      live[k] = bytes;
      peak = std::max(peak, bytes);
    }
    const std::uint64_t cap = peak + peak / planner::kSelectivePeakAllowanceDivisor;
    std::uint64_t quiet = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t k = n / 2; k < n; ++k) quiet = std::min(quiet, held[k]);
    std::vector<std::uint64_t> extra(n, 0);  // bytes kept across allocation k so far
    for (const std::size_t i : frees) {
      Lifetime& l = lifetimes[i];
      // j: the first allocation at or after the free; none (freed after the device's last
      // allocation, or never): nothing to keep. Kept over the longest prefix of its
      // window that fits, up to `slack` allocations.
      const auto j = static_cast<std::size_t>(std::lower_bound(lowers.begin(), lowers.end(), l.upper) - lowers.begin());
      std::size_t end = j;
      while (end < n && end - j < slack && held[end] > quiet && live[end] + extra[end] + l.size <= cap) ++end;
      if (end == j) continue;
      for (std::size_t k = j; k < end; ++k) extra[k] += l.size;
      l.upper = end < n ? lowers[end] : std::max(l.upper, lowers.back() + 1);
      if (kept != nullptr) ++*kept;
    }
  }
  return lifetimes;
}

std::uint64_t min_reuse_gap(const std::vector<Lifetime>& lifetimes, const std::vector<std::uint64_t>& offsets) {
  const std::size_t n = lifetimes.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return lifetimes[a].lower < lifetimes[b].lower; });
  std::vector<std::uint64_t> lowers(n);
  for (std::size_t i = 0; i < n; ++i) lowers[i] = lifetimes[order[i]].lower;
  auto rank = [&](std::uint64_t t) {  // allocations made before instant t (frees first)
    return static_cast<std::uint64_t>(std::lower_bound(lowers.begin(), lowers.end(), t) - lowers.begin());
  };
  std::uint64_t gap = std::numeric_limits<std::uint64_t>::max();
  // Quadratic, but only over pairs that share bytes and follow each other in time; inputs
  // of tests and of `luma plan`'s report are small enough (the planner itself is worse).
  for (std::size_t i = 0; i < n; ++i) {
    const Lifetime& a = lifetimes[i];
    const std::uint64_t freed = rank(a.upper);
    if (freed >= n) continue;  // freed after the last allocation (or never): no reuse
    for (std::size_t k = 0; k < n; ++k) {
      const Lifetime& b = lifetimes[k];
      if (b.lower < a.upper) continue;  // not after a's free
      if (offsets[k] >= offsets[i] + a.size || offsets[i] >= offsets[k] + b.size) continue;
      gap = std::min(gap, rank(b.lower) - freed);
    }
  }
  return gap;
}

}  // namespace luma::core
