// branch_and_bound.cpp - see branch_and_bound.h.
#include "planner/branch_and_bound.h"

#include <algorithm>
#include <chrono>

#include "planner/canonical_search.h"
#include "planner/planner_constants.h"

namespace luma::core {

namespace {

using Clock = std::chrono::steady_clock;
using Outcome = CanonicalSearch::Outcome;

// Longer limits than this (about 30 years) mean no deadline: the clock's arithmetic would
// overflow.
constexpr double kNoDeadlineBeyondSeconds = 1e9;

// The node limits stop doubling here (never reached in practice; the doubling must not wrap).
constexpr std::uint64_t kMostNodes = std::uint64_t{1} << 62;

constexpr CanonicalSearch::Order kOrders[CanonicalSearch::kOrderCount] = {
    CanonicalSearch::Order::wat, CanonicalSearch::Order::taw, CanonicalSearch::Order::twa};

class Driver {
 public:
  Driver(const std::vector<Lifetime>& lifetimes, const BranchAndBoundLimits& limits)
      : search_(lifetimes, planner::kBranchAndBoundMaxOverlaps),
        work_left_(limits.work == 0 ? ~std::uint64_t{0} : limits.work),
        deadline_(limits.seconds > 0 && limits.seconds < kNoDeadlineBeyondSeconds
                      ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(limits.seconds))
                      : Clock::time_point::max()) {
    std::size_t live = 0;
    for (const Lifetime& lt : lifetimes)
      if (lt.lower < lt.upper && lt.size > 0) ++live;
    first_node_limit_ = std::max<std::uint64_t>(2 * live, planner::kRestartMinNodes);
  }

  bool usable() const { return search_.usable(); }
  bool out_of_effort() const { return work_left_ == 0 || Clock::now() >= deadline_; }
  bool timed_out() const { return Clock::now() >= deadline_; }
  std::uint64_t work_left() const { return work_left_; }
  const CanonicalSearch& search() const { return search_; }

  // Is there a packing within `capacity`? Restarts over the orders with doubling node
  // limits until an answer, `allowance` work units, or the deadline. `shuffled`: each round
  // tries every order plain, then every order again shuffled with a seed never used before.
  Outcome decide(std::uint64_t capacity, std::uint64_t allowance, bool shuffled) {
    allowance = std::min(allowance, work_left_);
    const std::size_t attempts = (shuffled ? 2 : 1) * std::size(kOrders);
    for (std::uint64_t nodes = first_node_limit_;; nodes = std::min(2 * nodes, kMostNodes))
      for (std::size_t attempt = 0; attempt < attempts; ++attempt) {
        if (allowance == 0 || Clock::now() >= deadline_) return Outcome::limit;
        const CanonicalSearch::Order order = kOrders[attempt % std::size(kOrders)];
        CanonicalSearch::Limits limits;
        limits.nodes = nodes;
        limits.work = allowance;
        limits.deadline = deadline_;
        if (attempt >= std::size(kOrders)) limits.shuffle = ++shuffles_;
        const std::uint64_t before = search_.work();
        const Outcome outcome = search_.solve(capacity, order, limits);
        const std::uint64_t used = std::min(search_.work() - before, allowance);
        allowance -= used;
        work_left_ -= used;
        if (outcome != Outcome::limit) return outcome;
      }
  }

 private:
  CanonicalSearch search_;
  std::uint64_t work_left_;
  Clock::time_point deadline_;
  std::uint64_t first_node_limit_ = 0;
  std::uint64_t shuffles_ = 0;  // seeds used so far
};

}  // namespace

BranchAndBoundResult branch_and_bound(const std::vector<Lifetime>& lifetimes,
                                      std::uint64_t lower_bound, std::uint64_t start_arena,
                                      const BranchAndBoundLimits& limits) {
  BranchAndBoundResult result;
  Driver driver(lifetimes, limits);
  if (!driver.usable()) return result;
  result.ran = true;
  if (start_arena <= lower_bound) return result;  // nothing below it to find
  std::uint64_t best = start_arena;
  auto take = [&] {
    const std::uint64_t arena = arena_of(lifetimes, driver.search().offsets());
    if (arena >= best) return;
    best = arena;
    Plan plan;
    plan.strategy = "branch-and-bound";
    plan.offsets = driver.search().offsets();
    plan.arena = arena;
    result.plan = std::move(plan);
  };
  auto finish = [&] {
    result.nodes = driver.search().nodes();
    result.work = driver.search().work();
    result.stopped_by_time = driver.timed_out();
    return result;
  };
  // Phase 1: a packing at the lower bound, with a share of the effort.
  const std::uint64_t first_share = std::min(
      static_cast<std::uint64_t>(static_cast<double>(driver.work_left()) *
                                 planner::kBranchAndBoundDecisionShare),
      planner::kBranchAndBoundDecisionMostWork);
  const Outcome at_bound = driver.decide(lower_bound, std::max<std::uint64_t>(first_share, 1), false);
  if (at_bound == Outcome::found) {
    take();
    result.proven_optimal = true;
    return finish();
  }
  // Phase 2: bisect. `proven`: every capacity below it is known to fail. `low`: the
  // bisection's lower end, moved up past capacities that failed or ran out of effort (the
  // latter is a guess: such capacities may still fit). Once the interval is a sliver of the
  // arena, further halving buys almost nothing, so it starts over from `proven` splitting at
  // another fraction: the effort a capacity needs varies wildly from one capacity to the
  // next, and a fresh capacity is a fresh chance.
  std::uint64_t proven = at_bound == Outcome::infeasible ? lower_bound + 1 : lower_bound;
  std::uint64_t low = proven;
  std::size_t pass = 0;
  while (low < best && !driver.out_of_effort()) {
    const double split = planner::kBisectSplits[pass % std::size(planner::kBisectSplits)];
    const std::uint64_t span = best - 1 - low;  // capacities [low, best - 1]
    const std::uint64_t mid = low + static_cast<std::uint64_t>(static_cast<double>(span) * split);
    const std::uint64_t before = driver.work_left();
    const std::uint64_t allowance = std::max<std::uint64_t>(
        static_cast<std::uint64_t>(static_cast<double>(before) * planner::kBranchAndBoundBisectShare), 1);
    const Outcome outcome = driver.decide(mid, allowance, true);
    if (outcome == Outcome::found) {
      take();
    } else {
      low = mid + 1;
      if (outcome == Outcome::infeasible) proven = std::max(proven, low);
    }
    if (proven >= best) break;  // everything below the best arena fails: it is optimal
    if (best - low <= static_cast<std::uint64_t>(static_cast<double>(best) * planner::kBisectRestartFraction)) {
      low = proven;
      ++pass;
    }
    if (driver.work_left() == before) break;  // no effort was spent: nothing more will happen
  }
  result.proven_optimal = result.plan.has_value() && proven >= best;
  return finish();
}

}  // namespace luma::core
