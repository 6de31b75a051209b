// offset_buckets.cpp - see offset_buckets.h.
#include "planner/offset_buckets.h"

#include <algorithm>

#include "planner/planner_constants.h"

namespace luma::core {

OffsetBuckets::OffsetBuckets(const std::vector<Lifetime>& lifetimes) {
  std::vector<std::uint64_t> lengths;
  lengths.reserve(lifetimes.size());
  std::uint64_t lo = ~std::uint64_t{0}, hi = 0;
  for (const Lifetime& lt : lifetimes) {
    if (lt.lower >= lt.upper || lt.size == 0) continue;
    lengths.push_back(lt.upper - lt.lower);
    lo = std::min(lo, lt.lower);
    hi = std::max(hi, lt.upper);
  }
  if (lengths.empty()) return;
  auto mid = lengths.begin() + static_cast<std::ptrdiff_t>(lengths.size() / 2);
  std::nth_element(lengths.begin(), mid, lengths.end());
  origin_ = lo;
  width_ = std::max<std::uint64_t>(1, *mid);
  const std::uint64_t count = (hi - lo + width_ - 1) / width_;
  // Entries = sum over buffers of buckets touched; refuse when that (or the bucket table)
  // outgrows planner::kBucketEntriesPerBuffer per buffer.
  const std::uint64_t budget = planner::kBucketEntriesPerBuffer * lengths.size();
  if (count > budget) return;
  std::uint64_t entries = 0;
  for (const Lifetime& lt : lifetimes) {
    if (lt.lower >= lt.upper || lt.size == 0) continue;
    entries += bucket_of(lt.upper - 1) - bucket_of(lt.lower) + 1;
  }
  if (entries > budget) return;
  buckets_.resize(static_cast<std::size_t>(count));
  worth_it_ = true;
}

void OffsetBuckets::insert(const Lifetime& lt, std::uint64_t offset) {
  if (lt.lower >= lt.upper || lt.size == 0 || buckets_.empty()) return;
  const Entry e{offset, offset + lt.size, lt.lower, lt.upper};
  for (std::size_t b = bucket_of(lt.lower), last = bucket_of(lt.upper - 1); b <= last; ++b) {
    auto& list = buckets_[b];
    auto at = std::upper_bound(list.begin(), list.end(), offset,
                               [](std::uint64_t o, const Entry& x) { return o < x.offset; });
    list.insert(at, e);
  }
}

}  // namespace luma::core
