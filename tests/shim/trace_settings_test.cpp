// trace_settings_test.cpp - the LUMA_TRACE / LUMA_TRACE_STACKS settings rows (the
// patterns themselves: tests/io/path_pattern_test.cpp).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "config/settings.h"

namespace luma::shim {
namespace {

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
