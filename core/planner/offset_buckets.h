// offset_buckets.h - the placed buffers, found by time and listed by offset, for the greedy's
// gap search. Time is cut into equal buckets; a placed buffer is kept in every bucket its
// lifetime touches, in a list sorted by offset (inserted in place: the lists are short).
// A query merges the lists of the buckets its lifetime touches, so the overlapping buffers
// come out already in offset order and the per-buffer sort disappears.
// Only worth it when lifetimes span few buckets: `worth_it` says so; otherwise the caller
// uses OverlapIndex. Memory: one 32-byte entry per (buffer, bucket touched).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "planner/lifetime.h"

namespace luma::core {

class OffsetBuckets {
 public:
  // Picks the bucket width from the lifetimes (their median length).
  explicit OffsetBuckets(const std::vector<Lifetime>& lifetimes);

  // False when the lifetimes span so many buckets that the entries would outgrow a small
  // multiple of the input (a few very long lifetimes among short ones are fine).
  bool worth_it() const { return worth_it_; }

  // Records a placed buffer (size > 0, lower < upper) at [offset, offset + size).
  void insert(const Lifetime& lt, std::uint64_t offset);

  // Calls visit(offset, end) for every placed buffer overlapping [lower, upper) in time,
  // in increasing offset; a buffer may be visited more than once (harmless for a gap scan).
  template <class Visit>
  void for_each_overlap(std::uint64_t lower, std::uint64_t upper, Visit&& visit) const;

 private:
  struct Entry {
    std::uint64_t offset, end, lower, upper;
  };
  std::size_t bucket_of(std::uint64_t t) const {
    return static_cast<std::size_t>((t - origin_) / width_);
  }

  std::uint64_t origin_ = 0, width_ = 1;
  std::vector<std::vector<Entry>> buckets_;
  bool worth_it_ = false;
  mutable std::vector<Entry> gathered_;      // for queries spanning many buckets
};

// The merge of the touched buckets' lists: a few lists are merged by repeated minimum;
// many are gathered and sorted.
template <class Visit>
void OffsetBuckets::for_each_overlap(std::uint64_t lower, std::uint64_t upper,
                                     Visit&& visit) const {
  if (lower >= upper || buckets_.empty()) return;
  const std::size_t first = bucket_of(lower), last = bucket_of(upper - 1);
  const std::size_t count = last - first + 1;
  auto overlaps = [&](const Entry& e) { return e.lower < upper && lower < e.upper; };
  constexpr std::size_t kMergeMax = 8;  // beyond this, a sort is cheaper than the merge
  if (count > kMergeMax) {
    gathered_.clear();
    for (std::size_t b = first; b <= last; ++b)
      for (const Entry& e : buckets_[b])
        if (overlaps(e)) gathered_.push_back(e);
    std::sort(gathered_.begin(), gathered_.end(),
              [](const Entry& a, const Entry& b) { return a.offset < b.offset; });
    for (const Entry& e : gathered_) visit(e.offset, e.end);
    return;
  }
  std::size_t pos[kMergeMax] = {};
  while (true) {
    std::size_t best = count;
    std::uint64_t best_off = 0;
    for (std::size_t k = 0; k < count; ++k) {
      const auto& list = buckets_[first + k];
      if (pos[k] < list.size() && (best == count || list[pos[k]].offset < best_off)) {
        best = k;
        best_off = list[pos[k]].offset;
      }
    }
    if (best == count) return;
    const Entry& e = buckets_[first + best][pos[best]++];
    if (overlaps(e)) visit(e.offset, e.end);
  }
}

}  // namespace luma::core
