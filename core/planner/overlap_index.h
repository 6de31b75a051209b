// overlap_index.h - finds the already-placed buffers whose lifetimes overlap a query
// lifetime, in O((k + 1) log n) for k answers and linear memory: the buffers sorted by
// lower, and a max-tree of the upper ends of the placed ones. The buffers with
// lower < query.upper are a prefix of that order; the tree prunes every subtree whose
// largest upper end is <= query.lower.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/lifetime.h"

namespace luma::core {

class OverlapIndex {
 public:
  explicit OverlapIndex(const std::vector<Lifetime>& lifetimes);

  // Marks buffer i (an input index) as placed.
  void insert(std::size_t i);
  // Appends to `out` the placed buffers overlapping [lower, upper).
  void query(std::uint64_t lower, std::uint64_t upper, std::vector<std::uint32_t>& out) const;

 private:
  std::vector<std::uint32_t> by_lower_;  // input indices sorted by lower
  std::vector<std::uint64_t> lowers_;    // lowers_[k] = lower of by_lower_[k]
  std::vector<std::uint32_t> rank_;      // input index -> position in by_lower_
  std::vector<std::uint64_t> uppers_;    // input index -> upper
  std::vector<std::uint64_t> tree_;      // max upper of placed leaves; 0 = none
  std::size_t leaves_ = 1;
};

}  // namespace luma::core
