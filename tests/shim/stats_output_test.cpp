// stats_output_test.cpp - LUMA_STATS_FILE patterns and the rank variables.
#include "stats_output.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace luma::shim {
namespace {

EnvLookup env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(StatsOutput, ExpandsEveryPlaceholder) {
  EXPECT_EQ(expand_stats_path("/tmp/luma.%p.%h.%r.json", 42, "node1", "3"),
            "/tmp/luma.42.node1.3.json");
  EXPECT_EQ(expand_stats_path("100%%-%p", 7, "h", "0"), "100%-7");
  EXPECT_EQ(expand_stats_path("plain", 7, "h", "0"), "plain");
}

TEST(StatsOutput, UnknownOrTrailingPercentIsKept) {
  EXPECT_EQ(expand_stats_path("a%xb", 1, "h", "0"), "a%xb");
  EXPECT_EQ(expand_stats_path("end%", 1, "h", "0"), "end%");
}

TEST(StatsOutput, RankFromTheFirstLauncherVariable) {
  EXPECT_EQ(rank_from_env(env({})), "0");
  EXPECT_EQ(rank_from_env(env({{"SLURM_PROCID", "5"}})), "5");
  EXPECT_EQ(rank_from_env(env({{"PMI_RANK", "2"}, {"SLURM_PROCID", "5"}})), "2");
  EXPECT_EQ(rank_from_env(env({{"OMPI_COMM_WORLD_RANK", "1"}, {"PMI_RANK", "2"}})), "1");
  EXPECT_EQ(rank_from_env(env({{"RANK", "9"}, {"OMPI_COMM_WORLD_RANK", "1"}})), "9");
}

}  // namespace
}  // namespace luma::shim
