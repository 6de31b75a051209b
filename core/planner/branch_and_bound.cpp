// branch_and_bound.cpp - see branch_and_bound.h.
#include "planner/branch_and_bound.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "planner/placement.h"
#include "planner/planner_constants.h"

namespace luma::core {

namespace {

using Clock = std::chrono::steady_clock;

// The static orders the restarts cycle through (MiniMalloc's "WAT", "TAW", "TWA"): keys
// compared in turn, all decreasing. W = lifetime width, A = area (size x width),
// T = the largest total size live in any section the buffer spans.
enum Key : std::uint8_t { kWidth, kArea, kTotal };
constexpr Key kOrders[][3] = {{kWidth, kArea, kTotal}, {kTotal, kArea, kWidth},
                              {kTotal, kWidth, kArea}};
constexpr int kOrderCount = 3;

enum class Outcome { found, exhausted, limit };

class Solver {
 public:
  explicit Solver(const std::vector<Lifetime>& lt) : lt_(lt) {}

  // Sections, spans and the overlap lists; false when the overlap lists would be too big.
  bool prepare() {
    std::vector<std::uint64_t> cuts;
    for (std::size_t i = 0; i < lt_.size(); ++i)
      if (lt_[i].lower < lt_[i].upper && lt_[i].size > 0) {
        input_.push_back(static_cast<std::uint32_t>(i));
        cuts.push_back(lt_[i].lower);
        cuts.push_back(lt_[i].upper);
      }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    sections_ = cuts.empty() ? 0 : cuts.size() - 1;
    const std::size_t m = input_.size();
    lo_.resize(m);
    hi_.resize(m);
    size_.resize(m);
    align_.resize(m);
    members_.assign(sections_, {});
    for (std::size_t k = 0; k < m; ++k) {
      const Lifetime& l = lt_[input_[k]];
      lo_[k] = static_cast<std::uint32_t>(std::lower_bound(cuts.begin(), cuts.end(), l.lower) - cuts.begin());
      hi_[k] = static_cast<std::uint32_t>(std::lower_bound(cuts.begin(), cuts.end(), l.upper) - cuts.begin());
      size_[k] = l.size;
      align_[k] = l.alignment;
      for (std::uint32_t s = lo_[k]; s < hi_[k]; ++s) members_[s].push_back(static_cast<std::uint32_t>(k));
    }
    // Overlaps by a sweep over sections: two buffers overlap iff one's first section is
    // inside the other's span.
    overlaps_.assign(m, {});
    std::size_t pairs = 0;
    for (std::size_t s = 0; s < sections_; ++s)
      for (std::uint32_t a : members_[s]) {
        if (lo_[a] != s) continue;
        for (std::uint32_t b : members_[s]) {
          if (b == a || (lo_[b] == s && b < a)) continue;
          overlaps_[a].push_back(b);
          overlaps_[b].push_back(a);
          if (++pairs > planner::kBranchAndBoundMaxOverlaps) return false;
        }
      }
    total0_.assign(sections_, 0);
    for (std::size_t k = 0; k < m; ++k)
      for (std::uint32_t s = lo_[k]; s < hi_[k]; ++s) total0_[s] += size_[k];
    rank_.resize(m);
    scratch_.assign(m + 1, {});
    return true;
  }

  void set_order(int which) {
    const std::size_t m = input_.size();
    std::vector<std::uint64_t> width(m), total(m);
    std::vector<long double> area(m);
    for (std::size_t k = 0; k < m; ++k) {
      const Lifetime& l = lt_[input_[k]];
      width[k] = l.upper - l.lower;
      area[k] = static_cast<long double>(width[k]) * static_cast<long double>(size_[k]);
      for (std::uint32_t s = lo_[k]; s < hi_[k]; ++s) total[k] = std::max(total[k], total0_[s]);
    }
    std::vector<std::uint32_t> order(m);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      for (Key key : kOrders[which % kOrderCount]) {
        if (key == kWidth && width[a] != width[b]) return width[a] > width[b];
        if (key == kArea && area[a] != area[b]) return area[a] > area[b];
        if (key == kTotal && total[a] != total[b]) return total[a] > total[b];
      }
      return false;
    });
    for (std::size_t r = 0; r < m; ++r) rank_[order[r]] = static_cast<std::uint32_t>(r);
  }

  // Searches for a packing within `capacity`, within `node_budget` nodes (0: no limit)
  // and `deadline`.
  Outcome solve(std::uint64_t capacity, std::uint64_t node_budget, Clock::time_point deadline) {
    cap_ = capacity;
    budget_ = node_budget;
    deadline_ = deadline;
    limit_hit_ = false;
    found_ = false;
    const std::size_t m = input_.size();
    for (std::size_t k = 0; k < m; ++k)
      if (size_[k] > cap_) return Outcome::exhausted;
    for (std::size_t s = 0; s < sections_; ++s)
      if (total0_[s] > cap_) return Outcome::exhausted;
    min_off_.assign(m, 0);
    offset_.assign(m, 0);
    placed_.assign(m, 0);
    floor_.assign(sections_, 0);
    total_ = total0_;
    witness_.assign(sections_, 0);
    for (std::size_t sec = 0; sec < sections_; ++sec)
      if (!members_[sec].empty()) witness_[sec] = members_[sec].front();
    // cuts_[b]: unplaced buffers spanning the boundary between sections b and b + 1.
    cuts_.assign(sections_, 0);
    for (std::size_t k = 0; k < m; ++k)
      for (std::uint32_t b = lo_[k]; b + 1 < hi_[k]; ++b) ++cuts_[b];
    Part all;
    all.buffers.resize(m);
    std::iota(all.buffers.begin(), all.buffers.end(), 0u);
    all.first = 0;
    all.last = static_cast<std::uint32_t>(sections_);
    std::vector<std::uint32_t> points;  // the input may fall apart from the start
    for (std::uint32_t b = 0; b + 1 < sections_; ++b)
      if (cuts_[b] == 0) points.push_back(b + 1);
    if (solve_parts(all, points, 0) == Result::success) record(arena_of_offsets());
    if (found_) return Outcome::found;  // the caller reads best_offsets()
    return limit_hit_ ? Outcome::limit : Outcome::exhausted;
  }

  bool limit_hit() const { return limit_hit_; }
  std::uint64_t best_arena() const { return best_arena_; }
  std::uint64_t nodes() const { return nodes_; }
  // The best packing found by any solve() so far, as input-indexed offsets.
  const std::vector<std::uint64_t>& best_offsets() const { return best_; }

 private:
  // A set of buffers that no unplaced buffer outside it overlaps, over sections
  // [first, last): it can be packed on its own.
  struct Part {
    std::vector<std::uint32_t> buffers;
    std::uint32_t first = 0, last = 0;
  };
  enum class Result { fail, success, stop };

  // After cuts at `points` (sorted, inside the part) fell to zero: the
  // pieces are independent, so each is searched on its own, and one that cannot be packed
  // fails the whole branch without retrying the others (dynamic decomposition).
  Result solve_parts(const Part& part, const std::vector<std::uint32_t>& points, std::size_t depth) {
    if (points.empty()) return dfs(part, 0, 0, depth);
    std::uint32_t from = part.first;
    for (std::size_t k = 0; k <= points.size(); ++k) {
      Part piece;
      piece.first = from;
      piece.last = k < points.size() ? points[k] : part.last;
      from = piece.last;
      for (std::uint32_t b : part.buffers)
        if (!placed_[b] && lo_[b] < piece.last && hi_[b] > piece.first) piece.buffers.push_back(b);
      if (piece.buffers.empty()) continue;
      Result r = dfs(piece, 0, 0, depth);
      if (r != Result::success) return r;
    }
    return Result::success;
  }

  Result dfs(const Part& part, std::uint64_t last_off, std::uint32_t last_rank, std::size_t depth) {
    ++nodes_;
    if (budget_ != 0 && --budget_ == 0) return stop_for_limit();
    if ((nodes_ & 255) == 0 && Clock::now() >= deadline_) return stop_for_limit();
    // The lowest top any unplaced buffer can reach: nothing may start at or above it.
    std::uint64_t min_height = ~std::uint64_t{0};
    for (std::uint32_t k : part.buffers)
      if (!placed_[k]) min_height = std::min(min_height, min_off_[k] + size_[k]);
    if (min_height == ~std::uint64_t{0}) {  // all placed
      return Result::success;
    }
    // depth <= placed buffers <= m: scratch_ (m + 1 lists) is never resized, as the
    // callers up the stack hold references into it.
    std::vector<std::uint32_t>& cand = scratch_[depth];
    cand.clear();
    for (std::uint32_t k : part.buffers) {
      if (placed_[k] || min_off_[k] >= min_height) continue;
      if (min_off_[k] < last_off || (min_off_[k] == last_off && rank_[k] < last_rank)) continue;
      cand.push_back(k);
    }
    std::sort(cand.begin(), cand.end(), [&](std::uint32_t a, std::uint32_t b) {
      return min_off_[a] != min_off_[b] ? min_off_[a] < min_off_[b] : rank_[a] < rank_[b];
    });
    for (std::size_t ci = 0; ci < cand.size(); ++ci) {
      const std::uint32_t c = cand[ci];
      const std::uint64_t off = min_off_[c];
      const std::uint64_t height = off + size_[c];
      if (height > cap_ || !quick_check(part, c, off, height)) continue;
      const std::size_t off_mark = off_undo_.size(), floor_mark = floor_undo_.size();
      placed_[c] = 1;
      offset_[c] = off;
      for (std::uint32_t s = lo_[c]; s < hi_[c]; ++s) {
        floor_undo_.push_back({s, floor_[s]});
        floor_[s] = height;
        total_[s] -= size_[c];
      }
      bool hatless = true;  // no unplaced buffer overlaps c: nothing can ever sit on it
      for (std::uint32_t j : overlaps_[c]) {
        if (placed_[j]) continue;
        hatless = false;
        if (min_off_[j] >= height) continue;
        off_undo_.push_back({j, min_off_[j]});
        min_off_[j] = align_up(height, align_[j]);
      }
      Result r = Result::fail;
      if (feasible(part, off)) {
        std::vector<std::uint32_t> points;
        for (std::uint32_t b = lo_[c]; b + 1 < hi_[c]; ++b)
          if (--cuts_[b] == 0 && b + 1 > part.first && b + 1 < part.last) points.push_back(b + 1);
        r = points.empty() ? dfs(part, off, rank_[c], depth + 1)
                           : solve_parts(part, points, depth + 1);
        for (std::uint32_t b = lo_[c]; b + 1 < hi_[c]; ++b) ++cuts_[b];
      }
      while (floor_undo_.size() > floor_mark) {
        floor_[floor_undo_.back().first] = floor_undo_.back().second;
        floor_undo_.pop_back();
      }
      while (off_undo_.size() > off_mark) {
        min_off_[off_undo_.back().first] = off_undo_.back().second;
        off_undo_.pop_back();
      }
      for (std::uint32_t s = lo_[c]; s < hi_[c]; ++s) total_[s] += size_[c];
      placed_[c] = 0;
      if (r != Result::fail) return r;
      // Hatless pruning: c constrains no unplaced buffer, so the rest failed without any
      // help from it; placing another buffer first cannot make it succeed.
      if (hatless) break;
    }
    return Result::fail;
  }

  // The cheap part of feasible() for placing c at off, before any state is changed: most
  // candidates that fail, fail here.
  bool quick_check(const Part& part, std::uint32_t c, std::uint64_t off, std::uint64_t height) const {
    for (std::size_t s = part.first; s < lo_[c]; ++s)
      if (std::max(off, floor_[s]) + total_[s] > cap_) return false;
    for (std::size_t s = lo_[c]; s < hi_[c]; ++s)
      if (height + total_[s] - size_[c] > cap_) return false;
    for (std::size_t s = hi_[c]; s < part.last; ++s)
      if (std::max(off, floor_[s]) + total_[s] > cap_) return false;
    return true;
  }

  // Section inference: every later buffer goes at or above `off` (canonical order), above
  // the tops already placed in its sections, and at or above its own lowest offset; the
  // bytes left in a section are all live at once. So a section whose unplaced buffers all
  // have their lowest offset above capacity - bytes left cannot be completed. That lowest
  // offset is looked for lazily: one low enough member ends the scan.
  bool feasible(const Part& part, std::uint64_t off) const {
    for (std::size_t s = part.first; s < part.last; ++s) {
      if (total_[s] == 0) continue;
      if (total_[s] > cap_) return false;
      const std::uint64_t room = cap_ - total_[s];  // the highest floor that still fits
      if (std::max(off, floor_[s]) > room) return false;
      // The member found last time usually still qualifies: a hint, never undone.
      std::uint32_t w = witness_[s];
      if (placed_[w] || min_off_[w] > room) {
        bool any = false;
        for (std::uint32_t k : members_[s])
          if (!placed_[k] && min_off_[k] <= room) {
            witness_[s] = k;
            any = true;
            break;
          }
        if (!any) return false;
      }
    }
    return true;
  }

  // offset_ holds the packing when the search succeeds: every buffer's
  // last placement is the one on the successful path.
  std::uint64_t arena_of_offsets() const {
    std::uint64_t top = 0;
    for (std::size_t k = 0; k < input_.size(); ++k) top = std::max(top, offset_[k] + size_[k]);
    return top;
  }

  void record(std::uint64_t top) {
    if (best_.empty() || top < best_arena_) {
      best_arena_ = top;
      best_.assign(lt_.size(), 0);
      for (std::size_t k = 0; k < input_.size(); ++k) best_[input_[k]] = offset_[k];
    }
    found_ = true;
  }

  Result stop_for_limit() {
    limit_hit_ = true;
    return Result::stop;
  }

  const std::vector<Lifetime>& lt_;
  std::vector<std::uint32_t> input_;  // solver index -> input index
  std::size_t sections_ = 0;
  std::vector<std::uint32_t> lo_, hi_, rank_;
  std::vector<std::uint64_t> size_, align_, total0_;
  std::vector<std::vector<std::uint32_t>> members_, overlaps_, scratch_;
  // Search state.
  std::vector<std::uint64_t> min_off_, offset_, floor_, total_;
  std::vector<std::uint8_t> placed_;
  std::vector<std::uint32_t> cuts_;
  mutable std::vector<std::uint32_t> witness_;  // per section: a member that kept it feasible
  std::vector<std::pair<std::uint32_t, std::uint64_t>> off_undo_, floor_undo_;
  std::uint64_t cap_ = 0, budget_ = 0, nodes_ = 0;
  bool limit_hit_ = false, found_ = false;
  Clock::time_point deadline_;
  // Best packing found.
  std::vector<std::uint64_t> best_;
  std::uint64_t best_arena_ = 0;
};

}  // namespace

BranchAndBoundResult branch_and_bound(const std::vector<Lifetime>& lifetimes,
                                      std::uint64_t lower_bound, std::uint64_t start_arena,
                                      double time_limit_seconds, std::uint64_t max_nodes) {
  BranchAndBoundResult result;
  Solver solver(lifetimes);
  if (!solver.prepare()) return result;
  result.ran = true;
  if (start_arena <= lower_bound) return result;
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(time_limit_seconds));
  std::uint64_t nodes_left = max_nodes;  // 0: unbounded
  auto out_of_time = [&] { return Clock::now() >= end || (max_nodes != 0 && nodes_left == 0); };
  auto spend = [&](std::uint64_t budget) {
    if (max_nodes == 0) return budget;
    budget = std::min(budget, nodes_left);
    nodes_left -= budget;
    return budget;
  };
  std::uint64_t best = start_arena;
  auto take = [&] {
    if (solver.best_arena() >= best) return;
    best = solver.best_arena();
    Plan plan;
    plan.strategy = "branch-and-bound";
    plan.offsets = solver.best_offsets();
    plan.arena = arena_of(lifetimes, plan.offsets);
    result.plan = std::move(plan);
  };
  // Restarts: each static order with a node budget that doubles every round, so one bad
  // early choice costs little (MiniMalloc's round robin).
  const std::uint64_t first_budget = std::max<std::uint64_t>(2 * lifetimes.size(), 64);
  // Is there a packing within `capacity`? Restarts over the orders until `until`.
  auto decide = [&](std::uint64_t capacity, Clock::time_point until) -> Outcome {
    for (std::uint64_t budget = first_budget;; budget *= 2)
      for (int order = 0; order < kOrderCount; ++order) {
        if (Clock::now() >= until || out_of_time()) return Outcome::limit;
        solver.set_order(order);
        Outcome o = solver.solve(capacity, spend(budget), until);
        if (o != Outcome::limit) return o;
      }
  };
  // Phase 1: a packing at the lower bound, with part of the time (these inputs often pack
  // perfectly).
  const auto phase1_end = t0 + std::chrono::duration_cast<Clock::duration>(
                                   (end - t0) * planner::kBranchAndBoundDecisionShare);
  // With a node budget the same share of it goes to the first phase.
  const std::uint64_t phase2_nodes =
      max_nodes - static_cast<std::uint64_t>(static_cast<double>(max_nodes) *
                                             planner::kBranchAndBoundDecisionShare);
  nodes_left = max_nodes - phase2_nodes;
  Outcome at_lb = decide(lower_bound, phase1_end);
  nodes_left = phase2_nodes;
  if (at_lb == Outcome::found) {
    take();
    result.proven_optimal = true;
    result.nodes = solver.nodes();
    return result;
  }
  // Phase 2: bisect between the largest capacity known to fail and the best arena; each
  // question gets a share of the time left so one hard capacity cannot eat it all.
  std::uint64_t lo = lower_bound + 1, hi = best;  // answer in [lo, hi]; hi is feasible
  bool lo_proven = at_lb == Outcome::exhausted;
  while (lo < hi && !out_of_time()) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    const auto now = Clock::now();
    Outcome o = decide(mid, now + std::chrono::duration_cast<Clock::duration>(
                                       (end - now) * planner::kBranchAndBoundBisectShare));
    if (o == Outcome::found) {
      take();
      hi = best;
    } else {
      if (o == Outcome::limit) lo_proven = false;
      lo = mid + 1;
    }
  }
  result.proven_optimal = result.plan.has_value() && lo_proven && lo >= hi;
  result.nodes = solver.nodes();
  return result;
}

}  // namespace luma::core
