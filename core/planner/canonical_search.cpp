// canonical_search.cpp - see canonical_search.h.
#include "planner/canonical_search.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "planner/placement.h"

namespace luma::core {

namespace {

// How often the search looks at the clock: reading it costs more than a node.
constexpr std::uint64_t kClockEveryNodes = 1024;

// A shuffled order swaps a buffer with the next one about once in this many.
constexpr std::uint64_t kSwapOneIn = 4;

// splitmix64's finaliser: a well-mixed hash of a 64-bit value.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

}  // namespace

CanonicalSearch::CanonicalSearch(const std::vector<Lifetime>& lifetimes, std::size_t max_pairs) {
  prepare(lifetimes, max_pairs);
}

// Sections are the maximal sets of buffers live at one time (MiniMalloc's sweep): a sweep
// over the boundaries, ends before starts at equal times (half-open lifetimes), closes a
// section at an end whenever a buffer started since the last one was closed. Two buffers
// overlap in time exactly when their section ranges meet, and every (buffer, section) pair
// beyond a buffer's first section is charged to a distinct overlapping pair, so the tables
// stay linear in the input plus the overlapping pairs.
void CanonicalSearch::prepare(const std::vector<Lifetime>& lifetimes, std::size_t max_pairs) {
  if (lifetimes.size() > std::numeric_limits<std::uint32_t>::max()) return;  // not usable
  for (std::size_t i = 0; i < lifetimes.size(); ++i)
    if (lifetimes[i].lower < lifetimes[i].upper && lifetimes[i].size > 0)
      input_.push_back(static_cast<std::uint32_t>(i));
  const std::size_t m = input_.size();
  result_.assign(lifetimes.size(), 0);
  size_.resize(m);
  align_.resize(m);
  width_.resize(m);
  area_.resize(m);
  lo_.resize(m);
  hi_.resize(m);
  struct Boundary {
    std::uint64_t time;
    std::uint32_t is_start;  // 0: end, 1: start - ends sort first
    std::uint32_t buffer;
  };
  std::vector<Boundary> boundaries;
  boundaries.reserve(2 * m);
  for (std::uint32_t k = 0; k < m; ++k) {
    const Lifetime& lt = lifetimes[input_[k]];
    size_[k] = lt.size;
    align_[k] = lt.alignment == 0 ? 1 : lt.alignment;
    width_[k] = lt.upper - lt.lower;
    area_[k] = static_cast<Wide>(width_[k]) * lt.size;
    boundaries.push_back({lt.lower, 1, k});
    boundaries.push_back({lt.upper, 0, k});
  }
  std::sort(boundaries.begin(), boundaries.end(), [](const Boundary& a, const Boundary& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.is_start != b.is_start) return a.is_start < b.is_start;
    return a.buffer < b.buffer;
  });
  std::uint32_t closed = 0;
  bool started = false;
  for (const Boundary& b : boundaries) {
    if (b.is_start) {
      lo_[b.buffer] = closed;
      started = true;
    } else {
      if (started) {
        ++closed;
        started = false;
      }
      hi_[b.buffer] = closed;
    }
  }
  sections_ = closed;
  // (buffer, section) pairs number at most m + overlapping pairs (see above): more means
  // more pairs than allowed, found before the tables are built.
  std::size_t incidences = 0;
  for (std::uint32_t k = 0; k < m; ++k) incidences += hi_[k] - lo_[k];
  if (incidences > m + max_pairs) return;  // too big: usable_ stays false
  // Members of each section, as compressed rows.
  member_start_.assign(sections_ + 1, 0);
  for (std::uint32_t k = 0; k < m; ++k)
    for (std::uint32_t s = lo_[k]; s < hi_[k]; ++s) ++member_start_[s + 1];
  std::partial_sum(member_start_.begin(), member_start_.end(), member_start_.begin());
  member_.resize(member_start_.back());
  {
    std::vector<std::uint32_t> fill(member_start_.begin(), member_start_.end() - 1);
    for (std::uint32_t k = 0; k < m; ++k)
      for (std::uint32_t s = lo_[k]; s < hi_[k]; ++s) member_[fill[s]++] = k;
  }
  section_total_.assign(sections_, 0);
  section_align_.assign(sections_, 1);
  for (std::uint32_t k = 0; k < m; ++k)
    for (std::uint32_t s = lo_[k]; s < hi_[k]; ++s) {
      section_total_[s] += size_[k];
      section_align_[s] = std::max(section_align_[s], align_[k]);
    }
  // Overlapping pairs: each is met in the section where the later-starting one begins.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
  for (std::uint32_t s = 0; s < sections_; ++s)
    for (std::uint32_t i = member_start_[s]; i < member_start_[s + 1]; ++i) {
      const std::uint32_t a = member_[i];
      if (lo_[a] != s) continue;
      for (std::uint32_t j = member_start_[s]; j < member_start_[s + 1]; ++j) {
        const std::uint32_t b = member_[j];
        if (b == a || (lo_[b] == s && b < a)) continue;
        if (pairs.size() >= max_pairs) return;  // too big: usable_ stays false
        pairs.emplace_back(a, b);
      }
    }
  overlap_start_.assign(m + 1, 0);
  for (const auto& [a, b] : pairs) {
    ++overlap_start_[a + 1];
    ++overlap_start_[b + 1];
  }
  std::partial_sum(overlap_start_.begin(), overlap_start_.end(), overlap_start_.begin());
  overlap_.resize(overlap_start_.back());
  {
    std::vector<std::uint32_t> fill(overlap_start_.begin(), overlap_start_.end() - 1);
    for (const auto& [a, b] : pairs) {
      overlap_[fill[a]++] = b;
      overlap_[fill[b]++] = a;
    }
  }
  min_offset_.assign(m, 0);
  offset_.assign(m, 0);
  placed_.assign(m, 0);
  rank_.assign(m, 0);
  total_.assign(sections_, 0);
  cuts_.assign(sections_, 0);
  views_.assign(sections_, SectionView{});
  witness_.assign(sections_, 0);
  usable_ = true;
}

CanonicalSearch::Outcome CanonicalSearch::solve(std::uint64_t capacity, Order order,
                                                const Limits& limits) {
  capacity_ = capacity;
  order_ = order;
  shuffle_ = limits.shuffle;
  nodes_left_ = limits.nodes;
  work_limit_ = limits.work > ~work_ ? ~std::uint64_t{0} : work_ + limits.work;
  deadline_ = limits.deadline;
  const std::size_t m = input_.size();
  for (std::size_t k = 0; k < m; ++k)
    if (size_[k] > capacity) return Outcome::infeasible;
  for (std::size_t s = 0; s < sections_; ++s)
    if (section_total_[s] > capacity) return Outcome::infeasible;
  std::fill(min_offset_.begin(), min_offset_.end(), 0);
  std::fill(placed_.begin(), placed_.end(), 0);
  total_ = section_total_;
  std::fill(cuts_.begin(), cuts_.end(), 0);
  for (std::size_t k = 0; k < m; ++k)
    for (std::uint32_t b = lo_[k]; b + 1 < hi_[k]; ++b) ++cuts_[b];
  for (std::size_t s = 0; s < sections_; ++s) witness_[s] = member_[member_start_[s]];
  offset_undo_.clear();
  candidates_.clear();
  rank_undo_.clear();
  lists_.resize(m);
  std::iota(lists_.begin(), lists_.end(), 0u);
  const Part all{0, static_cast<std::uint32_t>(m), 0, static_cast<std::uint32_t>(sections_)};
  std::vector<std::uint32_t> points;  // the input may fall apart from the start
  for (std::uint32_t b = 0; b + 1 < sections_; ++b)
    if (cuts_[b] == 0) points.push_back(b + 1);
  const Result r = solve_pieces(all, points);
  if (r == Result::stop) return Outcome::limit;
  if (r == Result::fail) return Outcome::infeasible;
  std::fill(result_.begin(), result_.end(), 0);
  for (std::size_t k = 0; k < m; ++k) result_[input_[k]] = offset_[k];
  return Outcome::found;
}

// Ranks the buffers of a part 0, 1, ... by the static order, T taken from the bytes still to
// place in each section (MiniMalloc re-ranks every sub-problem the same way; with ranks fixed
// once for the whole input, E of the benchmark set is not solved in 10^7 nodes, and with
// them it is in about 10^5).
void CanonicalSearch::rank_part(const Part& part) {
  keys_.clear();
  for (std::uint32_t i = 0; i < part.count; ++i) {
    const std::uint32_t k = lists_[part.base + i];
    std::uint64_t t = 0;
    for (std::uint32_t s = lo_[k]; s < hi_[k]; ++s) t = std::max(t, total_[s]);
    keys_.push_back({width_[k], t, area_[k], k});
  }
  work_ += part.count;
  auto cmp = [](auto a, auto b) { return a == b ? 0 : (a > b ? 1 : -1); };  // decreasing
  const Order order = order_;
  std::sort(keys_.begin(), keys_.end(), [&](const RankKey& a, const RankKey& b) {
    int c = 0;
    switch (order) {
      case Order::wat:
        if ((c = cmp(a.width, b.width)) == 0 && (c = cmp(a.area, b.area)) == 0)
          c = cmp(a.total, b.total);
        break;
      case Order::taw:
        if ((c = cmp(a.total, b.total)) == 0 && (c = cmp(a.area, b.area)) == 0)
          c = cmp(a.width, b.width);
        break;
      case Order::twa:
        if ((c = cmp(a.total, b.total)) == 0 && (c = cmp(a.width, b.width)) == 0)
          c = cmp(a.area, b.area);
        break;
    }
    return c != 0 ? c > 0 : a.buffer < b.buffer;  // ties: input order
  });
  if (shuffle_ != 0)
    for (std::size_t r = 0; r + 1 < keys_.size(); ++r)
      if (mix(shuffle_ ^ (std::uint64_t{keys_[r].buffer} << 32 | keys_[r + 1].buffer)) % kSwapOneIn == 0)
        std::swap(keys_[r], keys_[r + 1]);
  for (std::size_t r = 0; r < keys_.size(); ++r)
    rank_[keys_[r].buffer] = static_cast<std::uint32_t>(r);
}

// The unplaced buffers of `part` split at `points` (section indices no unplaced buffer
// spans, sorted): each piece is ranked and searched on its own; one piece that fails (or a
// stop) ends it, as the pieces are independent.
CanonicalSearch::Result CanonicalSearch::solve_pieces(const Part& part,
                                                      const std::vector<std::uint32_t>& points) {
  const std::size_t n = points.size() + 1;
  auto piece_of = [&](std::uint32_t k) {
    return static_cast<std::size_t>(std::upper_bound(points.begin(), points.end(), lo_[k]) -
                                    points.begin());
  };
  // The pieces' lists, one after the other on top of the list stack (a counting sort).
  const std::size_t base = lists_.size();
  std::vector<std::uint32_t> start(n + 1, 0);
  for (std::uint32_t i = 0; i < part.count; ++i) {
    const std::uint32_t k = lists_[part.base + i];
    if (!placed_[k]) ++start[piece_of(k) + 1];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  lists_.resize(base + start[n]);
  {
    std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
    for (std::uint32_t i = 0; i < part.count; ++i) {
      const std::uint32_t k = lists_[part.base + i];
      if (!placed_[k]) lists_[base + fill[piece_of(k)]++] = k;
    }
  }
  work_ += part.count;
  Result result = Result::success;
  for (std::size_t i = 0; i < n && result == Result::success; ++i) {
    const Part piece{static_cast<std::uint32_t>(base + start[i]), start[i + 1] - start[i],
                     i == 0 ? part.first : points[i - 1], i + 1 < n ? points[i] : part.last};
    if (piece.count == 0) continue;
    // The ranks of the enclosing part are needed again when this branch is undone.
    const std::size_t saved = rank_undo_.size();
    for (std::uint32_t j = 0; j < piece.count; ++j) rank_undo_.push_back(rank_[lists_[piece.base + j]]);
    rank_part(piece);
    result = search(piece, 0, 0);
    for (std::uint32_t j = 0; j < piece.count; ++j) rank_[lists_[piece.base + j]] = rank_undo_[saved + j];
    rank_undo_.resize(saved);
  }
  lists_.resize(base);
  return result;
}

// What the section inference needs to know about a section in the current node's state,
// gathered once per node (a node tries many placements against the same state).
const CanonicalSearch::SectionView& CanonicalSearch::view_of(std::uint32_t s, std::uint64_t stamp) {
  SectionView& v = views_[s];
  if (v.stamp == stamp) return v;
  v = SectionView{};
  v.stamp = stamp;
  const std::uint64_t room = capacity_ - total_[s];
  work_ += member_start_[s + 1] - member_start_[s];
  for (std::uint32_t i = member_start_[s]; i < member_start_[s + 1]; ++i) {
    const std::uint32_t k = member_[i];
    if (placed_[k]) continue;
    const std::uint64_t m = min_offset_[k];
    if (m < v.lowest) {
      v.second_lowest = v.lowest;
      v.second_lowest_buffer = v.lowest_buffer;
      v.lowest = m;
      v.lowest_buffer = k;
    } else if (m < v.second_lowest) {
      v.second_lowest = m;
      v.second_lowest_buffer = k;
    }
    if (m <= room) {
      if (hi_[k] < v.low_first_end) {
        v.low_first_end = hi_[k];
        v.low_first_end_buffer = k;
      }
      if (lo_[k] >= v.low_last_start) {
        v.low_last_start = lo_[k];
        v.low_last_start_buffer = k;
      }
    }
  }
  return v;
}

// Section inference for placing `c` at its lowest offset, judged before anything changes
// (most placements fail here, and undoing one costs as much as making it): afterwards every
// section must still have an unplaced member whose lowest offset leaves room for the bytes
// left there (the unallocated floor). Placing c raises the buffers it overlaps to its top,
// so only the sections of c and of the buffers that rise can change. Every node keeps all
// its sections feasible, so a section is lost only if each member low enough rises above
// the room.
bool CanonicalSearch::sections_can_finish(const Part& part, std::uint32_t c, std::uint64_t stamp) {
  const std::uint64_t height = min_offset_[c] + size_[c];
  const std::uint32_t c_lo = lo_[c], c_hi = hi_[c];
  std::uint32_t first = c_lo, last = c_hi;
  work_ += overlap_start_[c + 1] - overlap_start_[c];
  for (std::uint32_t e = overlap_start_[c]; e < overlap_start_[c + 1]; ++e) {
    const std::uint32_t j = overlap_[e];
    if (placed_[j] || min_offset_[j] >= height) continue;
    first = std::min(first, lo_[j]);
    last = std::max(last, hi_[j]);
  }
  first = std::max(first, part.first);
  last = std::min(last, part.last);
  work_ += last - first;
  // Where member k's lowest offset will be once c is placed.
  auto lowest_after = [&](std::uint32_t k) {
    const bool overlaps_c = lo_[k] < c_hi && c_lo < hi_[k];
    return overlaps_c ? std::max(min_offset_[k], align_up(height, align_[k])) : min_offset_[k];
  };
  // The exact test, for when alignment leaves the summary undecided.
  auto any_member_fits = [&](std::uint32_t s, std::uint64_t room) {
    work_ += member_start_[s + 1] - member_start_[s];
    for (std::uint32_t i = member_start_[s]; i < member_start_[s + 1]; ++i) {
      const std::uint32_t k = member_[i];
      if (k != c && !placed_[k] && lowest_after(k) <= room) {
        witness_[s] = k;
        return true;
      }
    }
    return false;
  };
  for (std::uint32_t s = first; s < last; ++s) {
    if (total_[s] == 0) continue;
    const bool in_c = s >= c_lo && s < c_hi;
    if (in_c && total_[s] == size_[c]) continue;  // nothing else left there
    const std::uint64_t room = capacity_ - total_[s] + (in_c ? size_[c] : 0);
    // The member that kept the section feasible last time usually still does: a hint.
    const std::uint32_t w = witness_[s];
    if (w != c && !placed_[w] && lowest_after(w) <= room) continue;
    const SectionView& v = view_of(s, stamp);
    if (in_c) {
      // Every other member overlaps c and rises to at least its top, which fits: the
      // caller checked off + bytes left <= capacity.
      const bool c_lowest = v.lowest_buffer == c;
      if ((c_lowest ? v.second_lowest : v.lowest) > room) return false;
      if (align_up(height, section_align_[s]) <= room) {
        witness_[s] = c_lowest ? v.second_lowest_buffer : v.lowest_buffer;
        continue;
      }
    } else {
      // A member low enough that does not overlap c stays where it is.
      if (v.low_first_end <= c_lo) {
        witness_[s] = v.low_first_end_buffer;
        continue;
      }
      if (v.low_last_start >= c_hi) {
        witness_[s] = v.low_last_start_buffer;
        continue;
      }
      // All the members low enough overlap c and rise to its top.
      if (height > room) return false;
      if (align_up(height, section_align_[s]) <= room) {
        witness_[s] = v.low_first_end_buffer;
        continue;
      }
    }
    if (!any_member_fits(s, room)) return false;
  }
  return true;
}

CanonicalSearch::Result CanonicalSearch::search(const Part& part, std::uint64_t last_offset,
                                                std::uint32_t last_rank) {
  ++nodes_;
  if (nodes_left_ == 0 || work_ >= work_limit_) return Result::stop;
  --nodes_left_;
  if (nodes_ % kClockEveryNodes == 0 && std::chrono::steady_clock::now() >= deadline_)
    return Result::stop;
  const std::uint64_t stamp = nodes_;  // names this node's state for the section views
  // This node's unplaced buffers, for its children to scan instead of the whole part.
  const std::uint32_t base = static_cast<std::uint32_t>(lists_.size());
  std::uint64_t min_height = ~std::uint64_t{0};  // the lowest top an unplaced buffer can reach
  for (std::uint32_t i = 0; i < part.count; ++i) {
    const std::uint32_t k = lists_[part.base + i];
    if (placed_[k]) continue;
    lists_.push_back(k);
    min_height = std::min(min_height, min_offset_[k] + size_[k]);
  }
  const Part live{base, static_cast<std::uint32_t>(lists_.size() - base), part.first, part.last};
  work_ += part.count + (part.last - part.first);
  if (live.count == 0) {
    lists_.resize(base);
    return Result::success;
  }
  // Every buffer placed from here starts at or above the offset chosen now, and each
  // section's bytes left go above that: the offset may be at most capacity - the most bytes
  // left anywhere. (In the sections of the buffer placed, floor = its top and bytes left =
  // total - its size: the same sum.) This one bound is the monotonic floor for every section.
  std::uint64_t most_left = 0;
  for (std::uint32_t s = part.first; s < part.last; ++s) most_left = std::max(most_left, total_[s]);
  const std::uint64_t highest = capacity_ - most_left;
  const std::size_t cand_base = candidates_.size();
  for (std::uint32_t i = 0; i < live.count; ++i) {
    const std::uint32_t k = lists_[live.base + i];
    const std::uint64_t off = min_offset_[k];
    // Dominance: at or above min_height it would leave a gap some buffer could fill.
    if (off >= min_height || off > highest) continue;
    if (off < last_offset || (off == last_offset && rank_[k] < last_rank)) continue;  // canonical
    candidates_.push_back(k);
  }
  std::sort(candidates_.begin() + static_cast<std::ptrdiff_t>(cand_base), candidates_.end(),
            [&](std::uint32_t a, std::uint32_t b) {
              return min_offset_[a] != min_offset_[b] ? min_offset_[a] < min_offset_[b]
                                                      : rank_[a] < rank_[b];
            });
  const std::size_t cand_end = candidates_.size();
  Result result = Result::fail;
  std::vector<std::uint32_t> points;
  for (std::size_t i = cand_base; i < cand_end; ++i) {
    const std::uint32_t c = candidates_[i];
    const std::uint64_t off = min_offset_[c];
    const std::uint64_t height = off + size_[c];
    // A buffer nothing unplaced overlaps always passes (nothing rises, and its sections
    // hold no other unplaced buffer), so one that fails here is never hatless.
    if (!sections_can_finish(live, c, stamp)) continue;
    placed_[c] = 1;
    offset_[c] = off;
    for (std::uint32_t s = lo_[c]; s < hi_[c]; ++s) total_[s] -= size_[c];
    const std::size_t undo_mark = offset_undo_.size();
    bool hatless = true;  // no unplaced buffer overlaps c: nothing can ever sit on it
    work_ += overlap_start_[c + 1] - overlap_start_[c] + (hi_[c] - lo_[c]);
    for (std::uint32_t e = overlap_start_[c]; e < overlap_start_[c + 1]; ++e) {
      const std::uint32_t j = overlap_[e];
      if (placed_[j]) continue;
      hatless = false;
      if (min_offset_[j] >= height) continue;
      offset_undo_.emplace_back(j, min_offset_[j]);
      min_offset_[j] = align_up(height, align_[j]);
    }
    // Dynamic decomposition: boundaries no unplaced buffer spans any more split the part.
    points.clear();
    for (std::uint32_t b = lo_[c]; b + 1 < hi_[c]; ++b)
      if (--cuts_[b] == 0 && b + 1 > part.first && b + 1 < part.last) points.push_back(b + 1);
    const Result r = points.empty() ? search(live, off, rank_[c]) : solve_pieces(live, points);
    for (std::uint32_t b = lo_[c]; b + 1 < hi_[c]; ++b) ++cuts_[b];
    while (offset_undo_.size() > undo_mark) {
      min_offset_[offset_undo_.back().first] = offset_undo_.back().second;
      offset_undo_.pop_back();
    }
    for (std::uint32_t s = lo_[c]; s < hi_[c]; ++s) total_[s] += size_[c];
    placed_[c] = 0;
    if (r != Result::fail) {
      result = r;
      break;
    }
    // Hatless pruning: c constrains no unplaced buffer, so the rest failed without any help
    // from it; placing another buffer first cannot make it succeed.
    if (hatless) break;
  }
  candidates_.resize(cand_base);
  lists_.resize(base);
  return result;
}

}  // namespace luma::core
