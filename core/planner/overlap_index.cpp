// overlap_index.cpp - see overlap_index.h.
#include "planner/overlap_index.h"

#include <algorithm>
#include <numeric>

namespace luma::core {

OverlapIndex::OverlapIndex(const std::vector<Lifetime>& lifetimes) {
  std::size_t n = lifetimes.size();
  by_lower_.resize(n);
  std::iota(by_lower_.begin(), by_lower_.end(), 0u);
  std::stable_sort(by_lower_.begin(), by_lower_.end(), [&](std::uint32_t a, std::uint32_t b) {
    return lifetimes[a].lower < lifetimes[b].lower;
  });
  lowers_.resize(n);
  rank_.resize(n);
  uppers_.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    lowers_[k] = lifetimes[by_lower_[k]].lower;
    rank_[by_lower_[k]] = static_cast<std::uint32_t>(k);
  }
  for (std::size_t i = 0; i < n; ++i) uppers_[i] = lifetimes[i].upper;
  while (leaves_ < n) leaves_ *= 2;
  tree_.assign(2 * leaves_, 0);
}

void OverlapIndex::insert(std::size_t i) {
  std::size_t node = leaves_ + rank_[i];
  std::uint64_t up = uppers_[i];
  while (node >= 1 && tree_[node] < up) {
    tree_[node] = up;
    node /= 2;
  }
}

void OverlapIndex::query(std::uint64_t lower, std::uint64_t upper,
                         std::vector<std::uint32_t>& out) const {
  std::size_t prefix = static_cast<std::size_t>(
      std::lower_bound(lowers_.begin(), lowers_.end(), upper) - lowers_.begin());
  if (prefix == 0 || lower >= upper) return;
  // Iterative descent; a node covers leaves [first, first + width).
  struct Frame {
    std::size_t node, first, width;
  };
  Frame stack[64];
  std::size_t top = 0;
  stack[top++] = {1, 0, leaves_};
  while (top > 0) {
    Frame f = stack[--top];
    if (f.first >= prefix || tree_[f.node] <= lower) continue;
    if (f.width == 1) {
      out.push_back(by_lower_[f.first]);
      continue;
    }
    std::size_t half = f.width / 2;
    stack[top++] = {2 * f.node + 1, f.first + half, half};
    stack[top++] = {2 * f.node, f.first, half};
  }
}

}  // namespace luma::core
