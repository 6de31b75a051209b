// replay_cli_test.cpp - the luma program end to end for plan replay: `luma plan --periodic`
// on a trace captured here and on a planner CSV made here (period found, plan file with
// fingerprint, requested bytes and layout, replayed ten times longer), on input without a
// period (one line, exit 1), and `luma run --plan` (LUMA_PLAN given to the program as an
// absolute path; a plan for another command, a malformed plan or one without fingerprint
// refused with one line, exit 1).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "plan/plan_file.h"
#include "replay/replay_stats_format.h"
#include "replay_test_util.h"
#include "sample_program.h"

namespace luma::core {
namespace {

namespace fs = std::filesystem;

struct LumaRun {
  int code = -1;
  std::string output;  // stdout and stderr
};

LumaRun shell(const std::string& cmd) {
  LumaRun r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

LumaRun luma(const std::string& args) { return shell(std::string(LUMA_EXE) + " " + args); }

fs::path scratch() {
  fs::path dir = fs::temp_directory_path() / ("luma-replay-cli-" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir;
}

std::size_t lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n' ? 1 : 0;
  return n;
}

TEST(ReplayCli, PlanPeriodicOnACapturedTraceReplaysTenTimesLonger) {
  const fs::path trace = scratch() / "sample.trace";
  const fs::path json = scratch() / "periodic.json";
  testing::capture_sample(trace.string(), 2, 5, {"./sample", "--steps", "5"});
  const LumaRun r = luma("plan " + trace.string() + " --periodic --strategy greedy -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("device 0: period of 3 allocations after a warm-up of 3 (5 full periods captured"),
            std::string::npos)
      << r.output;
  const PlanFile plan = read_plan_file(json.string());
  ASSERT_TRUE(plan.fingerprint);
  EXPECT_EQ(plan.fingerprint->executable, "./sample");
  EXPECT_EQ(plan.fingerprint->arguments, (std::vector<std::string>{"--steps", "5"}));
  ASSERT_EQ(plan.fingerprint->devices.size(), 2u);
  ASSERT_EQ(plan.devices.size(), 2u);
  for (const DevicePlanFile& d : plan.devices) {
    ASSERT_TRUE(d.periodic);
    EXPECT_EQ(d.periodic->warmup, 3u);
    EXPECT_EQ(d.periodic->period, 3u);
    EXPECT_EQ(d.alignment, 256u);
    ASSERT_EQ(d.allocations.size(), 6u);
    EXPECT_EQ(d.allocations[3].requested, 50000u);
    EXPECT_EQ(d.allocations[3].size, 50176u);
  }
  testing::HostMemory plain(2, nullptr);
  const std::vector<std::uint64_t> expected = testing::run_sample_program(plain, 2, 50);
  testing::HostMemory replay(2, &plan);
  EXPECT_EQ(testing::run_sample_program(replay, 2, 50), expected);
  for (int d = 0; d < 2; ++d) {
    const ReplayStats s = replay.allocator(d).replay_stats();
    EXPECT_TRUE(s.followed()) << describe_divergence(s.first_divergence);
    EXPECT_EQ(s.iterations, 50u);
    EXPECT_EQ(s.real_allocations, 1u);
  }
}

TEST(ReplayCli, APlainPlanOfATraceCarriesWhatReplayNeeds) {
  const fs::path trace = scratch() / "plain.trace";
  const fs::path json = scratch() / "plain.json";
  testing::capture_sample(trace.string(), 1, 3, {"./sample", "--steps", "3"});
  const LumaRun r = luma("plan " + trace.string() + " --strategy greedy -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const PlanFile plan = read_plan_file(json.string());
  ASSERT_TRUE(plan.fingerprint);
  ASSERT_EQ(plan.devices.size(), 1u);
  EXPECT_FALSE(plan.devices[0].periodic);
  EXPECT_EQ(plan.devices[0].allocations.size(), 12u);
  EXPECT_EQ(plan.devices[0].allocations[0].requested, 100000u);
  testing::HostMemory replay(1, &plan);
  testing::HostMemory plain(1, nullptr);
  EXPECT_EQ(testing::run_sample_program(replay, 1, 3), testing::run_sample_program(plain, 1, 3));
  EXPECT_EQ(replay.allocator(0).replay_stats().served, 12u);
}

// Fence-aware plans (docs/planner.md): --fence-slack N is recorded in the plan file and the
// plan still replays the program; --fence-aware off gives the plain plan; bad values are
// usage errors.
TEST(ReplayCli, FenceSlackIsRecordedAndTheOptionsAreChecked) {
  const fs::path trace = scratch() / "slack.trace";
  const fs::path json = scratch() / "slack.json";
  testing::capture_sample(trace.string(), 1, 5, {"./sample", "--steps", "5"});
  LumaRun r = luma("plan " + trace.string() + " --periodic --fence-slack 2 --strategy greedy -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fence-aware: freed bytes kept 2 allocations"), std::string::npos) << r.output;
  PlanFile plan = read_plan_file(json.string());
  ASSERT_TRUE(plan.devices[0].fence_slack);
  EXPECT_EQ(plan.devices[0].fence_slack->allocations, 2u);
  EXPECT_GT(plan.devices[0].fence_slack->run_lower_bound, 0u);
  EXPECT_GE(plan.devices[0].arena, plan.devices[0].fence_slack->run_lower_bound);
  testing::HostMemory plain(1, nullptr);
  const std::vector<std::uint64_t> expected = testing::run_sample_program(plain, 1, 20);
  testing::HostMemory replay(1, &plan);
  EXPECT_EQ(testing::run_sample_program(replay, 1, 20), expected);
  EXPECT_TRUE(replay.allocator(0).replay_stats().followed());

  r = luma("plan " + trace.string() + " --periodic --fence-aware off --strategy greedy -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("fence-aware"), std::string::npos) << r.output;
  EXPECT_FALSE(read_plan_file(json.string()).devices[0].fence_slack);
  for (const char* bad : {"--fence-slack 0", "--fence-slack x", "--fence-slack -1", "--fence-aware maybe"})
    EXPECT_EQ(luma("plan " + trace.string() + " " + bad).code, 2) << bad;
}

// A program whose every free is followed by an allocation of the same size at once: no
// slack fits (each would double the arena), for every free or selectively, and luma plan
// says that both were tried before planning without.
TEST(ReplayCli, WhenNoSlackFitsThePlanSaysWhatWasTried) {
  const fs::path trace = scratch() / "noslack.trace";
  {
    std::string error;
    auto writer = TraceWriter::open(trace.string(), testing::sample_header(1, {"./one-buffer"}), &error);
    ASSERT_NE(writer, nullptr) << error;
    testing::SteadyContext context;
    TraceSink sink(*writer, context);
    {
      testing::HostMemory memory(1, nullptr, &sink);
      for (int i = 0; i < 20; ++i) memory.release(0, memory.alloc(0, 1 << 20));
    }
    ASSERT_TRUE(writer->close());
  }
  const fs::path json = scratch() / "noslack.json";
  const LumaRun r = luma("plan " + trace.string() + " --strategy greedy -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fence-aware: no slack of 1..4 allocations for every free, nor of 1..16 for the frees "
                          "where it costs at most 1/64 of the peak keeps the arena within 1.10 x the lower bound; "
                          "planned without"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(read_plan_file(json.string()).devices[0].fence_slack);
}

// Warm-up: three buffers kept to the end; then 20 steps of five allocations, one of them
// live across the step boundary (the planner CSV MiniMalloc reads).
std::string periodic_csv() {
  std::string csv = "id,lower,upper,size\n";
  int id = 0;
  std::uint64_t t = 0;
  const std::uint64_t end = 3 + 20 * 5 + 3;
  for (int w = 0; w < 3; ++w, ++t) csv += std::to_string(id++) + "," + std::to_string(t) + "," + std::to_string(end) + "," + std::to_string(1024 * (w + 1)) + "\n";
  const int spec[5][3] = {{0, 5, 4096}, {1, 3, 512}, {2, 4, 2048}, {3, 7, 1024}, {4, 6, 256}};
  for (int it = 0; it < 20; ++it, t += 5)
    for (const auto& s : spec)
      csv += std::to_string(id++) + "," + std::to_string(t + s[0]) + "," + std::to_string(std::min(t + s[1], end)) + "," + std::to_string(s[2]) + "\n";
  return csv;
}

TEST(ReplayCli, PlanPeriodicOnAPlannerCsv) {
  const fs::path csv = scratch() / "periodic.csv";
  const fs::path json = scratch() / "csv.json";
  std::ofstream(csv) << periodic_csv();
  const LumaRun r = luma("plan " + csv.string() + " --periodic --strategy best --time-limit 0.2 -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("period of 5 allocations after a warm-up of 3"), std::string::npos) << r.output;
  // Read with a JSON reader of its own: a CSV's plan has alignment 1 and is no replay plan.
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"period\": 5"), std::string::npos);
  EXPECT_NE(text.find("\"warmup\": 3"), std::string::npos);
  EXPECT_EQ(text.find("\"fingerprint\""), std::string::npos);
  EXPECT_THROW(read_plan_file(json.string()), PlanFileError);
}

TEST(ReplayCli, PlanPeriodicWithoutAPeriodIsOneLineAndExitOne) {
  const fs::path csv = scratch() / "irregular.csv";
  {
    std::ofstream out(csv);
    out << "id,lower,upper,size\n";
    for (int k = 0; k < 60; ++k) out << k << "," << k << "," << k + 1 + (k * k) % 5 << "," << 256 * (1 + (k * 7) % 13) << "\n";
  }
  const LumaRun r = luma("plan " + csv.string() + " --periodic");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("device 0: no repeating period"), std::string::npos) << r.output;
  // Without --periodic the same input plans fine.
  EXPECT_EQ(luma("plan " + csv.string() + " --strategy greedy").code, 0);
}

// A plan whose fingerprint is the command `env` (no arguments).
fs::path env_plan(bool with_fingerprint) {
  PlanFile p;
  p.input = "test";
  if (with_fingerprint) p.fingerprint = RunFingerprint{"env", {}, {}};
  p.devices.push_back(testing::manual_plan({{256, 256, 0}}));
  const fs::path path = scratch() / (with_fingerprint ? "env.json" : "nofp.json");
  write_plan_file(path.string(), p);
  return path;
}

TEST(ReplayCli, RunPlanGivesTheProgramLumaPlanAsAnAbsolutePath) {
  if (!LUMA_SHIM_BUILT) GTEST_SKIP() << "libluma.so is not built";
  const fs::path plan = env_plan(true);
  const LumaRun r = shell("cd " + scratch().string() + " && " + LUMA_EXE + " run --plan " +
                          plan.filename().string() + " --trace " + (scratch() / "env.trace").string() + " -- env");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("LUMA_PLAN=" + plan.string() + "\n"), std::string::npos) << r.output;
}

TEST(ReplayCli, RunPlanRefusesAPlanForAnotherCommand) {
  if (!LUMA_SHIM_BUILT) GTEST_SKIP() << "libluma.so is not built";
  const fs::path plan = env_plan(true);
  LumaRun r = luma("run --plan " + plan.string() + " -- /bin/true");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("refused: the plan was made for executable 'env', this is 'true'"), std::string::npos)
      << r.output;
  r = luma("run --plan " + plan.string() + " -- env -i");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("refused: the plan was made with 0 argument(s), this run has 1"), std::string::npos)
      << r.output;

  r = luma("run --plan " + env_plan(false).string() + " -- env");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("the plan has no fingerprint"), std::string::npos) << r.output;

  const fs::path bad = scratch() / "bad.json";
  std::ofstream(bad) << "{\"version\": 1, \"devices\": [";
  r = luma("run --plan " + bad.string() + " -- env");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find(bad.string() + ": not valid JSON"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace luma::core
