// fingerprint_test.cpp - which run a plan belongs to (core/plan/plan_fingerprint.h): taken from a
// trace header; the same program started another way matches; another program, other
// arguments, another device count or device model is refused with one line that names the
// difference; device memory totals are not compared.
#include <gtest/gtest.h>

#include "plan/plan_fingerprint.h"

namespace luma::core {
namespace {

RunFingerprint run(std::string exe, std::vector<std::string> args,
                   std::vector<FingerprintDevice> devices = {{0, "NVIDIA H100 80GB HBM3", 85ull << 30}}) {
  return RunFingerprint{std::move(exe), std::move(args), std::move(devices)};
}

TEST(Fingerprint, ComesFromTheTraceHeader) {
  TraceHeader h;
  h.command_line = {"/usr/bin/python3", "train.py", "--steps", "10"};
  h.devices = {{1, 40ull << 30, "B"}, {0, 40ull << 30, "A"}};
  const RunFingerprint f = fingerprint_of(h);
  EXPECT_EQ(f.executable, "/usr/bin/python3");
  EXPECT_EQ(f.arguments, (std::vector<std::string>{"train.py", "--steps", "10"}));
  ASSERT_EQ(f.devices.size(), 2u);
  EXPECT_EQ(f.devices[0].index, 1u);
  EXPECT_EQ(f.devices[0].name, "B");
  EXPECT_EQ(f.devices[0].total_bytes, 40ull << 30);
  EXPECT_TRUE(fingerprint_of(TraceHeader{}).executable.empty());
}

TEST(Fingerprint, TheSameProgramStartedFromElsewhereMatches) {
  EXPECT_TRUE(match_fingerprint(run("./app", {"-n", "3"}), run("/home/me/bin/app", {"-n", "3"})).match);
  EXPECT_TRUE(match_fingerprint(run("app", {}), run("app/", {})).match);
  EXPECT_EQ(executable_base_name("/a/b/c"), "c");
  EXPECT_EQ(executable_base_name("c"), "c");
}

TEST(Fingerprint, AnotherProgramIsRefusedByName) {
  const FingerprintMatch m = match_fingerprint(run("./app", {}), run("./other", {}));
  EXPECT_FALSE(m.match);
  EXPECT_EQ(m.reason, "the plan was made for executable 'app', this is 'other'");
}

TEST(Fingerprint, OtherArgumentsAreRefusedNamingTheFirstDifference) {
  FingerprintMatch m = match_fingerprint(run("app", {"-n", "3"}), run("app", {"-n", "4"}));
  EXPECT_FALSE(m.match);
  EXPECT_EQ(m.reason, "argument 2 differs: the plan has '3', this run '4'");
  m = match_fingerprint(run("app", {"-n"}), run("app", {"-n", "4"}));
  EXPECT_FALSE(m.match);
  EXPECT_EQ(m.reason, "the plan was made with 1 argument(s), this run has 2");
  // A long argument is quoted in part, on one line.
  m = match_fingerprint(run("app", {std::string(500, 'x')}), run("app", {std::string(499, 'x') + "\n"}));
  EXPECT_FALSE(m.match);
  EXPECT_LT(m.reason.size(), 200u);
  EXPECT_EQ(m.reason.find('\n'), std::string::npos);
}

TEST(Fingerprint, OtherDevicesAreRefusedButMemoryTotalsAreNotCompared) {
  const std::vector<FingerprintDevice> two = {{0, "A", 1}, {1, "A", 1}};
  FingerprintMatch m = match_fingerprint(run("app", {}, two), run("app", {}, {{0, "A", 1}}));
  EXPECT_FALSE(m.match);
  EXPECT_EQ(m.reason, "the plan was made with 2 device(s), this run has 1");
  m = match_fingerprint(run("app", {}, two), run("app", {}, {{1, "A", 1}, {0, "B", 1}}));
  EXPECT_FALSE(m.match);
  EXPECT_EQ(m.reason, "device 0 is 'A' in the plan, 'B' here");
  // Listed in another order, other totals: the same devices.
  EXPECT_TRUE(match_fingerprint(run("app", {}, two), run("app", {}, {{1, "A", 7}, {0, "A", 9}})).match);
}

}  // namespace
}  // namespace luma::core
