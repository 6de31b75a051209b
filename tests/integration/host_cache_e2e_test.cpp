// host_cache_e2e_test.cpp - the pinned host cache through LD_PRELOAD on the stand-in
// driver (host_cache_prog.cpp): blocks reused after a free, flag sets kept apart with the
// driver's answers right, the bound, the off switch, pointers luma did not hand out
// forwarded, and a block whose asynchronous copy is still queued (in any context luma
// serves) never handed out again.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <cstdio>

#include "driver/cuda_abi.h"
#include "subprocess.h"
#include "trace/trace_reader.h"

namespace luma::integration {
namespace {

using nlohmann::json;

struct ProgRun {
  Result result;
  std::map<std::string, std::string> values;  // the program's key=value lines
  json stats;                                 // luma's statistics (null without luma)
  long long value(const std::string& key) const {
    auto it = values.find(key);
    return it == values.end() ? -1 : std::stoll(it->second);
  }
};

std::string describe(const Result& r) {
  return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.signal) +
         "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

// The program with libluma.so preloaded (luma = true) or on the stand-in alone.
ProgRun run_prog(const std::vector<std::string>& args, bool luma, const Env& extra = {}) {
  const std::string dir = temp_dir();
  Env env = clean_env({{"LD_LIBRARY_PATH", setting("LUMA_IT_FAKE_DIR")}});
  if (luma) {
    env["LD_PRELOAD"] = setting("LUMA_IT_LIB");
    env["LUMA_STATS"] = "json";
    env["LUMA_STATS_FILE"] = dir + "/stats.json";
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> argv{setting("LUMA_IT_HOST_CACHE_PROG")};
  argv.insert(argv.end(), args.begin(), args.end());
  ProgRun r;
  r.result = run(argv, env);
  std::istringstream lines(r.result.out);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) r.values[line.substr(0, eq)] = line.substr(eq + 1);
  }
  const std::string text = read_file(dir + "/stats.json");
  if (!text.empty()) r.stats = json::parse(text, nullptr, false);
  std::remove((dir + "/stats.json").c_str());
  rmdir(dir.c_str());
  return r;
}

TEST(HostCache, BlocksAreReusedAfterAFreeWhereTheStandInAllocatesEachTime) {
  ProgRun alone = run_prog({"reuse", "20"}, false);
  ASSERT_EQ(alone.result.exit_code, 0) << describe(alone.result);
  EXPECT_EQ(alone.value("driver_allocs"), 20) << alone.result.out;
  ProgRun luma = run_prog({"reuse", "20"}, true);
  ASSERT_EQ(luma.result.exit_code, 0) << describe(luma.result);
  EXPECT_EQ(luma.value("driver_allocs"), 1) << luma.result.out;
  EXPECT_EQ(luma.value("driver_frees"), 0) << "held by the cache at exit";
  EXPECT_EQ(luma.value("repeats"), 19 * 20 / 2) << "every round got the same block";
  ASSERT_TRUE(luma.stats.is_object()) << describe(luma.result);
  const json& h = luma.stats["host_cache"];
  EXPECT_EQ(h["hits"], 19) << h.dump();
  EXPECT_EQ(h["misses"], 1) << h.dump();
  EXPECT_EQ(h["held_bytes"], (1 << 20) + 4096) << "rounded to a page, not a power of two";
  // Counted as served, not as a forwarded path.
  for (const json& p : luma.stats["forwarded_allocations"])
    if (p["path"].get<std::string>().rfind("pinned host", 0) == 0) {
      EXPECT_EQ(p["alloc_calls"], 0) << p.dump();
    }
}

// Pinned memory the cache serves is in the trace too (forwarded_call records under the
// path "pinned_host_cache"), so a program whose only allocations are pinned host memory
// gets a trace; those the cache leaves to the driver keep their own path.
TEST(HostCache, CallsTheCacheServesAreRecordedInTheTrace) {
  const std::string dir = temp_dir();
  const std::string trace = dir + "/h.trace";
  ProgRun r = run_prog({"reuse", "5"}, true, {{"LUMA_TRACE", trace}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  core::TraceReader reader(trace);
  std::map<std::string, int> calls;
  std::uint64_t bytes = 0;
  reader.set_forwarded_handler([&](const core::trace::ForwardedCall& c) {
    ++calls[std::string(core::trace::forwarded_entry_name(c.entry)) + "/" + std::string(c.path)];
    if (c.op == core::trace::ForwardedOp::alloc) {
      bytes += c.bytes;
      EXPECT_NE(c.address, 0u);
    }
  });
  reader.read({});
  int host_allocs = 0;
  for (const auto& [k, n] : calls)
    if (k.rfind("cuMemHostAlloc/", 0) == 0 || k.rfind("cuMemAllocHost/", 0) == 0) {
      EXPECT_EQ(k.substr(k.find('/') + 1), "pinned_host_cache") << k;
      host_allocs += n;
    }
  EXPECT_EQ(host_allocs, 5);
  EXPECT_EQ(calls["cuMemFreeHost/pinned_host_cache"], 5);
  EXPECT_EQ(bytes, 5u * ((1u << 20) + 1)) << "the bytes asked for";
  std::remove(trace.c_str());
  rmdir(dir.c_str());
}

TEST(HostCache, OffSwitchForwardsEveryCall) {
  ProgRun r = run_prog({"reuse", "5"}, true, {{"LUMA_CONF", "host_cache:off"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.value("driver_allocs"), 5) << r.result.out;
  EXPECT_EQ(r.value("driver_frees"), 5) << r.result.out;
  ASSERT_TRUE(r.stats.is_object()) << describe(r.result);
  EXPECT_FALSE(r.stats.contains("host_cache")) << r.stats.dump();
  bool counted = false;
  for (const json& p : r.stats["forwarded_allocations"])
    if (p["path"].get<std::string>().rfind("pinned host", 0) == 0) {
      EXPECT_EQ(p["alloc_calls"], 5) << p.dump();
      EXPECT_EQ(p["free_calls"], 5) << p.dump();
      counted = true;
    }
  EXPECT_TRUE(counted) << r.stats.dump();
}

TEST(HostCache, FlagSetsArePoolsAndTheDriverAnswersForTheBlock) {
  for (bool luma : {false, true}) {
    ProgRun r = run_prog({"flags"}, luma);
    ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
    EXPECT_EQ(r.value("plain_flags"), 0) << r.result.out;
    EXPECT_EQ(r.value("mapped_flags"), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)
        << r.result.out;
    EXPECT_EQ(r.value("device_pointer_ok"), 1) << r.result.out;
    EXPECT_EQ(r.value("bad_flags"), CUDA_ERROR_INVALID_VALUE) << r.result.out;
    EXPECT_EQ(r.value("zero_size"), CUDA_ERROR_INVALID_VALUE) << r.result.out;
    if (luma) {
      EXPECT_EQ(r.value("plain_is_first"), 0) << "a DEVICEMAP block never serves flags 0";
      EXPECT_EQ(r.value("mapped_is_first"), 1) << "the same flags and size: reused";
      EXPECT_EQ(r.value("driver_allocs"), 2) << r.result.out;
    } else {
      EXPECT_EQ(r.value("driver_allocs"), 3) << r.result.out;
    }
  }
}

TEST(HostCache, BoundEvictsToTheDriver) {
  ProgRun r = run_prog({"bound"}, true, {{"LUMA_CONF", "host_cache_limit:2M"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.value("after_free_driver_frees"), 2) << "4 MiB freed, 2 MiB may stay";
  EXPECT_EQ(r.value("reused"), 2) << r.result.out;
  EXPECT_EQ(r.value("driver_allocs"), 6) << r.result.out;
  ASSERT_TRUE(r.stats.is_object()) << describe(r.result);
  EXPECT_EQ(r.stats["host_cache"]["evictions"], 4) << r.stats.dump();  // 2, then 2 more
  EXPECT_EQ(r.stats["host_cache"]["limit"], 2 << 20) << r.stats.dump();
  EXPECT_LE(r.stats["host_cache"]["peak_held_bytes"].get<long long>(), 2 << 20);
}

TEST(HostCache, PointersLumaDidNotHandOutAreTheDriversToAnswer) {
  for (bool luma : {false, true}) {
    ProgRun r = run_prog({"foreign"}, luma);
    ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
    EXPECT_EQ(r.value("foreign_free"), CUDA_SUCCESS) << r.result.out;
    EXPECT_EQ(r.value("stack_free"), CUDA_ERROR_INVALID_VALUE) << r.result.out;
    EXPECT_EQ(r.value("second_free"), CUDA_ERROR_INVALID_VALUE) << r.result.out;
    EXPECT_EQ(r.value("driver_live"), 0 + (luma ? 1 : 0)) << "luma holds its freed block";
  }
}

// The copy is held back by the stand-in's gate, so "still pending" needs no timing. Without
// luma the stand-in's cuMemFreeHost would wait for it (the gate is closed: for ever), so
// only luma's run is made.
TEST(HostCache, BlockWithAPendingCopyIsNotReusedUntilItCompletes) {
  for (const char* stream : {"legacy", "nonblocking"}) {
    ProgRun r = run_prog({"pending", stream}, true);
    ASSERT_EQ(r.result.exit_code, 0) << stream << "\n" << describe(r.result);
    EXPECT_EQ(r.value("reused_while_pending"), 0) << stream;
    EXPECT_EQ(r.value("copied_bytes_wrong"), 0) << stream << ": the copy read another's bytes";
    EXPECT_EQ(r.value("reused_after"), 1) << stream;
    ASSERT_TRUE(r.stats.is_object()) << describe(r.result);
    EXPECT_GE(r.stats["host_cache"]["fenced_skips"].get<long long>(), 1) << r.stats.dump();
  }
}

// A fence covers every context luma serves, not only the one current at the free: a
// PORTABLE block with a copy queued in a second context is not handed out while it is
// pending there. A context destroyed takes its part of the fences with it: the block freed
// while it had work is handed out again after.
TEST(HostCache, BlockWithACopyPendingInAnotherContextWaitsForItAndADestroyedContextLetsGo) {
  ProgRun r = run_prog({"contexts"}, true);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.value("reused_while_pending"), 0) << r.result.out;
  EXPECT_EQ(r.value("copied_bytes_wrong"), 0) << r.result.out;
  EXPECT_EQ(r.value("reused_after_destroy"), 1) << r.result.out;
  ASSERT_TRUE(r.stats.is_object()) << describe(r.result);
  EXPECT_GE(r.stats["host_cache"]["fenced_skips"].get<long long>(), 1) << r.stats.dump();
}

// Threads allocating and freeing at once: no block is ever handed to two of them (each
// fills its block with its own byte and checks it), and the cache serves most requests.
TEST(HostCache, ThreadsNeverShareABlock) {
  ProgRun r = run_prog({"threads", "4", "200"}, true);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.value("corrupt"), 0) << r.result.out;
  ASSERT_TRUE(r.stats.is_object()) << describe(r.result);
  const json& h = r.stats["host_cache"];
  EXPECT_EQ(h["hits"].get<long long>() + h["misses"].get<long long>(), 800) << h.dump();
  EXPECT_EQ(h["live_blocks"], 0) << h.dump();
}

// A free while a global-mode capture is underway: luma makes no call the capture forbids,
// so the capture ends valid, and the block is reused once the work after it is done. (The
// stand-in alone refuses the free as an unsafe call and invalidates the capture: the
// cache's free needs no driver call, docs/architecture.md.) Not asserted here: that no
// event joins the capture (the stand-in accepts an event recorded on a capturing stream
// and has no query of a graph's nodes).
TEST(HostCache, FreeDuringACaptureLeavesItValidAndTheBlockIsReusedAfter) {
  ProgRun r = run_prog({"capture"}, true);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.value("free_in_capture"), CUDA_SUCCESS) << r.result.out;
  EXPECT_EQ(r.value("end_capture"), CUDA_SUCCESS) << r.result.out;
  EXPECT_EQ(r.value("reused_after_capture"), 1) << r.result.out;
  ProgRun alone = run_prog({"capture"}, false);
  ASSERT_EQ(alone.result.exit_code, 0) << describe(alone.result);
  EXPECT_EQ(alone.value("free_in_capture"), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) << alone.result.out;
  EXPECT_EQ(alone.value("end_capture"), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) << alone.result.out;
}

}  // namespace
}  // namespace luma::integration
