// trace_path_test.cpp - LUMA_TRACE values and name patterns (%p %h %r %e %%), and the
// LUMA_TRACE / LUMA_TRACE_STACKS settings rows.
#include "trace_path.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "settings.h"

namespace luma::shim {
namespace {

TEST(TracePath, OneMeansTheDefaultPatternAndZeroMeansNoTrace) {
  EXPECT_EQ(trace_pattern_from_setting("1"), "luma.%e.%p.trace");
  EXPECT_EQ(trace_pattern_from_setting("yes"), "luma.%e.%p.trace");
  EXPECT_EQ(trace_pattern_from_setting("0"), "");
  EXPECT_EQ(trace_pattern_from_setting("off"), "");
  EXPECT_EQ(trace_pattern_from_setting(""), "");
  EXPECT_EQ(trace_pattern_from_setting("/tmp/run.trace"), "/tmp/run.trace");
}

TEST(TracePath, ExpandsEveryKey) {
  PathFields f{4242, "node7", "3", "train"};
  EXPECT_EQ(expand_path_pattern("luma.%e.%p.trace", f), "luma.train.4242.trace");
  EXPECT_EQ(expand_path_pattern("/d/%h-r%r-%p", f), "/d/node7-r3-4242");
  EXPECT_EQ(expand_path_pattern("100%%.%x.%", f), "100%.%x.%");
}

TEST(TracePath, KnowsWhetherThePatternNamesThePid) {
  EXPECT_TRUE(pattern_has_pid("a.%p.trace"));
  EXPECT_FALSE(pattern_has_pid("a.trace"));
  EXPECT_FALSE(pattern_has_pid("a.%%p.trace"));
  EXPECT_TRUE(pattern_has_pid("a.%%%p"));
}

LoadedSettings read(const std::map<std::string, std::string>& env) {
  return read_settings([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(TraceSettings, ReadsTraceAndStacks) {
  LoadedSettings l = read({{"LUMA_TRACE", "1"}, {"LUMA_TRACE_STACKS", "16"}});
  EXPECT_TRUE(l.errors.empty());
  EXPECT_EQ(l.settings.trace, "luma.%e.%p.trace");
  EXPECT_EQ(l.settings.trace_stacks, 16u);
}

TEST(TraceSettings, BadStackDepthIsNamedAndOff) {
  for (const char* bad : {"many", "-1", "129", "8x"}) {
    LoadedSettings l = read({{"LUMA_TRACE", "t"}, {"LUMA_TRACE_STACKS", bad}});
    ASSERT_EQ(l.errors.size(), 1u) << bad;
    EXPECT_NE(l.errors[0].find("LUMA_TRACE_STACKS"), std::string::npos);
    EXPECT_EQ(l.settings.trace_stacks, 0u);
  }
}

}  // namespace
}  // namespace luma::shim
