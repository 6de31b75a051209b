// canonical_search.h - the decision procedure of the exact planner: "do these buffers fit in
// `capacity` bytes?", answered by a depth-first search over canonical solutions (MiniMalloc,
// Moffitt, ASPLOS 2023), within limits on nodes, work and time.
//
// Canonical solutions: every packing can be pushed down until each buffer rests on a buffer
// below it (or on 0); listing its buffers by increasing (offset, rank) then places each one
// at its lowest offset - the highest top among the buffers placed before it that overlap it
// in time. So the search only ever places a buffer at that lowest offset, and only in
// increasing (offset, rank) order. On top of that:
//  - dominance: no buffer starts at or above the lowest top an unplaced buffer can reach
//    (that buffer would fit in the gap left below);
//  - section inference: time is cut into sections (the maximal sets of buffers live at one
//    time); the bytes still to place in a section are all live together and all go above
//    the last offset placed and above the lowest offset of the section's unplaced buffers,
//    so a section where that sum exceeds the capacity cannot be completed (monotonic and
//    unallocated floors). A placement is judged before it is made: most fail, and undoing
//    one costs as much as making it;
//  - dynamic decomposition: once no unplaced buffer spans the boundary between two
//    sections, each side is searched on its own, its buffers ranked afresh from the bytes
//    left in its sections; one side that cannot be packed fails the branch;
//  - hatless pruning: a buffer that no unplaced buffer overlaps constrains nothing, so when
//    the search fails after placing it, placing another buffer first cannot help.
// Ranks come from one of three static orders (MiniMalloc's WAT, TAW, TWA).
//
// It must never return a packing that does not fit (the planner checks every plan anyway)
// nor call anything infeasible that is not. Deterministic: the same input, capacity, order
// and limits give the same answer and offsets (unless the deadline cuts in). Per node it
// allocates only when the problem falls apart into pieces; its stacks grow amortised.
// Memory is linear in the buffers plus the overlapping pairs, which the constructor bounds.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "planner/lifetime.h"

namespace luma::core {

class CanonicalSearch {
 public:
  // The static orders ranks are taken from: keys compared in turn, all decreasing.
  // W = lifetime width, A = area (size x width), T = the most bytes left in a section the
  // buffer spans.
  enum class Order : std::uint8_t { wat, taw, twa };
  static constexpr int kOrderCount = 3;

  enum class Outcome {
    found,       // offsets() holds a packing within the capacity
    infeasible,  // proven: no packing within the capacity exists
    limit,       // the node budget or the deadline ran out first
  };

  // Prepares sections and overlaps. `max_pairs` bounds the overlapping pairs kept; with
  // more, usable() is false and solve() must not be called.
  CanonicalSearch(const std::vector<Lifetime>& lifetimes, std::size_t max_pairs);

  bool usable() const noexcept { return usable_; }

  // When a solve() gives up. Work counts the inner-loop steps (buffers and sections scanned,
  // overlaps followed): unlike nodes, whose cost varies tenfold between inputs, it tracks
  // the time spent, yet is the same on every machine.
  struct Limits {
    std::uint64_t nodes = ~std::uint64_t{0};
    std::uint64_t work = ~std::uint64_t{0};
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    // 0: ranks exactly by the order. Otherwise a seed: neighbours in the order swap places
    // now and then (the same seed, the same swaps), so restarts explore different trees.
    std::uint64_t shuffle = 0;
  };

  // Looks for a packing within `capacity` bytes, within the limits.
  Outcome solve(std::uint64_t capacity, Order order, const Limits& limits);

  // After Outcome::found: one offset per input lifetime (0 for buffers never live or empty).
  const std::vector<std::uint64_t>& offsets() const noexcept { return result_; }
  // Nodes visited and work done by every solve() so far.
  std::uint64_t nodes() const noexcept { return nodes_; }
  std::uint64_t work() const noexcept { return work_; }

 private:
  // Buffers no unplaced buffer outside it overlaps, over sections [first, last): it can be
  // packed on its own. Its buffers are lists_[base, base + count) (a stack of lists: parts
  // nest like the calls).
  struct Part {
    std::uint32_t base = 0, count = 0;
    std::uint32_t first = 0, last = 0;
  };
  // Areas (bytes x time) can exceed 64 bits; compared exactly.
  __extension__ using Wide = unsigned __int128;
  struct RankKey {
    std::uint64_t width, total;
    Wide area;
    std::uint32_t buffer;
  };
  enum class Result { fail, success, stop };

  void prepare(const std::vector<Lifetime>& lifetimes, std::size_t max_pairs);
  void rank_part(const Part& part);
  Result solve_pieces(const Part& part, const std::vector<std::uint32_t>& points);
  Result search(const Part& part, std::uint64_t last_offset, std::uint32_t last_rank);
  // A section as the current node sees it (see view_of).
  struct SectionView {
    std::uint64_t stamp = ~std::uint64_t{0};  // the node it describes
    // The two lowest offsets among its unplaced members, and whose the lowest is.
    std::uint64_t lowest = ~std::uint64_t{0}, second_lowest = ~std::uint64_t{0};
    std::uint32_t lowest_buffer = ~std::uint32_t{0}, second_lowest_buffer = ~std::uint32_t{0};
    // Over the "low" unplaced members (lowest offset <= capacity - bytes left): the first
    // section after one ends, the last section one starts in, and which buffers those are.
    std::uint32_t low_first_end = ~std::uint32_t{0}, low_last_start = 0;
    std::uint32_t low_first_end_buffer = 0, low_last_start_buffer = 0;
  };
  const SectionView& view_of(std::uint32_t section, std::uint64_t stamp);
  bool sections_can_finish(const Part& part, std::uint32_t c, std::uint64_t stamp);

  bool usable_ = false;

  // The problem, indexed by search buffer (only buffers live for some time with a size).
  std::vector<std::uint32_t> input_;          // search buffer -> input index
  std::vector<std::uint64_t> size_, align_, width_;
  std::vector<Wide> area_;
  std::vector<std::uint32_t> lo_, hi_;        // section range [lo, hi)
  std::vector<std::uint32_t> overlap_start_, overlap_;   // compressed rows
  std::vector<std::uint32_t> member_start_, member_;     // section -> its buffers
  std::vector<std::uint64_t> section_total_;             // bytes live in each section
  std::vector<std::uint64_t> section_align_;             // largest alignment in each section
  std::size_t sections_ = 0;

  // Search state, restored on the way back up.
  std::uint64_t capacity_ = 0;
  Order order_ = Order::wat;
  std::uint64_t shuffle_ = 0;
  std::vector<std::uint64_t> min_offset_, offset_, total_;
  std::vector<std::uint8_t> placed_;
  std::vector<std::uint32_t> rank_, cuts_;
  std::vector<SectionView> views_;
  std::vector<std::uint32_t> witness_;  // per section: a member that kept it feasible (a hint)
  std::vector<std::pair<std::uint32_t, std::uint64_t>> offset_undo_;
  std::vector<std::uint32_t> candidates_;  // a stack: each level's candidates on top
  std::vector<std::uint32_t> lists_;       // a stack of the parts' buffer lists
  std::vector<std::uint32_t> rank_undo_;   // ranks of enclosing parts, while a piece runs
  std::vector<RankKey> keys_;

  std::uint64_t nodes_ = 0, nodes_left_ = 0, work_ = 0, work_limit_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<std::uint64_t> result_;
};

}  // namespace luma::core
