// canonical_search_test.cpp - the exact search against brute force: on small random inputs
// (with alignments) the decision search finds a packing at the optimum and proves none
// exists one byte below, for every static order, plain or shuffled; the driver returns the optimum, proven.
// Plus: limits stop it, and the same budget gives the same answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "planner/branch_and_bound.h"
#include "planner/canonical_search.h"
#include "planner/greedy.h"
#include "planner/lower_bound.h"
#include "planner/plan_checker.h"
#include "planner/placement.h"
#include "random_lifetimes.h"

namespace luma::core {
namespace {

// The optimum by brute force. Listing an optimal packing pushed down as far as it goes by
// offset, each buffer sits at the lowest aligned offset above the buffers listed before it
// that overlap it; so the smallest arena over every order, placing each buffer that way, is
// the optimum.
std::uint64_t brute_force_optimum(const std::vector<Lifetime>& lts) {
  std::vector<std::size_t> order(lts.size());
  std::iota(order.begin(), order.end(), 0);
  std::uint64_t best = ~std::uint64_t{0};
  std::vector<std::uint64_t> offsets(lts.size());
  do {
    std::uint64_t arena = 0;
    for (std::size_t n = 0; n < order.size(); ++n) {
      const Lifetime& a = lts[order[n]];
      std::uint64_t top = 0;
      for (std::size_t m = 0; m < n; ++m) {
        const Lifetime& b = lts[order[m]];
        if (lifetimes_overlap(a, b) && b.size > 0) top = std::max(top, offsets[order[m]] + b.size);
      }
      offsets[order[n]] = align_up(top, a.alignment);
      arena = std::max(arena, offsets[order[n]] + a.size);
    }
    best = std::min(best, arena);
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

constexpr CanonicalSearch::Order kOrders[] = {CanonicalSearch::Order::wat,
                                              CanonicalSearch::Order::taw,
                                              CanonicalSearch::Order::twa};

TEST(CanonicalSearch, DecidesExactlyAtTheOptimum) {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const std::size_t n = 2 + seed % 6;  // up to 7 buffers: 5040 orders
    auto lts = testing::random_lifetimes(n, seed, 12, 8, 16, seed % 3 == 0);
    const std::uint64_t optimum = brute_force_optimum(lts);
    CanonicalSearch search(lts, 1000);
    ASSERT_TRUE(search.usable());
    // Plain and shuffled orders alike: a shuffle changes where the search looks first,
    // never what it concludes.
    for (std::uint64_t shuffle : {std::uint64_t{0}, seed})
      for (CanonicalSearch::Order order : kOrders) {
        CanonicalSearch::Limits limits;
        limits.shuffle = shuffle;
        ASSERT_EQ(search.solve(optimum, order, limits), CanonicalSearch::Outcome::found)
            << "seed " << seed << ", shuffle " << shuffle << ", optimum " << optimum;
        Plan plan{"x", search.offsets(), arena_of(lts, search.offsets())};
        EXPECT_TRUE(check_plan(lts, plan).empty()) << "seed " << seed;
        EXPECT_LE(plan.arena, optimum) << "seed " << seed;
        EXPECT_EQ(search.solve(optimum - 1, order, limits), CanonicalSearch::Outcome::infeasible)
            << "seed " << seed << ", shuffle " << shuffle << ", optimum " << optimum;
      }
  }
}

TEST(BranchAndBound, ReturnsTheProvenOptimum) {
  for (std::uint64_t seed = 1000; seed <= 1200; ++seed) {
    auto lts = testing::random_lifetimes(3 + seed % 5, seed, 10, 6, 20, seed % 2 == 0);
    const std::uint64_t optimum = brute_force_optimum(lts);
    const std::uint64_t start = optimum * 2 + 64;  // a poor plan to improve on
    BranchAndBoundResult r = branch_and_bound(lts, lower_bound_bytes(lts), start, {});
    ASSERT_TRUE(r.ran);
    ASSERT_TRUE(r.plan.has_value()) << "seed " << seed;
    EXPECT_EQ(r.plan->arena, optimum) << "seed " << seed;
    EXPECT_TRUE(r.proven_optimal) << "seed " << seed;
    EXPECT_TRUE(check_plan(lts, *r.plan).empty()) << "seed " << seed;
  }
}

TEST(BranchAndBound, NeverReturnsAPlanAtOrAboveItsStart) {
  auto lts = testing::random_lifetimes(40, 5, 200, 40, 5000);
  const Plan greedy = plan_greedy_best(lts);
  BranchAndBoundLimits limits;
  limits.work = 1;  // no room to find anything
  BranchAndBoundResult r = branch_and_bound(lts, lower_bound_bytes(lts), greedy.arena, limits);
  if (r.plan) {
    EXPECT_LT(r.plan->arena, greedy.arena);
  }
  // Nothing below the lower bound exists, so nothing is searched.
  BranchAndBoundResult none = branch_and_bound(lts, greedy.arena, greedy.arena, {});
  EXPECT_FALSE(none.plan.has_value());
}

TEST(CanonicalSearch, ShuffledOrdersFindOtherPackingsAndRepeatThemselves) {
  auto lts = testing::random_lifetimes(60, 11, 300, 40, 4096);
  const std::uint64_t capacity = lower_bound_bytes(lts) * 11 / 10;
  CanonicalSearch search(lts, 1 << 20);
  ASSERT_EQ(search.solve(capacity, CanonicalSearch::Order::twa, {}), CanonicalSearch::Outcome::found);
  const std::vector<std::uint64_t> plain = search.offsets();
  std::size_t differ = 0;
  for (std::uint64_t shuffle = 1; shuffle <= 5; ++shuffle) {
    CanonicalSearch::Limits limits;
    limits.shuffle = shuffle;
    ASSERT_EQ(search.solve(capacity, CanonicalSearch::Order::twa, limits),
              CanonicalSearch::Outcome::found) << "shuffle " << shuffle;
    const std::vector<std::uint64_t> first = search.offsets();
    if (first != plain) ++differ;
    ASSERT_EQ(search.solve(capacity, CanonicalSearch::Order::twa, limits),
              CanonicalSearch::Outcome::found);
    EXPECT_EQ(search.offsets(), first) << "the same seed must give the same packing";
  }
  EXPECT_GT(differ, 0u) << "every shuffle gave the plain order's packing: no shuffling happened";
}

TEST(CanonicalSearch, LimitsStopItAndTheSameBudgetGivesTheSameAnswer) {
  auto lts = testing::random_lifetimes(120, 9, 400, 60, 4096);
  const std::uint64_t lb = lower_bound_bytes(lts);
  CanonicalSearch a(lts, 1 << 20), b(lts, 1 << 20);
  CanonicalSearch::Limits few;
  few.nodes = 3;
  EXPECT_EQ(a.solve(lb, CanonicalSearch::Order::wat, few), CanonicalSearch::Outcome::limit);
  EXPECT_LE(a.nodes(), 4u);
  CanonicalSearch::Limits budget;
  budget.work = 200000;
  const auto ra = a.solve(lb + lb / 20, CanonicalSearch::Order::twa, budget);
  const auto rb = b.solve(lb + lb / 20, CanonicalSearch::Order::twa, budget);
  // b ran only this solve; a also ran the stopped one: the work of a solve is its own.
  EXPECT_EQ(ra, rb);
  if (ra == CanonicalSearch::Outcome::found) {
    EXPECT_EQ(a.offsets(), b.offsets());
  }
  CanonicalSearch::Limits past;
  past.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  CanonicalSearch c(lts, 1 << 20);
  // The clock is read every 1024 nodes: a search that needs more stops at the deadline.
  const auto rc = c.solve(lb, CanonicalSearch::Order::wat, past);
  if (c.nodes() > 1024) {
    EXPECT_EQ(rc, CanonicalSearch::Outcome::limit);
  }
}

TEST(CanonicalSearch, TooManyOverlappingPairsIsRefused) {
  std::vector<Lifetime> lts;
  for (int i = 0; i < 30; ++i) lts.push_back({std::to_string(i), 0, 10, 8, 1, 0});  // 435 pairs
  EXPECT_FALSE(CanonicalSearch(lts, 100).usable());
  EXPECT_TRUE(CanonicalSearch(lts, 435).usable());
  BranchAndBoundResult r = branch_and_bound(lts, 240, 300, {});
  EXPECT_TRUE(r.ran);
}

}  // namespace
}  // namespace luma::core
