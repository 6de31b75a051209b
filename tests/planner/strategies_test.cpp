// strategies_test.cpp - property tests on random inputs for every strategy: the plan is
// valid (the checker), deterministic, and never below the lower bound; plus the checker
// itself, the lower bound and the TLSF replay's rules.
#include <gtest/gtest.h>

#include "planner/greedy.h"
#include "planner/lower_bound.h"
#include "planner/plan_checker.h"
#include "planner/planner.h"
#include "planner/tlsf_replay.h"
#include "random_lifetimes.h"

namespace luma::core {
namespace {

Lifetime lt(std::string id, std::uint64_t lo, std::uint64_t up, std::uint64_t size) {
  return Lifetime{std::move(id), lo, up, size, 1, 0};
}

TEST(LowerBound, HalfOpenLifetimesDoNotMeet) {
  EXPECT_EQ(lower_bound_bytes({lt("a", 0, 3, 4), lt("b", 3, 9, 4)}), 4u);
  EXPECT_EQ(lower_bound_bytes({lt("a", 0, 3, 4), lt("b", 2, 9, 5)}), 9u);
  EXPECT_EQ(lower_bound_bytes({}), 0u);
}

TEST(Checker, FindsOverlapAndMisalignment) {
  std::vector<Lifetime> lts = {lt("a", 0, 5, 10), lt("b", 4, 8, 10), lt("c", 5, 9, 10)};
  Plan ok{"x", {0, 10, 0}, 20};
  EXPECT_TRUE(check_plan(lts, ok).empty());
  Plan clash{"x", {0, 5, 20}, 30};
  auto bad = check_plan(lts, clash);
  ASSERT_FALSE(bad.empty());
  EXPECT_NE(bad[0].find("overlaps"), std::string::npos) << bad[0];
  lts[2].alignment = 8;
  Plan misaligned{"x", {0, 10, 4}, 20};
  EXPECT_FALSE(check_plan(lts, misaligned).empty());
  Plan wrong_arena{"x", {0, 10, 0}, 25};
  EXPECT_FALSE(check_plan(lts, wrong_arena).empty());
}

TEST(TlsfReplay, FreesBeforeAllocsAtTheSameTime) {
  // b starts when a ends: the replay frees a first, so b reuses offset 0.
  Plan p = plan_tlsf_replay({lt("a", 0, 3, 256), lt("b", 3, 5, 256)});
  EXPECT_EQ(p.offsets, (std::vector<std::uint64_t>{0, 0}));
  EXPECT_EQ(p.arena, 256u);
  // Sizes are rounded to 256 B: two live 10-byte buffers sit 256 apart.
  Plan q = plan_tlsf_replay({lt("a", 0, 3, 10), lt("b", 1, 5, 10)});
  EXPECT_EQ(q.offsets, (std::vector<std::uint64_t>{0, 256}));
}

TEST(Greedy, ExampleIsOptimal) {
  std::vector<Lifetime> lts = {lt("b1", 0, 3, 4), lt("b2", 3, 9, 4), lt("b3", 0, 9, 4),
                               lt("b4", 9, 21, 4), lt("b5", 0, 21, 4)};
  EXPECT_EQ(plan_greedy(lts, GreedyOrder::size).arena, 12u);
}

class EveryStrategy : public ::testing::TestWithParam<Strategy> {};

TEST_P(EveryStrategy, RandomInputsGiveValidDeterministicPlans) {
  // `best` is bounded by work units, not time (the limit is only a safety net), so its plans
  // repeat too.
  SearchOptions search;
  search.time_limit_seconds = 60;
  search.work_budget = 1'000'000;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    auto lts = testing::random_lifetimes(60 + seed * 10, seed, 500, 80, 5000, seed % 2 == 0);
    PlanReport a = plan_lifetimes(lts, GetParam(), search);
    auto bad = check_plan(lts, a.chosen);
    ASSERT_TRUE(bad.empty()) << "seed " << seed << ": " << bad.front();
    for (const auto& run : a.runs) {
      EXPECT_TRUE(check_plan(lts, run.plan).empty()) << run.plan.strategy;
      EXPECT_GE(run.plan.arena, a.lower_bound) << run.plan.strategy;
    }
    PlanReport b = plan_lifetimes(lts, GetParam(), search);
    EXPECT_EQ(a.chosen.offsets, b.chosen.offsets) << "seed " << seed;
  }
}

TEST_P(EveryStrategy, BestIsNeverWorseThanGreedy) {
  SearchOptions search;
  search.time_limit_seconds = 0.05;
  auto lts = testing::random_lifetimes(200, 99);
  auto greedy = plan_lifetimes(lts, Strategy::greedy, search);
  auto mine = plan_lifetimes(lts, GetParam(), search);
  if (GetParam() == Strategy::best) {
    EXPECT_LE(mine.chosen.arena, greedy.chosen.arena);
  }
  EXPECT_GE(mine.chosen.arena, mine.lower_bound);
}

INSTANTIATE_TEST_SUITE_P(Planner, EveryStrategy,
                         ::testing::Values(Strategy::tlsf, Strategy::greedy, Strategy::best),
                         [](const auto& info) {
                           switch (info.param) {
                             case Strategy::tlsf: return std::string("tlsf");
                             case Strategy::greedy: return std::string("greedy");
                             default: return std::string("best");
                           }
                         });

TEST(Greedy, EveryOrderingIsValidAndDeterministic) {
  auto lts = testing::random_lifetimes(500, 7, 2000, 200, 100000, true);
  for (GreedyOrder o : kGreedyOrders) {
    Plan p = plan_greedy(lts, o);
    EXPECT_TRUE(check_plan(lts, p).empty()) << greedy_order_name(o);
    EXPECT_EQ(p.offsets, plan_greedy(lts, o).offsets);
  }
}

TEST(Search, NeverWorseThanItsStartAndDeterministicByIterations) {
  auto lts = testing::random_lifetimes(150, 3);
  Plan start = plan_greedy(lts, GreedyOrder::size);
  SearchOptions o;
  o.time_limit_seconds = 100;  // the iteration count decides
  o.max_iterations = 300;
  o.seed = 1;
  auto lb = lower_bound_bytes(lts);
  SearchResult a = search_plan(lts, start, lb, o);
  SearchResult b = search_plan(lts, start, lb, o);
  EXPECT_LE(a.plan.arena, start.arena);
  EXPECT_TRUE(check_plan(lts, a.plan).empty());
  EXPECT_EQ(a.plan.offsets, b.plan.offsets);
}

}  // namespace
}  // namespace luma::core
