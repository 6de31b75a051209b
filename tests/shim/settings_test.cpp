// settings_test.cpp - the LUMA_* table: defaults, every value accepted, bad values named
// with the default kept.
#include "config/settings.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace luma::shim {
namespace {

LoadedSettings read(const std::map<std::string, std::string>& env) {
  return read_settings([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Settings, DefaultsWhenNothingIsSet) {
  LoadedSettings l = read({});
  EXPECT_TRUE(l.errors.empty());
  EXPECT_EQ(l.settings.stats, StatsFormat::text);
  EXPECT_EQ(l.settings.log_level, LogLevel::warn);
  EXPECT_TRUE(l.settings.stats_file.empty());
  EXPECT_FALSE(l.settings.disable);
  EXPECT_EQ(l.settings.core.free_sync, core::FreeSync::event);
  ASSERT_EQ(l.table.size(), 12u);
  EXPECT_EQ(l.settings.live_dir, "/dev/shm");
  EXPECT_EQ(l.settings.trace_python, 32u);
  EXPECT_TRUE(l.settings.plan.empty());
  EXPECT_TRUE(l.settings.oom_snapshot.empty());
  for (const SettingRow& row : l.table) EXPECT_EQ(row.name.rfind("LUMA_", 0), 0u) << row.name;
}

// The table states each default once: what an unset variable gives must read as that
// default (LUMA_CONF excepted: its default is the core's settings, shown in full).
TEST(Settings, EachRowsDefaultIsWhatAnUnsetVariableGives) {
  LoadedSettings l = read({});
  for (const SettingRow& row : l.table) {
    if (row.name == "LUMA_CONF") continue;
    EXPECT_EQ(row.value, row.default_value) << row.name;
  }
}

TEST(Settings, ReadsEveryVariable) {
  LoadedSettings l = read({{"LUMA_STATS", "json"},
                           {"LUMA_STATS_FILE", "/tmp/s.%p.json"},
                           {"LUMA_LOG_LEVEL", "debug"},
                           {"LUMA_LOG_FILE", "/tmp/luma.log"},
                           {"LUMA_DISABLE", "1"},
                           {"LUMA_CONF", "free_sync:none"},
                           {"LUMA_PLAN", "/tmp/plan.json"}});
  EXPECT_TRUE(l.errors.empty());
  EXPECT_EQ(l.settings.stats, StatsFormat::json);
  EXPECT_EQ(l.settings.stats_file, "/tmp/s.%p.json");
  EXPECT_EQ(l.settings.log_level, LogLevel::debug);
  EXPECT_EQ(l.settings.log_file, "/tmp/luma.log");
  EXPECT_TRUE(l.settings.disable);
  EXPECT_EQ(l.settings.core.free_sync, core::FreeSync::none);
  EXPECT_EQ(l.settings.plan, "/tmp/plan.json");
}

// LUMA_TRACE_PYTHON: a number of Python frames up to the trace format's limit.
TEST(Settings, TracePythonIsAFrameCountUpTo64) {
  EXPECT_EQ(read({{"LUMA_TRACE_PYTHON", "0"}}).settings.trace_python, 0u);
  EXPECT_EQ(read({{"LUMA_TRACE_PYTHON", "64"}}).settings.trace_python, 64u);
  LoadedSettings l = read({{"LUMA_TRACE_PYTHON", "65"}});
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_NE(l.errors[0].find("LUMA_TRACE_PYTHON='65' is not a number of frames 0..64"),
            std::string::npos)
      << l.errors[0];
  EXPECT_EQ(l.settings.trace_python, 32u);
}

TEST(Settings, BadValueIsNamedAndDefaultKept) {
  LoadedSettings l = read({{"LUMA_STATS", "yaml"}, {"LUMA_LOG_LEVEL", "loud"}});
  ASSERT_EQ(l.errors.size(), 2u);
  EXPECT_NE(l.errors[0].find("LUMA_STATS='yaml'"), std::string::npos) << l.errors[0];
  EXPECT_NE(l.errors[1].find("LUMA_LOG_LEVEL='loud'"), std::string::npos) << l.errors[1];
  EXPECT_EQ(l.settings.stats, StatsFormat::text);
  EXPECT_EQ(l.settings.log_level, LogLevel::warn);
}

TEST(Settings, BadConfKeyIsNamedOthersApply) {
  LoadedSettings l = read({{"LUMA_CONF", "bogus_key:1,free_sync:device"}});
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_NE(l.errors[0].find("LUMA_CONF"), std::string::npos);
  EXPECT_NE(l.errors[0].find("bogus_key"), std::string::npos) << l.errors[0];
  EXPECT_EQ(l.settings.core.free_sync, core::FreeSync::device);
}

TEST(Settings, EmptyValueMeansUnset) {
  LoadedSettings l = read({{"LUMA_STATS", ""}, {"LUMA_DISABLE", ""}});
  EXPECT_TRUE(l.errors.empty());
  EXPECT_EQ(l.settings.stats, StatsFormat::text);
}

TEST(Settings, BlankPlanMeansNoPlan) {
  for (const char* blank : {"", " ", "\t", " \t\n"})
    EXPECT_TRUE(read({{"LUMA_PLAN", blank}}).settings.plan.empty()) << "'" << blank << "'";
  EXPECT_EQ(read({{"LUMA_PLAN", " plan.json"}}).settings.plan, " plan.json");
}

TEST(Settings, OomSnapshotIsAPatternAndBlankMeansNone) {
  EXPECT_EQ(read({{"LUMA_OOM_SNAPSHOT", "oom-%p.pickle"}}).settings.oom_snapshot, "oom-%p.pickle");
  for (const char* blank : {"", " ", " \t\n"})
    EXPECT_TRUE(read({{"LUMA_OOM_SNAPSHOT", blank}}).settings.oom_snapshot.empty()) << "'" << blank << "'";
}

// LUMA_LIVE_DIR: an absolute directory (trailing slashes dropped), or off; anything else
// is named and the default kept.
TEST(Settings, LiveDirIsAnAbsoluteDirectoryOrOff) {
  LoadedSettings l = read({{"LUMA_LIVE_DIR", "/run/user/1000/"}});
  EXPECT_TRUE(l.errors.empty());
  EXPECT_EQ(l.settings.live_dir, "/run/user/1000");
  EXPECT_TRUE(l.settings.live_dir_set);
  l = read({{"LUMA_LIVE_DIR", "off"}});
  EXPECT_TRUE(l.errors.empty());
  EXPECT_TRUE(l.settings.live_dir.empty());
  l = read({{"LUMA_LIVE_DIR", "live"}});
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0], "LUMA_LIVE_DIR='live' is not an absolute directory or off; using /dev/shm");
  EXPECT_EQ(l.settings.live_dir, "/dev/shm");
  EXPECT_FALSE(l.settings.live_dir_set);
  EXPECT_EQ(read({{"LUMA_LIVE_DIR", "/"}}).settings.live_dir, "/");
}

}  // namespace
}  // namespace luma::shim
