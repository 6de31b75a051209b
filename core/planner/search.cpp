// search.cpp - see search.h.
#include "planner/search.h"

#include <algorithm>
#include <chrono>

#include "planner/greedy.h"
#include "planner/overlap_index.h"
#include "planner/placement.h"
#include "planner/planner_constants.h"

namespace luma::core {

namespace {

// Small, fast and identical on every platform (std distributions are not).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed ^ 0x9e3779b97f4a7c15ull) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0.
  std::size_t below(std::size_t n) {
    // The modulo bias is below n / 2^64: irrelevant for a search heuristic.
    return static_cast<std::size_t>(next() % n);
  }

 private:
  std::uint64_t s_;
};

// The overlap graph as compressed rows; the search decodes thousands of orders, so the
// neighbours are found once.
struct Graph {
  std::vector<std::uint32_t> start, nbr;
};

// Too many edges would cost more memory than the input deserves; the search is skipped.
constexpr std::size_t kMaxEdges = std::size_t{1} << 24;

bool build_graph(const std::vector<Lifetime>& lifetimes, Graph& g) {
  OverlapIndex index(lifetimes);
  for (std::size_t i = 0; i < lifetimes.size(); ++i) index.insert(i);
  g.start.assign(lifetimes.size() + 1, 0);
  std::vector<std::uint32_t> hits;
  for (std::size_t i = 0; i < lifetimes.size(); ++i) {
    hits.clear();
    index.query(lifetimes[i].lower, lifetimes[i].upper, hits);
    for (std::uint32_t j : hits)
      if (j != i && lifetimes[j].size > 0) g.nbr.push_back(j);
    if (g.nbr.size() > kMaxEdges) return false;
    g.start[i + 1] = static_cast<std::uint32_t>(g.nbr.size());
  }
  return true;
}

struct Cost {
  std::uint64_t arena = ~std::uint64_t{0};
  std::uint64_t above = ~std::uint64_t{0};  // sum over buffers of bytes above the bound
  bool operator<(const Cost& o) const { return arena != o.arena ? arena < o.arena : above < o.above; }
  bool operator<=(const Cost& o) const { return !(o < *this); }
};

class Decoder {
 public:
  Decoder(const std::vector<Lifetime>& lt, const Graph& g, std::uint64_t bound)
      : lt_(lt), g_(g), bound_(bound), placed_(lt.size(), 0), offsets_(lt.size(), 0) {}

  Cost decode(const std::vector<std::uint32_t>& order) {
    ++stamp_;
    Cost cost{0, 0};
    for (std::uint32_t i : order) {
      busy_.clear();
      for (std::uint32_t k = g_.start[i]; k < g_.start[i + 1]; ++k) {
        std::uint32_t j = g_.nbr[k];
        if (placed_[j] == stamp_) busy_.emplace_back(offsets_[j], offsets_[j] + lt_[j].size);
      }
      std::uint64_t off = place(busy_, lt_[i].size, lt_[i].alignment, Fit::first);
      offsets_[i] = off;
      placed_[i] = stamp_;
      std::uint64_t end = off + lt_[i].size;
      cost.arena = std::max(cost.arena, end);
      if (end > bound_) cost.above += end - bound_;
    }
    return cost;
  }
  const std::vector<std::uint64_t>& offsets() const { return offsets_; }

 private:
  const std::vector<Lifetime>& lt_;
  const Graph& g_;
  std::uint64_t bound_;
  std::vector<std::uint32_t> placed_;
  std::uint32_t stamp_ = 0;
  std::vector<std::uint64_t> offsets_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> busy_;
};

// Longer time limits than this (about 30 years) mean none: the clock would overflow.
constexpr double kNoDeadlineBeyondSeconds = 1e9;

// Iterations without a new best before the search goes back to the best order.
constexpr std::uint64_t kPatience = 400;
// Check the clock this often (a decode of a small input takes microseconds).
constexpr std::uint64_t kClockEvery = 16;

}  // namespace

std::uint64_t work_budget_of(const SearchOptions& options) {
  if (options.work_budget != 0) return options.work_budget;
  const double units = std::max(options.time_limit_seconds, 0.0) *
                       static_cast<double>(planner::kBranchAndBoundWorkPerSecond);
  constexpr double kMost = 4e18;  // below 2^62: the conversion must not overflow
  if (!(units < kMost)) return static_cast<std::uint64_t>(kMost);  // huge, infinite or NaN
  return std::max<std::uint64_t>(static_cast<std::uint64_t>(units), 1);  // 0 s: one step
}

SearchResult search_plan(const std::vector<Lifetime>& lifetimes, const Plan& start,
                         std::uint64_t lower_bound, const SearchOptions& options) {
  SearchResult result;
  result.plan = start;
  const std::size_t n = lifetimes.size();
  if (n < 2 || start.arena <= lower_bound) return result;
  Graph graph;
  if (!build_graph(lifetimes, graph)) return result;
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      options.time_limit_seconds < kNoDeadlineBeyondSeconds
          ? Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                               std::max(options.time_limit_seconds, 0.0)))
          : Clock::time_point::max();
  const std::uint64_t max_iterations =
      options.max_iterations != 0
          ? options.max_iterations
          : std::max<std::uint64_t>(work_budget_of(options) / (n + graph.nbr.size()), 1);
  Decoder decoder(lifetimes, graph, lower_bound);
  Rng rng(options.seed);

  // Start from the best greedy ordering under this decoder.
  std::vector<std::uint32_t> best_order;
  Cost best;
  for (GreedyOrder o : kGreedyOrders) {
    auto order = greedy_ordering(lifetimes, o);
    Cost c = decoder.decode(order);
    if (c < best) {
      best = c;
      best_order = std::move(order);
    }
  }
  std::vector<std::uint64_t> best_offsets;
  decoder.decode(best_order);
  best_offsets = decoder.offsets();

  std::vector<std::uint32_t> current = best_order, candidate;
  Cost current_cost = best;
  std::vector<std::uint32_t> top;  // positions in `current` of buffers ending above the bound
  std::uint64_t stale = 0;
  auto done = [&] {
    if (best.arena <= lower_bound) return true;
    if (result.iterations >= max_iterations) return true;
    return result.iterations % kClockEvery == 0 && Clock::now() >= deadline;
  };
  // Offsets of `current` (the decoder holds the last decode, so re-decode when needed).
  std::vector<std::uint64_t> current_offsets = best_offsets;
  while (!done()) {
    ++result.iterations;
    candidate = current;
    // Squeaky wheel: the buffers sticking out above the bound get placed earlier.
    top.clear();
    for (std::size_t p = 0; p < n; ++p) {
      std::uint32_t i = candidate[p];
      if (current_offsets[i] + lifetimes[i].size > lower_bound) top.push_back(static_cast<std::uint32_t>(p));
    }
    std::size_t moves = 1 + rng.below(3);
    for (std::size_t m = 0; m < moves; ++m) {
      if (!top.empty() && rng.below(4) != 0) {
        std::size_t p = top[rng.below(top.size())];
        if (p == 0) continue;
        std::size_t q = rng.below(p);
        std::uint32_t v = candidate[p];
        std::move_backward(candidate.begin() + static_cast<std::ptrdiff_t>(q),
                           candidate.begin() + static_cast<std::ptrdiff_t>(p),
                           candidate.begin() + static_cast<std::ptrdiff_t>(p + 1));
        candidate[q] = v;
      } else {
        std::size_t p = rng.below(n);
        std::size_t q = rng.below(n);
        std::swap(candidate[p], candidate[q]);
      }
    }
    Cost c = decoder.decode(candidate);
    if (c <= current_cost) {
      current.swap(candidate);
      current_cost = c;
      current_offsets = decoder.offsets();
      if (c < best) {
        best = c;
        best_order = current;
        best_offsets = current_offsets;
        stale = 0;
        continue;
      }
    }
    if (++stale >= kPatience) {
      current = best_order;
      current_cost = best;
      current_offsets = best_offsets;
      stale = 0;
    }
  }
  if (best.arena < start.arena) {
    result.plan.offsets = best_offsets;
    result.plan.arena = arena_of(lifetimes, best_offsets);
    result.improved = true;
  }
  return result;
}

}  // namespace luma::core
