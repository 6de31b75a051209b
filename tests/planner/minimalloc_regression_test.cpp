// minimalloc_regression_test.cpp - plan quality on MiniMalloc's eleven published inputs
// (tests/data/minimalloc, copied from google/minimalloc): the ratios arena / LB each strategy
// reaches are asserted (never times), and the target (docs/planner.md, "Measured"):
// geometric mean of `best` <= 1.02; then D and J with larger work budgets (sizes only). The
// data folder comes from meson (LUMA_MINIMALLOC_DIR); absent -> skip.
// `best` runs the exact search with the work budget `luma plan` uses by default, and a time
// limit far above what it needs: the work budget, not the clock, ends it, so the ratios are
// the same on any machine and under any load.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "planner/input/lifetime_reader.h"
#include "planner/plan_checker.h"
#include "planner/planner.h"
#include "planner/planner_constants.h"

namespace luma::core {
namespace {

struct Case {
  const char* file;
  std::uint64_t lower_bound;
  double tlsf;         // the reference replay's ratio, exact to 3 decimals
  double greedy;       // at most this (TFLite-style reference: 1.311 .. 1.401)
  std::uint64_t best;  // arena of `best` at the default work budget: at most this
};

// All but D and J pack at the lower bound (proven optimal); the optima of D and J are
// unknown (MiniMalloc's best known arena for D is 1031168, 1.046 x LB). G-K's TLSF ratios
// are our replay's, measured when they were added (the reference table covers A-F).
const Case kCases[] = {
    {"A.1048576.csv", 1048576, 1.752, 1.32, 1048576},
    {"B.1048576.csv", 1048576, 1.693, 1.35, 1048576},
    {"C.1048576.csv", 1039360, 1.686, 1.37, 1039360},
    {"D.1048576.csv", 986112, 1.574, 1.34, 1034240},  // 1.0488
    {"E.1048576.csv", 1048576, 1.688, 1.40, 1048576},
    {"F.1048576.csv", 1048576, 1.267, 1.38, 1048576},
    {"G.1048576.csv", 1048576, 1.291, 1.17, 1048576},
    {"H.1048576.csv", 1048576, 1.185, 1.26, 1048576},
    {"I.1048576.csv", 1048576, 1.847, 1.42, 1048576},
    {"J.1048576.csv", 989184, 1.741, 1.32, 1043456},  // 1.0549
    {"K.1048576.csv", 1048576, 1.925, 1.28, 1048576},
};

std::filesystem::path data_dir() { return LUMA_MINIMALLOC_DIR; }

double ratio(std::uint64_t arena, std::uint64_t lower_bound) {
  return static_cast<double>(arena) / static_cast<double>(lower_bound);
}

SearchOptions default_effort() {
  SearchOptions search;
  search.time_limit_seconds = 600;  // a safety net only
  search.work_budget = static_cast<std::uint64_t>(planner::kDefaultTimeLimitSeconds *
                                                  static_cast<double>(planner::kBranchAndBoundWorkPerSecond));
  return search;
}

TEST(MiniMalloc, RatiosPerStrategyAndTheTargetMean) {
  if (!std::filesystem::exists(data_dir() / "A.1048576.csv"))
    GTEST_SKIP() << "no MiniMalloc data at " << data_dir();
  const SearchOptions search = default_effort();
  double log_sum = 0;
  for (const Case& c : kCases) {
    auto lts = read_lifetimes_file((data_dir() / c.file).string(), builtin_readers());
    auto tlsf = plan_lifetimes(lts, Strategy::tlsf, search);
    EXPECT_EQ(tlsf.lower_bound, c.lower_bound) << c.file;
    EXPECT_NEAR(ratio(tlsf.chosen.arena, tlsf.lower_bound), c.tlsf, 0.0005) << c.file;
    auto greedy = plan_lifetimes(lts, Strategy::greedy, search);
    EXPECT_LE(ratio(greedy.chosen.arena, greedy.lower_bound), c.greedy) << c.file;
    auto best = plan_lifetimes(lts, Strategy::best, search);
    EXPECT_TRUE(check_plan(lts, best.chosen).empty()) << c.file;
    EXPECT_FALSE(best.search_stopped_by_time) << c.file << ": the work budget should end it";
    EXPECT_LE(best.chosen.arena, c.best) << c.file;
    EXPECT_GE(best.chosen.arena, best.lower_bound) << c.file;
    if (c.best == c.lower_bound) {
      EXPECT_EQ(best.chosen.strategy, "branch-and-bound (optimal)") << c.file;
    }
    log_sum += std::log(ratio(best.chosen.arena, best.lower_bound));
  }
  const double mean = std::exp(log_sum / static_cast<double>(std::size(kCases)));
  EXPECT_LE(mean, 1.02) << "the target (docs/planner.md)";
  EXPECT_LE(mean, 1.01) << "the margin measured when this test was written (1.0092 over all eleven)";
}

TEST(MiniMalloc, SameBudgetSameArena) {
  if (!std::filesystem::exists(data_dir() / "D.1048576.csv"))
    GTEST_SKIP() << "no MiniMalloc data at " << data_dir();
  // D is the file the search never finishes: it stops where the budget runs out, so this is
  // where a dependence on anything but the budget would show. A tenth of the budget keeps it
  // quick.
  auto lts = read_lifetimes_file((data_dir() / "D.1048576.csv").string(), builtin_readers());
  SearchOptions search = default_effort();
  search.work_budget /= 10;
  auto a = plan_lifetimes(lts, Strategy::best, search);
  auto b = plan_lifetimes(lts, Strategy::best, search);
  EXPECT_EQ(a.chosen.offsets, b.chosen.offsets);
  EXPECT_EQ(a.search_work, b.search_work);
  EXPECT_LT(a.chosen.arena, plan_lifetimes(lts, Strategy::greedy, search).chosen.arena);
}

// Larger budgets, as `luma plan --time-limit S` gives (S x 100 M work units): D reaches
// MiniMalloc's best known arena (1031168) at 10 s and goes below it at 20 s (which takes
// about 2.5 s of CPU), and J goes below the default budget's arena. Sizes only, never
// times: the budget is in work units, so these are the same on any machine.
TEST(MiniMalloc, LargerBudgetsReachAndPassTheBestKnownArenaOnD) {
  if (!std::filesystem::exists(data_dir() / "J.1048576.csv"))
    GTEST_SKIP() << "no MiniMalloc data at " << data_dir();
  const struct {
    const char* file;
    std::uint64_t seconds;
    std::uint64_t arena;
  } cases[] = {{"D.1048576.csv", 10, 1031168},
               {"D.1048576.csv", 20, 1026048},
               {"J.1048576.csv", 10, 1036288}};
  for (const auto& c : cases) {
    SearchOptions search = default_effort();
    search.work_budget = c.seconds * planner::kBranchAndBoundWorkPerSecond;
    auto lts = read_lifetimes_file((data_dir() / c.file).string(), builtin_readers());
    auto best = plan_lifetimes(lts, Strategy::best, search);
    EXPECT_TRUE(check_plan(lts, best.chosen).empty()) << c.file;
    EXPECT_FALSE(best.search_stopped_by_time) << c.file << ": the work budget should end it";
    EXPECT_LE(best.chosen.arena, c.arena) << c.file << " with " << c.seconds << " s of work";
  }
}

TEST(MiniMalloc, ExampleIsPackedOptimally) {
  if (!std::filesystem::exists(data_dir() / "example.12.csv"))
    GTEST_SKIP() << "no MiniMalloc data at " << data_dir();
  auto lts = read_lifetimes_file((data_dir() / "example.12.csv").string(), builtin_readers());
  auto best = plan_lifetimes(lts, Strategy::best, SearchOptions{});
  EXPECT_EQ(best.lower_bound, 12u);
  EXPECT_EQ(best.chosen.arena, 12u);
}

}  // namespace
}  // namespace luma::core
