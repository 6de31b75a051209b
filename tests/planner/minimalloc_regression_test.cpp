// minimalloc_regression_test.cpp - plan quality on MiniMalloc's published inputs
// (../shared/data/minimalloc): the ratios arena / LB each strategy reaches are asserted
// (never times). The data folder comes from meson (LUMA_MINIMALLOC_DIR); absent -> skip.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "planner/lifetime_reader.h"
#include "planner/plan_checker.h"
#include "planner/planner.h"

namespace luma::core {
namespace {

struct Case {
  const char* file;
  std::uint64_t lower_bound;
  double tlsf;     // the reference replay's ratio, exact to 3 decimals
  double greedy;   // at most this (TFLite-style reference: 1.311 .. 1.401)
  double best;     // at most this
};

// Measured on this code. `best` runs the branch and bound with a node budget (not a time
// limit), so its result does not depend on how loaded the machine is; the small margin only
// absorbs rounding in the printed ratio. A, B, C and F pack at the lower bound; D (optimum
// unknown, best known 1.046) and E (1.000) are not solved within this budget.
const Case kCases[] = {
    {"A.1048576.csv", 1048576, 1.752, 1.32, 1.0005},
    {"B.1048576.csv", 1048576, 1.693, 1.35, 1.0005},
    {"C.1048576.csv", 1039360, 1.686, 1.37, 1.0005},
    {"D.1048576.csv", 986112, 1.574, 1.34, 1.078},
    {"E.1048576.csv", 1048576, 1.688, 1.40, 1.090},
    {"F.1048576.csv", 1048576, 1.267, 1.38, 1.0005},
};
// Enough for the lower-bound packings (B needs about 10^5 nodes) and a few seconds of CPU
// on D; the time limit is only a safety net.
constexpr std::uint64_t kNodeBudget = 300000;

std::filesystem::path data_dir() { return LUMA_MINIMALLOC_DIR; }

double ratio(const PlanReport& r) {
  return static_cast<double>(r.chosen.arena) / static_cast<double>(r.lower_bound);
}

TEST(MiniMalloc, RatiosPerStrategy) {
  if (!std::filesystem::exists(data_dir() / "A.1048576.csv"))
    GTEST_SKIP() << "no MiniMalloc data at " << data_dir();
  SearchOptions search;
  search.time_limit_seconds = 60;
  search.max_iterations = kNodeBudget;
  for (const Case& c : kCases) {
    auto lts = read_lifetimes_file((data_dir() / c.file).string(), builtin_readers());
    auto tlsf = plan_lifetimes(lts, Strategy::tlsf, search);
    EXPECT_EQ(tlsf.lower_bound, c.lower_bound) << c.file;
    EXPECT_NEAR(ratio(tlsf), c.tlsf, 0.0005) << c.file;
    auto greedy = plan_lifetimes(lts, Strategy::greedy, search);
    EXPECT_LE(ratio(greedy), c.greedy) << c.file;
    auto best = plan_lifetimes(lts, Strategy::best, search);
    EXPECT_TRUE(check_plan(lts, best.chosen).empty()) << c.file;
    EXPECT_LE(ratio(best), c.best) << c.file;
    EXPECT_GE(ratio(best), 1.0) << c.file;
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
