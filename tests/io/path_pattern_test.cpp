// path_pattern_test.cpp - file-name patterns (%p %h %r %e %%), the LUMA_TRACE values and
// the rank variables (core/io/path_pattern.h), for libluma.so and `luma run` alike.
#include "io/path_pattern.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace luma::core {
namespace {

auto env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(TracePattern, OneMeansTheDefaultPatternAndZeroMeansNoTrace) {
  EXPECT_EQ(trace_pattern_from_setting("1"), "luma.%e.%p.trace");
  EXPECT_EQ(trace_pattern_from_setting("yes"), "luma.%e.%p.trace");
  EXPECT_EQ(trace_pattern_from_setting("0"), "");
  EXPECT_EQ(trace_pattern_from_setting("off"), "");
  EXPECT_EQ(trace_pattern_from_setting(""), "");
  EXPECT_EQ(trace_pattern_from_setting("/tmp/run.trace"), "/tmp/run.trace");
  EXPECT_EQ(trace_pattern_from_setting("ON"), "luma.%e.%p.trace");
  EXPECT_EQ(trace_pattern_from_setting("False"), "");
}

TEST(PathPattern, ExpandsEveryKey) {
  PathFields f{4242, "node7", "3", "train"};
  EXPECT_EQ(expand_path_pattern("luma.%e.%p.trace", f), "luma.train.4242.trace");
  EXPECT_EQ(expand_path_pattern("/d/%h-r%r-%p", f), "/d/node7-r3-4242");
  EXPECT_EQ(expand_path_pattern("100%%.%x.%", f), "100%.%x.%");
}

// LUMA_STATS_FILE's fields: no executable, so %e stays as written.
TEST(PathPattern, StatsFileFieldsExpandPidHostRankAndKeepE) {
  PathFields f{42, "node1", "3", std::nullopt};
  EXPECT_EQ(expand_path_pattern("/tmp/luma.%p.%h.%r.json", f), "/tmp/luma.42.node1.3.json");
  PathFields g{7, "h", "0", std::nullopt};
  EXPECT_EQ(expand_path_pattern("100%%-%p", g), "100%-7");
  EXPECT_EQ(expand_path_pattern("plain", g), "plain");
  EXPECT_EQ(expand_path_pattern("%e.%p", g), "%e.7");
}

TEST(PathPattern, UnknownOrTrailingPercentIsKept) {
  PathFields f{1, "h", "0", std::nullopt};
  EXPECT_EQ(expand_path_pattern("a%xb", f), "a%xb");
  EXPECT_EQ(expand_path_pattern("end%", f), "end%");
}

TEST(PathPattern, KnowsWhetherThePatternNamesThePid) {
  EXPECT_TRUE(pattern_has_pid("a.%p.trace"));
  EXPECT_FALSE(pattern_has_pid("a.trace"));
  EXPECT_FALSE(pattern_has_pid("a.%%p.trace"));
  EXPECT_TRUE(pattern_has_pid("a.%%%p"));
}

TEST(RankVariables, RankFromTheFirstLauncherVariable) {
  EXPECT_EQ(rank_from(env({})), "0");
  EXPECT_EQ(rank_from(env({{"SLURM_PROCID", "5"}})), "5");
  EXPECT_EQ(rank_from(env({{"PMI_RANK", "2"}, {"SLURM_PROCID", "5"}})), "2");
  EXPECT_EQ(rank_from(env({{"OMPI_COMM_WORLD_RANK", "1"}, {"PMI_RANK", "2"}})), "1");
  EXPECT_EQ(rank_from(env({{"RANK", "9"}, {"OMPI_COMM_WORLD_RANK", "1"}})), "9");
  EXPECT_EQ(rank_from(env({{"RANK", ""}, {"PMI_RANK", "4"}})), "4");
}

}  // namespace
}  // namespace luma::core
