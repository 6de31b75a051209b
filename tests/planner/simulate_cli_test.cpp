// simulate_cli_test.cpp - `luma simulate` end to end: the built luma program (LUMA_EXE) on
// the shipped torch_train sequence (tests/data/torch_train.rmm.csv.gz, unpacked here) and on
// small logs written here: the JSON and text reports, settings side by side, the fence
// latency on the recorded clock, --min-limit, and bad input and bad options (exit 1 and 2,
// each naming what was wrong).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "trace/trace_writer.h"

namespace {

namespace fs = std::filesystem;

struct LumaRun {
  int code = -1;
  std::string output;  // stdout and stderr
};

LumaRun shell(const std::string& cmd, bool with_stderr = true) {
  LumaRun r;
  FILE* p = popen((cmd + (with_stderr ? " 2>&1" : "")).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

LumaRun luma(const std::string& args, bool with_stderr = true) {
  return shell(std::string(LUMA_EXE) + " " + args, with_stderr);
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("luma-simulate-cli-" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir / name;
}

// The shipped sequence, unpacked once per test program.
fs::path torch_train() {
  const fs::path out = scratch("torch_train.rmm.csv");
  if (!fs::exists(out)) {
    const fs::path gz = fs::path(LUMA_DATA_DIR) / "torch_train.rmm.csv.gz";
    const LumaRun r = shell("gzip -dc '" + gz.string() + "' > '" + out.string() + "'");
    EXPECT_EQ(r.code, 0) << r.output;
  }
  return out;
}

fs::path small_log() {
  const fs::path p = scratch("small.csv");
  std::ofstream(p) << "Thread,Time,Action,Pointer,Size,Stream\n"
                      "1,10:00:00.000000,allocate,0x1000,12582912,0x0\n"
                      "1,10:00:00.000100,free,0x1000,12582912,0x0\n"
                      "1,10:00:00.000200,allocate,0x2000,12582912,0x0\n";
  return p;
}

nlohmann::json json_of(const LumaRun& r) {
  EXPECT_EQ(r.code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

// The placement of 99a7bb6, in settings: 20 MiB shared segments, no max_split_size, no
// release before growth.
const std::string kOldPlacement = "large_segment:20M,max_split_size:18446744073709551615,release_free_segments:false";

TEST(SimulateCli, ReplaysTheTorchTrainSequenceOnThePathsOfItsThreadsAndAttributesEveryByte) {
  const nlohmann::json j =
      json_of(luma("simulate " + torch_train().string() + " --conf " + kOldPlacement + " --json", false));
  EXPECT_EQ(j["format"], "RMM log");
  ASSERT_EQ(j["devices"].size(), 1u);
  const nlohmann::json& d = j["devices"][0];
  EXPECT_EQ(d["allocations"], 30612);
  EXPECT_EQ(d["peak_live_bytes"], 911404800u);
  EXPECT_EQ(d["has_clock"], true);
  const nlohmann::json& run = d["runs"][0];
  EXPECT_EQ(run["conf"], kOldPlacement);
  EXPECT_EQ(run["completed"], true);
  // What libluma.so gives for the same allocations is checked live, not here
  // (tests/integration/simulate_equivalence.py).
  EXPECT_GE(run["peak_reserved_bytes"].get<std::uint64_t>(), d["peak_live_bytes"].get<std::uint64_t>());
  // The log's second Thread (PyTorch's autograd thread) moves the run from reuse at once
  // to the legacy stream's barrier where it first shows.
  const nlohmann::json& paths = run["free_paths"];
  ASSERT_EQ(paths.size(), 2u) << paths.dump();
  EXPECT_EQ(paths[0]["path"], "at-once");
  EXPECT_EQ(paths[0]["from_op"], 0);
  EXPECT_EQ(paths[1]["path"], "legacy");
  EXPECT_GT(paths[1]["from_op"].get<std::uint64_t>(), 0u);
  EXPECT_NE(paths[1]["why"].get<std::string>().find("thread 1276"), std::string::npos) << paths.dump();
  const nlohmann::json& at = run["at_peak"];
  std::uint64_t sum = 0;
  for (const char* k : {"live_requested_bytes", "rounding_bytes", "unsplit_bytes", "pending_bytes",
                        "free_new_segment_rest_bytes", "free_pieces_too_small_bytes",
                        "free_segments_too_small_bytes", "free_other_pool_bytes", "free_fitting_bytes"})
    sum += at[k].get<std::uint64_t>();
  EXPECT_EQ(sum, run["peak_reserved_bytes"].get<std::uint64_t>());
}

TEST(SimulateCli, TheDefaultsOnTorchTrainMeetThePlacementTargets) {
  const nlohmann::json j = json_of(luma("simulate " + torch_train().string() + " --json", false));
  const nlohmann::json& run = j["devices"][0]["runs"][0];
  EXPECT_EQ(run["conf"], "default");
  EXPECT_LE(run["peak_reserved_over_peak_live"].get<double>(), 1.20);  // docs/placement.md has the figures
  EXPECT_LE(run["driver_allocations"].get<double>(), 0.02 * 30612);
}

TEST(SimulateCli, SettingsSideBySideInText) {
  const LumaRun r = luma("simulate " + torch_train().string() + " --conf large_segment:64M --conf max_split_size:64M");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("large_segment:64M"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("max_split_size:64M"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak live 911,404,800 B"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("free: segments smaller than it"), std::string::npos) << r.output;
}

TEST(SimulateCli, MinLimitScansLimitsFromPeakLiveAndMapsWhichComplete) {
  const nlohmann::json j =
      json_of(luma("simulate " + torch_train().string() + " --min-limit --limit-step 0.02 --json", false));
  const nlohmann::json& run = j["devices"][0]["runs"][0];
  const nlohmann::json& scan = run["limit_scan"];
  const auto live = j["devices"][0]["peak_live_bytes"].get<std::uint64_t>();
  const nlohmann::json& points = scan["points"];
  ASSERT_GE(points.size(), 2u);
  EXPECT_EQ(points.front()["limit_bytes"].get<std::uint64_t>(), live);
  EXPECT_EQ(points.back()["limit_bytes"], scan["top_bytes"]);
  EXPECT_EQ(scan["step_bytes"].get<std::uint64_t>(), static_cast<std::uint64_t>(0.02 * double(live)));
  EXPECT_EQ(scan["simulations"].get<std::size_t>(), points.size() + 1);
  EXPECT_TRUE(scan["top_is_unlimited"].get<bool>());
  EXPECT_GE(scan["top_bytes"].get<std::uint64_t>(), 2 * scan["unlimited_peak_bytes"].get<std::uint64_t>());
  const auto bound = scan["bound_bytes"].get<std::uint64_t>();
  ASSERT_NE(bound, 0u);
  EXPECT_LE(scan["least_completing_bytes"].get<std::uint64_t>(), bound);
  for (const nlohmann::json& p : points) {  // X: every limit tried from it up completes
    if (p["limit_bytes"].get<std::uint64_t>() >= bound) {
      EXPECT_TRUE(p["completes"].get<bool>()) << p.dump();
    }
  }
  EXPECT_FALSE(points.front()["completes"].get<bool>());  // at peak live only a perfect placement fits
  const double x = scan["bound_over_peak_live"].get<double>();
  EXPECT_GT(x, 1.0);
  EXPECT_LE(x, run["peak_reserved_over_peak_live"].get<double>());

  const LumaRun text = luma("simulate " + torch_train().string() + " --min-limit --limit-step 0.02");
  ASSERT_EQ(text.code, 0) << text.output;
  const std::size_t at = text.output.find("memory_limit from which all complete");
  ASSERT_NE(at, std::string::npos) << text.output;
  char value[32];
  std::snprintf(value, sizeof value, "%.3f x\n", x);
  EXPECT_EQ(text.output.find(value, at), text.output.find('\n', at) - (std::strlen(value) - 1)) << text.output;
  EXPECT_NE(text.output.find("memory_limit map (default)"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("    1.000 x  ."), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("runs out at (x peak live): 1.000"), std::string::npos) << text.output;
}

TEST(SimulateCli, ALimitStepOutsideItsRangeIsAUsageError) {
  for (const char* step : {"0", "-0.01", "2", "abc"}) {
    const LumaRun r = luma("simulate " + torch_train().string() + " --min-limit --limit-step " + step);
    EXPECT_EQ(r.code, 2) << step << ": " << r.output;
    EXPECT_NE(r.output.find("--limit-step"), std::string::npos) << step << ": " << r.output;
  }
}

TEST(SimulateCli, AFenceLatencyOnTheRecordedClockMakesTheReuseWaitOnTheFencedPath) {
  const std::string log = small_log().string();
  const nlohmann::json at_once = json_of(luma("simulate " + log + " --fence-latency 1ms --json", false));
  // One thread, the legacy stream: the library reuses at once, and so does its model.
  EXPECT_EQ(at_once["devices"][0]["runs"][0]["free_paths"][0]["path"], "at-once");
  EXPECT_EQ(at_once["devices"][0]["runs"][0]["fence_waits"], 0);
  EXPECT_EQ(at_once["devices"][0]["runs"][0]["driver_allocations"], 1);
  const nlohmann::json late =
      json_of(luma("simulate " + log + " --free-path fenced --fence-latency 1ms --json", false));
  EXPECT_EQ(late["fence_latency_ns"], 1000000);
  EXPECT_EQ(late["devices"][0]["runs"][0]["free_paths"][0]["path"], "fenced");
  EXPECT_EQ(late["devices"][0]["runs"][0]["free_paths"][0]["why"], "--free-path");
  EXPECT_EQ(late["devices"][0]["runs"][0]["fence_waits"], 1);
  EXPECT_EQ(late["devices"][0]["runs"][0]["driver_allocations"], 1);
  // The legacy path's fences are barriers: no latency applies.
  const nlohmann::json legacy =
      json_of(luma("simulate " + log + " --free-path legacy --fence-latency 1ms --json", false));
  EXPECT_EQ(legacy["devices"][0]["runs"][0]["fence_waits"], 0);
}

// The path each recording shows, decided by the library's rule (core/free_path), and said.
TEST(SimulateCli, TheFreePathFollowsTheRecordingsThreadsAndStreams) {
  const fs::path threads = scratch("threads.csv");
  std::ofstream(threads) << "Thread,Time,Action,Pointer,Size,Stream\n"
                            "7,10:00:00.000000,allocate,0x1000,4096,0x0\n"
                            "7,10:00:00.000100,free,0x1000,4096,0x0\n"
                            "9,10:00:00.000200,allocate,0x2000,4096,0x2\n";
  nlohmann::json j = json_of(luma("simulate " + threads.string() + " --json", false));
  nlohmann::json paths = j["devices"][0]["runs"][0]["free_paths"];
  ASSERT_EQ(paths.size(), 2u) << paths.dump();
  EXPECT_EQ(paths[1]["path"], "legacy");
  EXPECT_EQ(paths[1]["from_op"], 2);
  EXPECT_NE(paths[1]["why"].get<std::string>().find("a second thread"), std::string::npos) << paths.dump();

  const fs::path stream = scratch("stream.csv");
  std::ofstream(stream) << "Thread,Time,Action,Pointer,Size,Stream\n"
                           "7,10:00:00.000000,allocate,0x1000,4096,0x0\n"
                           "7,10:00:00.000100,allocate,0x2000,4096,0x7f0012340000\n";
  j = json_of(luma("simulate " + stream.string() + " --json", false));
  paths = j["devices"][0]["runs"][0]["free_paths"];
  ASSERT_EQ(paths.size(), 2u) << paths.dump();
  EXPECT_EQ(paths[1]["path"], "fenced");
  EXPECT_EQ(paths[1]["from_op"], 1);
  EXPECT_NE(paths[1]["why"].get<std::string>().find("0x7f0012340000"), std::string::npos) << paths.dump();

  // stream_ordered_reuse:false: fenced from the start, whatever the recording.
  j = json_of(luma("simulate " + threads.string() + " --conf stream_ordered_reuse:false --json", false));
  paths = j["devices"][0]["runs"][0]["free_paths"];
  ASSERT_EQ(paths.size(), 1u) << paths.dump();
  EXPECT_EQ(paths[0]["path"], "fenced");

  // A planner CSV shows one thread.
  const fs::path csv = scratch("one.csv");
  std::ofstream(csv) << "id,lower,upper,size\na,0,5,100\n";
  j = json_of(luma("simulate " + csv.string() + " --json", false));
  EXPECT_EQ(j["devices"][0]["runs"][0]["free_paths"].size(), 1u);
  EXPECT_EQ(j["devices"][0]["runs"][0]["free_paths"][0]["path"], "at-once");

  const LumaRun text = luma("simulate " + threads.string());
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("free path: at-once from the start"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("then legacy from op 2 (a second thread uses CUDA (thread 9"), std::string::npos)
      << text.output;
}

TEST(SimulateCli, BadOptionsAreUsageErrorsNamingWhatWasWrong) {
  const std::string log = small_log().string();
  LumaRun r = luma("simulate " + log + " --conf no_such_key:1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no_such_key"), std::string::npos) << r.output;
  r = luma("simulate " + log + " --fence-latency 5parsecs");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("5parsecs"), std::string::npos) << r.output;
  r = luma("simulate " + log + " --free-path sideways");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("sideways"), std::string::npos) << r.output;
  r = luma("simulate " + log + " --conf memory_fraction:0.5");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("memory_limit"), std::string::npos) << r.output;
  const fs::path csv = scratch("plan.csv");
  std::ofstream(csv) << "id,lower,upper,size\na,0,5,100\n";
  r = luma("simulate " + csv.string() + " --fence-latency 1us");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no clock"), std::string::npos) << r.output;
}

// --repeat: a number of copies from 1 up; a trace whose frees name blocks it never saw
// allocated (a recording begun late) cannot be repeated as recorded: refused, naming why.
TEST(SimulateCli, RepeatTakesAWholeNumberOfCopiesOfARunWhoseFreesMatch) {
  const std::string log = small_log().string();
  for (const char* bad : {"0", "abc", "-2", "1.5", "3x"}) {
    const LumaRun r = luma("simulate " + log + " --repeat " + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find(std::string("--repeat '") + bad + "'"), std::string::npos) << r.output;
  }
  const fs::path trace = scratch("late.trace");
  {
    luma::core::TraceHeader h;
    h.luma_version = "test";
    h.pid = 1;
    h.host = "test";
    h.devices.push_back({0, 1ull << 30, "test device"});
    std::string error;
    auto w = luma::core::TraceWriter::open(trace.string(), h, &error);
    ASSERT_NE(w, nullptr) << error;
    using luma::core::EventKind;
    const auto entry = luma::core::trace::EntryPoint::unknown;
    w->write({EventKind::alloc, 0, 0x10000000, 1 << 20, 1 << 20}, 1, 0, entry, 1);
    w->write({EventKind::free_requested, 0, 0x20000000, 0, 0}, 1, 0, entry, 2);  // allocated before the trace
    w->write({EventKind::free_requested, 0, 0x10000000, 1 << 20, 1 << 20}, 1, 0, entry, 3);
    ASSERT_TRUE(w->close());
  }
  LumaRun r = luma("simulate " + trace.string());
  EXPECT_EQ(r.code, 0) << r.output;  // one copy: the free is left out, as always
  r = luma("simulate " + trace.string() + " --repeat 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("1 frees of blocks the recording never showed allocated"), std::string::npos) << r.output;
  // The run itself repeats: the warm copy makes the first copy's allocation again.
  const nlohmann::json j = nlohmann::json::parse(luma("simulate " + log + " --repeat 3 --json", false).output);
  const nlohmann::json& run = j["devices"][0]["runs"][0];
  EXPECT_EQ(j["repeat"], 3);
  EXPECT_EQ(run["warm_copies"]["copies"], 2);
  EXPECT_EQ(run["warm_copies"]["allocations"].get<int>(), 2 * run["first_copy"]["allocations"].get<int>());
  EXPECT_EQ(run["allocations_served"].get<int>(), 3 * run["first_copy"]["allocations"].get<int>());
}

TEST(SimulateCli, BadInputIsAFailureNamingTheFile) {
  LumaRun r = luma("simulate " + scratch("missing.csv").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("missing.csv"), std::string::npos) << r.output;
  const fs::path bad = scratch("bad.csv");
  std::ofstream(bad) << "Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.0,free,0x10,5,0x0\n";
  r = luma("simulate " + bad.string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("bad.csv:2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unknown pointer"), std::string::npos) << r.output;
}

}  // namespace
