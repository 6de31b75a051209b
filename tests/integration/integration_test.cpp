// integration_test.cpp - libluma.so preloaded into the test programs as a user would run
// it (LD_PRELOAD, the stand-in driver and runtime on LD_LIBRARY_PATH), asserting on the
// stand-in's counters of real allocations (LUMA_FAKE_COUNTERS) and on luma's own JSON
// statistics (LUMA_STATS=json, LUMA_STATS_FILE). Paths come from meson as LUMA_IT_*.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "driver/entry_points.h"
#include "subprocess.h"

namespace luma::integration {
namespace {

using nlohmann::json;

const char* const kStatsHeader = "luma: memory statistics at exit";

struct Paths {
  std::string lib = setting("LUMA_IT_LIB");
  std::string fake_dir = setting("LUMA_IT_FAKE_DIR");
  std::string probe = setting("LUMA_IT_PROBE");
  std::string host_spdlog = setting("LUMA_IT_HOST_SPDLOG");
  std::string nm = setting("LUMA_IT_NM");
  std::string ldd = setting("LUMA_IT_LDD");
  std::string rtld_next_prog = setting("LUMA_IT_RTLD_NEXT_PROG");
  std::string prog(const std::string& flavour) const {
    std::string name = "LUMA_IT_PROG_" + flavour;
    return setting(name.c_str());
  }
};

const Paths& paths() {
  static const Paths p;
  return p;
}

// One run of a program under luma, with the stand-in's counters and luma's JSON stats.
struct LumaRun {
  Result result;
  json stats;     // luma's statistics (null when none were written)
  json counters;  // the stand-in's counters (null when none were written)
};

Env luma_env(const Env& extra = {}) {
  Env e = clean_env({{"LD_PRELOAD", paths().lib}, {"LD_LIBRARY_PATH", paths().fake_dir}});
  for (const auto& [k, v] : extra) e[k] = v;
  return e;
}

json parse_or_null(const std::string& text) {
  if (text.empty()) return nullptr;
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// argv (the program first) under luma, with its statistics and the stand-in's counters.
LumaRun run_under_luma_argv(const std::vector<std::string>& argv, const Env& extra = {}) {
  std::string dir = temp_dir();
  Env env = luma_env({{"LUMA_STATS", "json"},
                      {"LUMA_STATS_FILE", dir + "/stats.json"},
                      {"LUMA_FAKE_COUNTERS", dir + "/counters.json"}});
  for (const auto& [k, v] : extra) env[k] = v;
  LumaRun r;
  r.result = run(argv, env);
  r.stats = parse_or_null(read_file(dir + "/stats.json"));
  r.counters = parse_or_null(read_file(dir + "/counters.json"));
  std::remove((dir + "/stats.json").c_str());
  std::remove((dir + "/counters.json").c_str());
  rmdir(dir.c_str());
  return r;
}

LumaRun run_under_luma(const std::string& flavour, const std::vector<std::string>& args,
                       const Env& extra = {}) {
  std::vector<std::string> argv{paths().prog(flavour)};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_under_luma_argv(argv, extra);
}

std::string describe(const Result& r) {
  return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.signal) +
         "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

const json& device_stats(const json& stats, int device) {
  static const json none;
  if (!stats.is_object() || !stats.contains("devices")) return none;
  for (const json& d : stats["devices"])
    if (d.value("device", -1) == device) return d;
  return none;
}

const json& device_counters(const json& counters, int device) {
  static const json none;
  if (!counters.is_object() || !counters.contains("devices")) return none;
  for (const json& d : counters["devices"])
    if (d.value("device", -1) == device) return d;
  return none;
}

bool have_programs() {
  return !paths().lib.empty() && !paths().fake_dir.empty() && !paths().prog("shared").empty();
}

#define REQUIRE_PROGRAMS() \
  if (!have_programs()) GTEST_SKIP() << "test programs or libluma.so not built"

// ---- every kind of program is served -----------------------------------------------

class EveryKind : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryKind, ManyAllocationsBecomeAFewRealOnes) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"loop", "100000", "4096"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  const json& c = device_counters(r.counters, 0);
  ASSERT_TRUE(c.is_object()) << "no stand-in counters";
  EXPECT_LE(c["mem_alloc_calls"].get<int>(), 4) << c.dump();
  EXPECT_GE(c["mem_alloc_calls"].get<int>(), 1) << c.dump();
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << "no luma statistics";
  EXPECT_EQ(s["alloc_calls"].get<int>(), 100000);
  EXPECT_EQ(s["free_calls"].get<int>(), 100000);
  EXPECT_EQ(s["cuda_malloc_calls"], c["mem_alloc_calls"]);
  EXPECT_EQ(s["cuda_free_calls"], c["mem_free_calls"]);
  EXPECT_EQ(s["live_blocks"].get<int>(), 0);
  EXPECT_EQ(r.stats["free_sync"], "event");
  EXPECT_TRUE(r.stats.contains("pid"));
  EXPECT_TRUE(r.stats.contains("settings"));
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

TEST_P(EveryKind, MixedSizesAreServed) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"loop-mixed", "2000"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(device_stats(r.stats, 0)["alloc_calls"].get<int>(), 2000);
  EXPECT_LT(device_counters(r.counters, 0)["mem_alloc_calls"].get<int>(), 100);
}

TEST_P(EveryKind, ThreadsStressWithDataChecked) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"stress", "8", "500"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  const json& s = device_stats(r.stats, 0);
  EXPECT_EQ(s["alloc_calls"], s["free_calls"]);
  EXPECT_GE(s["alloc_calls"].get<int>(), 8 * 500 / 8);
  EXPECT_EQ(s["live_blocks"].get<int>(), 0);
}

TEST_P(EveryKind, ThreadsMakingTheirFirstCallAtOnce) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"threads-first", "16"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_GE(device_stats(r.stats, 0)["alloc_calls"].get<int>(), 16);
}

TEST_P(EveryKind, InvalidAndDoubleFreeGiveTheDriversCodes) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"invalid-free"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  // The interior and the double free were luma's blocks: refused without the driver.
  EXPECT_GE(device_stats(r.stats, 0)["invalid_frees"].get<int>(), 1) << r.stats.dump();
}

TEST_P(EveryKind, HazardCorruptsWithFreeSyncNone) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"hazard"},
                         {{"LUMA_CONF", "free_sync:none"}, {"LUMA_FAKE_DELAY_US", "20000"}});
  EXPECT_EQ(r.result.exit_code, 3) << describe(r.result);
  EXPECT_NE(r.result.out.find("CORRUPTED"), std::string::npos) << r.result.out;
}

TEST_P(EveryKind, HazardCleanWithTheDefaultPolicy) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"hazard"}, {{"LUMA_FAKE_DELAY_US", "20000"}});
  EXPECT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("hazard: CLEAN"), std::string::npos) << r.result.out;
}

// The stand-in's count of one driver call made in the run (its exit report's "calls").
std::uint64_t driver_calls(const LumaRun& r, const char* name) {
  if (!r.counters.is_object() || !r.counters.contains("calls")) return ~std::uint64_t{0};
  return r.counters["calls"].value(name, ~std::uint64_t{0});
}

// Fences with many streams: a fence is one cuCtxRecordEvent, which covers every stream of
// the context, and no stream is queried. A slow write queued on one of 64 streams must
// still keep its block from reuse; without fences the same program is corrupted.
TEST_P(EveryKind, HazardCleanWithManyStreams) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"hazard-streams", "64"}, {{"LUMA_FAKE_DELAY_US", "20000"}});
  EXPECT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("hazard-streams: Z reuses Y"), std::string::npos) << r.result.out;
  EXPECT_NE(r.result.out.find("hazard-streams: CLEAN"), std::string::npos) << r.result.out;
  EXPECT_GE(driver_calls(r, "cuCtxRecordEvent"), 1u) << r.counters.dump();
  EXPECT_EQ(driver_calls(r, "cuStreamQuery"), 0u) << r.counters.dump();
}

// A driver older than CUDA 12.5 has no cuCtxRecordEvent: fences go stream by stream (an
// event on the legacy stream, and one on each non-blocking stream not reported idle), and
// the same program stays clean. Driver-API program only: a CUDA 13 runtime needs a 13 driver.
TEST(StreamByStreamFences, HazardCleanWithManyStreamsOnADriverBefore12_5) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"hazard-streams", "64"},
                             {{"LUMA_FAKE_DELAY_US", "20000"}, {"LUMA_FAKE_DRIVER_VERSION", "12040"}});
  EXPECT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("hazard-streams: Z reuses Y"), std::string::npos) << r.result.out;
  EXPECT_NE(r.result.out.find("hazard-streams: CLEAN"), std::string::npos) << r.result.out;
  EXPECT_EQ(driver_calls(r, "cuCtxRecordEvent"), 0u) << r.counters.dump();
  EXPECT_GE(driver_calls(r, "cuStreamQuery"), 64u) << r.counters.dump();
}

TEST_P(EveryKind, HazardWithManyStreamsCorruptsWithFreeSyncNone) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"hazard-streams", "64"},
                             {{"LUMA_CONF", "free_sync:none"}, {"LUMA_FAKE_DELAY_US", "20000"}});
  EXPECT_EQ(r.result.exit_code, 3) << describe(r.result);
  EXPECT_NE(r.result.out.find("CORRUPTED"), std::string::npos) << r.result.out;
}

TEST_P(EveryKind, HazardCleanWithFreeSyncDevice) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"hazard"},
                         {{"LUMA_CONF", "free_sync:device"}, {"LUMA_FAKE_DELAY_US", "20000"}});
  EXPECT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("hazard: CLEAN"), std::string::npos) << r.result.out;
  EXPECT_EQ(r.stats["free_sync"], "device");
}

TEST_P(EveryKind, OutOfMemoryReleasesTheCacheRetriesAndIsCounted) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"oom", std::to_string(32 << 20)},
                         {{"LUMA_FAKE_CAPACITY", std::to_string(256 << 20)}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object());
  EXPECT_GE(s["memory_stats"]["num_ooms"].get<int>(), 1) << s.dump();
  EXPECT_GE(s["memory_stats"]["num_alloc_retries"].get<int>(), 1);
  EXPECT_GE(device_counters(r.counters, 0)["failed_allocs"].get<int>(), 1);
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The allocation that finally fails is explained once, on stderr, with the stand-in's
// numbers: 32 MiB chunks fill the 256 MiB device exactly (one 32 MiB segment each), so at
// the failure luma holds 8 segments, all allocated, nothing cached (no hint), and the
// driver reports 0 bytes free. The recovery allocation afterwards says nothing.
TEST_P(EveryKind, OutOfMemoryIsExplainedOnceWithTheDevicesNumbers) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"oom", std::to_string(32 << 20)},
                             {{"LUMA_FAKE_CAPACITY", std::to_string(256 << 20)}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  ASSERT_NE(r.result.out.find("oom: out of memory after 8 chunks of 33554432 bytes"), std::string::npos)
      << r.result.out;
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << r.stats.dump();
  EXPECT_EQ(count_of(r.result.err, "CUDA out of memory."), s["memory_stats"]["num_ooms"].get<std::size_t>())
      << r.result.err;
  EXPECT_EQ(count_of(r.result.err, "CUDA out of memory."), 1u) << r.result.err;
  EXPECT_EQ(device_counters(r.counters, 0)["peak_bytes"].get<unsigned long long>(), 256ull << 20);
  EXPECT_EQ(s["memory_stats"]["segment.all.peak"].get<int>(), 8) << s.dump();
  for (const char* part :
       {"CUDA out of memory. Tried to allocate 32.0 MiB. GPU 0 has a total capacity of 256.0 MiB of which 0 B is free.",
        "256.0 MiB is allocated by luma, and 0 B is reserved by luma but unallocated",
        "the largest free block is 0 B, in 8 segments (256.0 MiB reserved)."})
    EXPECT_NE(r.result.err.find(part), std::string::npos) << part << "\nstderr:\n" << r.result.err;
  EXPECT_EQ(r.result.err.find("fragmentation"), std::string::npos) << r.result.err;
}

TEST_P(EveryKind, TwoDevicesHaveTheirOwnStatistics) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"two-devices"}, {{"LUMA_FAKE_DEVICES", "2"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  ASSERT_EQ(r.stats["devices"].size(), 2u) << r.stats.dump();
  for (int d : {0, 1}) {
    EXPECT_GE(device_stats(r.stats, d)["alloc_calls"].get<int>(), 1) << d;
    EXPECT_EQ(device_stats(r.stats, d)["cuda_malloc_calls"],
              device_counters(r.counters, d)["mem_alloc_calls"])
        << d;
  }
}

TEST_P(EveryKind, MemInfoCountsTheCacheAsFree) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"meminfo"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  // "free before F0, ..., after free F2": with the cached block reported free, F2 == F0.
  unsigned long long t = 0, f0 = 0, n = 0, f1 = 0, f2 = 0;
  ASSERT_EQ(std::sscanf(r.result.out.c_str(),
                        "meminfo: total %llu; free before %llu, with %llu allocated %llu, "
                        "after free %llu",
                        &t, &f0, &n, &f1, &f2),
            5)
      << r.result.out;
  EXPECT_EQ(f2, f0);
  EXPECT_LT(f1, f0);
}

// The program's stream-ordered allocations go to the driver's pool, and are counted: a
// program that allocates only that way still gets statistics, with those calls in them.
TEST_P(EveryKind, StreamOrderedAllocationsAreForwarded) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"async", "50"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  ASSERT_TRUE(r.stats.is_object()) << "no statistics\n" << describe(r.result);
  EXPECT_TRUE(r.stats["devices"].empty()) << r.stats.dump();  // the cache served nothing
  std::uint64_t bytes = 0;  // the async mode's sizes (modes_streams.cpp)
  for (std::size_t i = 0; i < 50; ++i) bytes += 1024 + (i % 16) * 4096;
  json row;
  for (const json& p : r.stats["forwarded_allocations"])
    if (p.value("path", std::string()).rfind("stream-ordered", 0) == 0) row = p;
  ASSERT_TRUE(row.is_object()) << r.stats.dump();
  EXPECT_EQ(row["alloc_calls"], 50) << row.dump();
  EXPECT_EQ(row["alloc_bytes"], bytes) << row.dump();
  EXPECT_EQ(row["free_calls"], 50) << row.dump();
  // The text form has the table.
  Result t = run({paths().prog(GetParam()), "async", "5"}, luma_env());
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  EXPECT_EQ(count(t.err, kStatsHeader), 1) << t.err;
  EXPECT_NE(t.err.find("Forwarded allocation paths"), std::string::npos) << t.err;
  EXPECT_NE(t.err.find("stream-ordered pool"), std::string::npos) << t.err;
}

// The driver API's pools and virtual memory go to the driver and are counted: pool
// allocations with the stream-ordered ones (their frees are cuMemFreeAsync), cuMemCreate /
// cuMemRelease and cuMemMap / cuMemUnmap each under their own path. The mode also checks,
// under luma, that the driver's errors reach the program unchanged (cuMemCreate of a size
// off the granularity, an allocation from a destroyed pool: CUDA_ERROR_INVALID_VALUE).
TEST(ForwardedPaths, PoolAndVirtualMemoryAreCounted) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"pool-vmm", "3"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  ASSERT_TRUE(r.stats.is_object()) << "no statistics\n" << describe(r.result);
  EXPECT_TRUE(r.stats["devices"].empty()) << r.stats.dump();  // the cache served nothing
  auto row = [&](const char* prefix) {
    for (const json& p : r.stats["forwarded_allocations"])
      if (p.value("path", std::string()).rfind(prefix, 0) == 0) return p;
    return json();
  };
  const json pool = row("stream-ordered"), memory = row("virtual memory (cuMemCreate"),
             mappings = row("virtual memory mappings");
  ASSERT_TRUE(pool.is_object() && memory.is_object() && mappings.is_object()) << r.stats.dump();
  EXPECT_EQ(pool["alloc_calls"], 3) << pool.dump();
  EXPECT_EQ(pool["alloc_bytes"], 4096 * (1 + 2 + 3)) << pool.dump();
  EXPECT_EQ(pool["free_calls"], 3) << pool.dump();
  const std::uint64_t two_granules = 2 * (2u << 20);  // the stand-in's granularity: 2 MiB
  EXPECT_EQ(memory["alloc_calls"], 3) << memory.dump();
  EXPECT_EQ(memory["alloc_bytes"], 3 * two_granules) << memory.dump();
  EXPECT_EQ(memory["free_calls"], 3) << memory.dump();
  EXPECT_EQ(mappings["alloc_calls"], 3) << mappings.dump();
  EXPECT_EQ(mappings["alloc_bytes"], 3 * two_granules) << mappings.dump();
  EXPECT_EQ(mappings["free_calls"], 3) << mappings.dump();
  // The text form names the rows.
  Result t = run({paths().prog("driver"), "pool-vmm", "1"}, luma_env());
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  EXPECT_NE(t.err.find("virtual memory mappings (cuMemMap, cuMemUnmap)"), std::string::npos)
      << t.err;
}

// Pinned host and managed allocations go to the driver and are counted, each under its
// own path; a program with only those allocations still gets statistics. (Pinned host
// memory is forwarded with the host cache off; host_cache_e2e_test.cpp tests it on.)
TEST(ForwardedPaths, PinnedHostAndManagedAreCounted) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"host-managed", "3"}, {{"LUMA_CONF", "host_cache:off"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  ASSERT_TRUE(r.stats.is_object()) << "no statistics\n" << describe(r.result);
  auto row = [&](const char* prefix) {
    for (const json& p : r.stats["forwarded_allocations"])
      if (p.value("path", std::string()).rfind(prefix, 0) == 0) return p;
    return json();
  };
  const json host = row("pinned host"), managed = row("managed");
  ASSERT_TRUE(host.is_object() && managed.is_object()) << r.stats.dump();
  EXPECT_EQ(host["alloc_calls"], 3) << host.dump();
  EXPECT_EQ(host["alloc_bytes"], 4096 * (1 + 2 + 3)) << host.dump();
  EXPECT_EQ(host["free_calls"], 3) << host.dump();
  EXPECT_EQ(managed["alloc_calls"], 3) << managed.dump();
  EXPECT_EQ(managed["alloc_bytes"], 3 * 8192) << managed.dump();
  // Managed memory is freed by cuMemFree, which luma cannot tell from any foreign free.
  EXPECT_EQ(managed["free_calls"], 0) << managed.dump();
}

// Each exit path prints the statistics exactly once, after the program's atexit handlers.
TEST_P(EveryKind, EveryExitPathPrintsOnce) {
  REQUIRE_PROGRAMS();
  for (const char* mode : {"exit-main", "exit-thread", "atexit"}) {
    Result r = run({paths().prog(GetParam()), mode}, luma_env());
    ASSERT_EQ(r.exit_code, 0) << mode << "\n" << describe(r);
    EXPECT_EQ(count(r.err, kStatsHeader), 1) << mode << "\n" << r.err;
  }
  // The atexit handler's allocation is in the statistics: they were taken after it ran.
  LumaRun a = run_under_luma(GetParam(), {"atexit"});
  ASSERT_EQ(a.result.exit_code, 0) << describe(a.result);
  LumaRun m = run_under_luma(GetParam(), {"exit-main"});
  EXPECT_NE(a.result.out.find("atexit: handler alloc/free ok"), std::string::npos);
  const json& s = device_stats(a.stats, 0);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["alloc_calls"], s["free_calls"]) << s.dump();
}

// A thread stuck inside an allocation (waiting for GPU work that never ends) holds the
// allocator's lock for good: exit still ends the process, and the statistics say which
// device they could not read instead of waiting for it.
TEST_P(EveryKind, ExitDoesNotWaitForACallThatNeverReturns) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"exit-while-busy"});
  if (r.result.exit_code == 77) GTEST_SKIP() << r.result.out;
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  ASSERT_TRUE(r.stats.is_object()) << describe(r.result);
  EXPECT_NE(r.stats.value("left_out", std::string()).find("device 0"), std::string::npos) << r.stats.dump();
  // The text form says the same, and not that nothing was allocated.
  Result t = run({paths().prog(GetParam()), "exit-while-busy"}, luma_env());
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  EXPECT_NE(t.err.find("left_out: device 0"), std::string::npos) << t.err;
  EXPECT_EQ(t.err.find("the cache served no device memory"), std::string::npos) << t.err;
}

TEST_P(EveryKind, ForkedChildNeitherPrintsNorCorrupts) {
  REQUIRE_PROGRAMS();
  Result r = run({paths().prog(GetParam()), "fork"}, luma_env());
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count(r.err, kStatsHeader), 1) << r.err;
  // Same with a file per process: only the parent's exists.
  std::string dir = temp_dir();
  Result f = run({paths().prog(GetParam()), "fork"},
                 luma_env({{"LUMA_STATS", "json"}, {"LUMA_STATS_FILE", dir + "/s.%p.json"}}));
  ASSERT_EQ(f.exit_code, 0) << describe(f);
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') files.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(parse_or_null(read_file(files[0])).is_object()) << read_file(files[0]);
  for (const auto& p : files) std::remove(p.c_str());
  rmdir(dir.c_str());
}

TEST_P(EveryKind, ExecdChildIsServedAfresh) {
  REQUIRE_PROGRAMS();
  Result r = run({paths().prog(GetParam()), "fork-exec"}, luma_env());
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count(r.err, kStatsHeader), 2) << r.err;  // the parent's and the new program's
}

TEST_P(EveryKind, BadSettingIsNamedOnceAndTheProgramRunsOn) {
  REQUIRE_PROGRAMS();
  Result r = run({paths().prog(GetParam()), "loop", "100", "4096"},
                 luma_env({{"LUMA_STATS", "yaml"}}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count(r.err, "LUMA_STATS='yaml'"), 1) << r.err;
  EXPECT_EQ(count(r.err, kStatsHeader), 1) << r.err;  // the default (text) applies
  Result c = run({paths().prog(GetParam()), "loop", "100", "4096"},
                 luma_env({{"LUMA_CONF", "free_sync:sometimes"}, {"LUMA_STATS", "off"}}));
  ASSERT_EQ(c.exit_code, 0) << describe(c);
  EXPECT_EQ(count(c.err, "\n"), 1) << c.err;
  EXPECT_NE(c.err.find("free_sync"), std::string::npos) << c.err;
}

// A reset device's memory goes with its primary context: luma forgets what it cached
// (never hands it out again) and serves the re-made context afresh.
TEST_P(EveryKind, DeviceResetTakesTheCachedMemoryAlong) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"reset"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  int resets = 0, luma_mallocs = 0, alloc_calls = 0;
  for (const json& d : r.stats["devices"]) {
    if (d.value("device", -1) != 0) continue;
    resets += d["num_context_resets"].get<int>();
    luma_mallocs += d["cuda_malloc_calls"].get<int>();
    alloc_calls += d["alloc_calls"].get<int>();
  }
  EXPECT_EQ(resets, 1) << r.stats.dump();
  EXPECT_EQ(alloc_calls, 4);
  // One entry for the device, the contexts before and after the reset added up.
  int entries = 0;
  for (const json& d : r.stats["devices"]) entries += d.value("device", -1) == 0 ? 1 : 0;
  EXPECT_EQ(entries, 1) << r.stats.dump();
  EXPECT_EQ(luma_mallocs, device_counters(r.counters, 0)["mem_alloc_calls"].get<int>());
  EXPECT_GE(luma_mallocs, 3) << "segments from before the reset were not reused";
}

TEST(AddressRange, AnyByteOfABlockNamesTheBlockNotTheSegment) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"address-range"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(device_counters(r.counters, 0)["mem_alloc_calls"].get<int>(), 1) << "one segment";
}

// ---- patterns of real programs: CUDA IPC and stream capture (driver API) -------------
// Each is run on the stand-in alone first (the reference: the pattern works there), then
// under luma, where it must work the same way.

Result run_plain(const std::string& flavour, const std::vector<std::string>& args) {
  std::vector<std::string> argv{paths().prog(flavour)};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}}));
}

// The warning luma prints when a block that does not start its segment is exported.
const char* const kIpcInsideSegmentWarning = "a peer that uses the opened pointer itself sees the segment's start";

// The corners where the stand-in chose an answer (driver_answers.cpp: frees with no current
// context, capture misuse, cuCtxRecordEvent's errors...): the stand-in answers what
// tests/fake/README.md says, and luma's hooks answer the same, line for line. On a GPU,
// scripts/gpu-check runs the same program against the real driver.
TEST(RealPrograms, DriverAnswersInTheStandInsChoicesAreTheSameUnderLuma) {
  REQUIRE_PROGRAMS();
  const std::string prog = setting("LUMA_IT_DRIVER_ANSWERS");
  if (prog.empty()) GTEST_SKIP() << "driver_answers not built";
  Result plain = run({prog}, clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}}));
  ASSERT_EQ(plain.exit_code, 0) << "the stand-in differs from its README\n" << describe(plain);
  Result luma = run({prog}, luma_env({{"LUMA_STATS", "off"}}));
  ASSERT_EQ(luma.exit_code, 0) << describe(luma);
  EXPECT_EQ(luma.out, plain.out);
}

// torch.multiprocessing's way, over a caching allocator of the program's own (the
// stand-in of PyTorch's libc10_cuda.so): each tensor is shared as (handle of its segment's
// start, offset), many tensors to a segment. luma recognises the program's cache and gives
// each of its segments a driver allocation of its own, so every tensor reaches the peer
// intact with no setting, and the segments are counted in luma's statistics. With the
// recognition off (as luma was before it), the segment start is a block inside a luma
// segment, the handle maps luma's segment and the peer reads other bytes.
TEST(RealPrograms, TorchMultiprocessingIpcOverTheProgramsOwnCacheIsExact) {
  REQUIRE_PROGRAMS();
  const std::string prog = setting("LUMA_IT_TORCH_IPC");
  if (prog.empty()) GTEST_SKIP() << "prog_torch_ipc not built";
  Result plain = run({prog, "40", "2"}, clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}}));
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma_argv({prog, "40", "2"}, {{"LUMA_LOG_LEVEL", "info"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_NE(r.result.err.find("PyTorch's CUDA caching allocator is active"), std::string::npos) << r.result.err;
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << r.stats.dump();
  // Every segment of the program's cache was one of luma's, none cached again: the driver
  // saw exactly the program's own allocations, and all went back at its empty_cache.
  EXPECT_GE(s["cuda_malloc_calls"].get<int>(), 3) << s.dump();
  EXPECT_EQ(s["cuda_malloc_calls"], s["alloc_calls"]) << s.dump();
  EXPECT_EQ(s["cuda_free_calls"], s["cuda_malloc_calls"]) << s.dump();
  EXPECT_EQ(device_counters(r.counters, 0)["live_allocations"].get<int>(), 0) << r.counters.dump();

  LumaRun off = run_under_luma_argv({prog, "40", "2"}, {{"LUMA_CONF", "program_cache:0"}});
  EXPECT_EQ(off.result.exit_code, 1) << "luma's blocks under the program's segments\n" << describe(off.result);
}

// A program with no cache of its own allocating segment-sized blocks is served from luma's
// cache as ever: the recognition looks at loaded libraries, not at sizes.
TEST(RealPrograms, SegmentSizedAllocationsWithoutAProgramCacheAreCached) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"loop", "200", "2097152"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << r.stats.dump();
  EXPECT_EQ(s["cuda_malloc_calls"].get<int>(), 1) << s.dump();
}

// With an NVTX tool present (NVTX_INJECTION64_PATH: a recorder of the memory API's calls),
// every block luma hands out is a region of its requested size inside a heap that is its
// segment, unregistered at the program's free; a segment given back takes its heap along.
// The program checks the recorder against the blocks it holds at four points.
TEST(NvtxMemory, RegionsAreTheLiveBlocksAndHeapsTheSegments) {
  REQUIRE_PROGRAMS();
  const std::string recorder = setting("LUMA_IT_NVTX_RECORDER");
  if (recorder.empty()) GTEST_SKIP() << "built without the NVTX headers";
  LumaRun r = run_under_luma_argv({setting("LUMA_IT_NVTX_BLOCKS_PROG")},
                                  {{"NVTX_INJECTION64_PATH", recorder}, {"LUMA_CONF", "ipc_own_segment:32M"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("the registered regions were the live blocks at every check"), std::string::npos)
      << r.result.out;
}

// With expandable segments a heap is a pool's whole address range (its segment events are
// pages, and blocks span pages): every region lies inside a heap, the recorder counts no
// call against the API's rules. Regression: a heap per segment event left every block of
// more than a page outside its heap (15 such calls at the first check).
TEST(NvtxMemory, ExpandableSegmentsAreOneHeapPerAddressRange) {
  REQUIRE_PROGRAMS();
  const std::string recorder = setting("LUMA_IT_NVTX_RECORDER");
  if (recorder.empty()) GTEST_SKIP() << "built without the NVTX headers";
  LumaRun r = run_under_luma_argv({setting("LUMA_IT_NVTX_BLOCKS_PROG")},
                                  {{"NVTX_INJECTION64_PATH", recorder},
                                   {"LUMA_CONF", "ipc_own_segment:32M,expandable_segments:1"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("the registered regions were the live blocks at every check"), std::string::npos)
      << r.result.out;
  EXPECT_GE(driver_calls(r, "cuMemCreate"), 1u) << "no page was mapped: " << r.counters.dump();
}

// UCX / Open MPI / NCCL: two rounds of 40 buffers of mixed sizes shared with a second
// process as (handle of the cuMemGetAddressRange base, offset, length), the peer keeping
// its mappings in a cache keyed by (base, BUFFER_ID) across rounds, data checked both
// ways, BUFFER_ID equal exactly for equal ranges. Regression: with each block reported as
// its own range (old main), the peer found another block's bytes in 36 of the first 40.
TEST(RealPrograms, IpcByRangeBaseAndOffsetSharesEveryBuffer) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"ipc-ranges", "40", "2"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"ipc-ranges", "40", "2"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_EQ(r.result.err.find(kIpcInsideSegmentWarning), std::string::npos) << r.result.err;
}

// CUDA's simpleIPC sample exports the pointer it allocated and the peer uses the opened
// pointer itself. Under luma's defaults a block inside a segment is seen from the segment's
// start by such a peer: luma says so once, naming what the peer sees and the setting.
TEST(RealPrograms, SimpleIpcOfABlockInsideASegmentIsNamedInAWarning) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"ipc-simple", "4096"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"ipc-simple", "4096"});
  ASSERT_GE(r.result.exit_code, 0) << describe(r.result);  // no crash
  EXPECT_EQ(count(r.result.err, kIpcInsideSegmentWarning), 1) << r.result.err;
  EXPECT_NE(r.result.err.find("ipc_own_segment"), std::string::npos) << r.result.err;
}

// With LUMA_CONF=ipc_own_segment:SIZE an allocation of SIZE or more is a segment of its
// own, so simpleIPC's pattern works for it: data checked both ways, no warning. (Old
// main has no such key: it warns that the key is unknown and the peer sees another block.)
TEST(RealPrograms, SimpleIpcWorksWithIpcOwnSegment) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"ipc-simple", "2097152"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"ipc-simple", "2097152"},
                             {{"LUMA_CONF", "ipc_own_segment:1M"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_EQ(r.result.err.find(kIpcInsideSegmentWarning), std::string::npos) << r.result.err;
  // Below SIZE blocks still share segments: the warning again.
  LumaRun small = run_under_luma("driver", {"ipc-simple", "4096"}, {{"LUMA_CONF", "ipc_own_segment:1M"}});
  EXPECT_EQ(count(small.result.err, kIpcInsideSegmentWarning), 1) << small.result.err;
}

// PyTorch's CUDA graphs: warm-up, a relaxed capture with cuMemAlloc/cuMemFree inside, the
// graph launched 20 times with its output checked, two other threads allocating and
// freeing tagged blocks all along; inside the capture a block freed while its slow memset
// is queued, and the next allocation's data checked. Regression: old main recorded its
// fences on the capturing stream and the capture was invalidated (EndCapture 901).
TEST(RealPrograms, PyTorchGraphPatternCapturesAndLaunchesWithDataIntact) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"graph-pattern", "20"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"graph-pattern", "20"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

// The capture's hazard check bites: without fences luma hands the freed block out at once
// and its late memset lands in the new one.
TEST(RealPrograms, GraphPatternHazardShowsWithFreeSyncNone) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"graph-pattern", "2"}, {{"LUMA_CONF", "free_sync:none"}});
  EXPECT_EQ(r.result.exit_code, 3) << describe(r.result);
  EXPECT_NE(r.result.out.find("CORRUPTED"), std::string::npos) << r.result.out;
}

// A global-mode capture: the capturing thread's cuMemAlloc (which luma's cache could have
// served) and its cuMemFree of a luma block get CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
// EndCapture CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as on the driver alone; the block
// stays live. Regression: old main served the allocation (0).
TEST(RealPrograms, GlobalCaptureRefusesAllocAndFreeAsTheDriverDoes) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"capture-global"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"capture-global"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

// cuMemFreeAsync of cuMemAlloc memory in a capture (global and relaxed): the driver's
// CUDA_ERROR_INVALID_VALUE and invalidation, and the block is not freed (its data kept, not
// handed out again, a later cuMemFree succeeds). Regression: old main took it into its
// cache (0).
TEST(RealPrograms, StreamOrderedFreeInACaptureGetsTheDriversAnswer) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"capture-free-async"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"capture-free-async"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

// A capture into the program's own graph (cuStreamBeginCaptureToGraph, CUDA 12.3) with a free
// and an allocation inside it: the capture ends valid, into that graph, and the freed
// block's late write does not land in the new one. Regression: luma did not know of such
// a capture, so the free's fence asked the driver during it (cuCtxRecordEvent), which
// invalidated it (the captured memsetAsync then failed with 901).
TEST(RealPrograms, ACaptureIntoTheProgramsGraphIsACaptureToo) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"capture-to-graph"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"capture-to-graph"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

// Other threads (default global mode) during a capture: refused with the driver's error
// in a global capture, served in a thread-local one, which then ends with a graph.
// Regression: old main served the other thread's cuMemAlloc during a global capture (0).
TEST(RealPrograms, OtherThreadsDuringACaptureGetTheDriversAnswers) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"capture-other-threads"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"capture-other-threads"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

// A capture beside another thread that allocates and frees device, pinned and
// stream-ordered memory (relaxed mode, as a data loader beside torch.cuda.graph): nothing
// that thread does is forbidden by the capture, so no capture may end invalidated, in any
// mode, with the stand-in holding the capturing thread inside cuStreamBeginCapture* and
// cuStreamEndCapture (LUMA_FAKE_CAPTURE_HOLD_US) and without, and under a memory limit that
// makes allocations wait for earlier frees. Regression: luma registered a capture only after
// the driver's begin returned, so in that window the other thread's frees recorded
// cuCtxRecordEvent in the capturing context and invalidated the capture.
TEST(RealPrograms, CapturesBesideAnotherThreadsAllocationsStayValid) {
  REQUIRE_PROGRAMS();
  const std::string rounds = "15";
  for (const char* mode : {"global", "thread-local", "relaxed", "to-graph"}) {
    for (const char* hold : {"0", "2000"}) {
      SCOPED_TRACE(std::string(mode) + ", hold " + hold + " us");
      Result plain = run(std::vector<std::string>{paths().prog("driver"), "capture-race", rounds, mode},
                         clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}, {"LUMA_FAKE_CAPTURE_HOLD_US", hold}}));
      ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
      for (const char* conf : {"", "memory_limit:48M"}) {
        SCOPED_TRACE(std::string("LUMA_CONF=") + conf);
        LumaRun r = run_under_luma("driver", {"capture-race", rounds, mode},
                                   {{"LUMA_FAKE_CAPTURE_HOLD_US", hold}, {"LUMA_CONF", conf}});
        EXPECT_EQ(r.result.exit_code, 0) << describe(r.result);
        EXPECT_EQ(r.result.out, plain.out);
      }
    }
  }
}

// Another thread's cuStreamEndCapture of a global capture is refused (WRONG_THREAD) and the
// capture goes on: luma must still treat the stream as capturing. Regression: luma forgot
// the capture at any answer of cuStreamEndCapture, so that thread's free then recorded a
// fence in the capturing context and invalidated it (the real end answered 901).
TEST(RealPrograms, ARefusedEndOfCaptureLeavesTheCaptureKnown) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"capture-end-refused"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"capture-end-refused"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
}

// luma's capture-refusal probe (one byte asked of the driver and given back) runs under the
// capture gate. Regression: with a capture the driver had just ended but luma still counted
// (the main thread held inside cuStreamEndCapture), a second thread's free made luma probe,
// and a third thread's capture, begun while the probe's allocation was held open, received
// the probe's cuMemFree and was invalidated (its captured memsetAsync answered 901).
TEST(RealPrograms, ACaptureBegunDuringLumasCaptureProbeIsNotInvalidated) {
  REQUIRE_PROGRAMS();
  Result plain = run(std::vector<std::string>{paths().prog("driver"), "capture-probe-race"},
                     clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}, {"LUMA_FAKE_CAPTURE_HOLD_US", "40000"}}));
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  for (int round = 0; round < 3; ++round) {
    LumaRun r = run_under_luma("driver", {"capture-probe-race"}, {{"LUMA_FAKE_CAPTURE_HOLD_US", "40000"}});
    ASSERT_EQ(r.result.exit_code, 0) << "round " << round << "\n" << describe(r.result);
    EXPECT_EQ(r.result.out, plain.out);
  }
}

// A context destroyed (cuCtxDestroy, or the primary context reset) while another thread
// works in a context of its own: luma's fences, polls and synchronizations for that thread
// (its pinned blocks are fenced in every context) must never name the context being
// destroyed, nor it once destroyed (cuCtxDestroy's rule; the stand-in holds each destruction
// open and counts such calls). Regression: luma learned of the destruction only once the
// driver had returned, and recorded and queried fences in the context meanwhile (some
// 10^5 such calls in 20 rounds).
TEST(RealPrograms, NoCallOfLumasNamesAContextAnotherThreadDestroys) {
  REQUIRE_PROGRAMS();
  for (const std::vector<std::string>& args : {std::vector<std::string>{"context-destroy-race", "20"},
                                              std::vector<std::string>{"context-destroy-race", "20", "primary"}}) {
    Result plain = run_plain("driver", args);
    ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
    LumaRun r = run_under_luma("driver", args);
    EXPECT_EQ(r.result.exit_code, 0) << describe(r.result);
    EXPECT_NE(r.result.out.find("calls that named a context being destroyed or destroyed: 0\n"), std::string::npos)
        << describe(r.result);
  }
}

// luma's own records (luma_footprint, read by the program before and after) do not grow
// with how many contexts, streams, captures and threads lived: 10,000 of each, after one
// as a warm-up, leave every count and luma's bytes where they were. Contexts once more with
// a trace and out-of-memory call sites on, whose per-allocator sinks are reused.
json last_json_line(const std::string& out) {
  const std::size_t end = out.find_last_not_of('\n');
  if (end == std::string::npos) return json();
  const std::size_t start = out.rfind('\n', end);
  return json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1)),
                     nullptr, false);
}

TEST(Lifetimes, LumasRecordsDoNotGrowWithWhatLivedBefore) {
  REQUIRE_PROGRAMS();
  const std::string dir = temp_dir();
  struct Case {
    std::string kind;
    Env env;
  };
  const std::vector<Case> cases = {
      {"contexts", {}},
      {"streams", {}},
      {"captures", {}},
      {"threads", {}},
      {"contexts", {{"LUMA_TRACE", dir + "/t.luma"}, {"LUMA_TRACE_STACKS", "4"}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind + (c.env.empty() ? "" : " (traced)"));
    const std::string n = c.env.empty() ? "10000" : "2000";
    LumaRun r = run_under_luma("driver", {"lifetimes", c.kind, n}, c.env);
    ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
    const json line = last_json_line(r.result.out);
    ASSERT_TRUE(line.is_object() && line["start"].is_object() && line["end"].is_object()) << r.result.out;
    const json& a = line["start"];
    const json& b = line["end"];
    for (const char* key : {"contexts_live", "contexts_graveyard", "devices_folded", "context_bytes",
                            "thread_records", "thread_records_made", "streams", "captures",
                            "trace_sinks", "oom_sinks", "bytes"})
      EXPECT_EQ(b[key], a[key]) << key << "\n" << r.result.out;
    // The exit statistics name the free path the process ended on (core/free_path): a
    // second thread takes the legacy path, a second context the fenced one.
    const std::string path = r.stats.value("free_path", "");
    if (c.kind == "threads") {
      EXPECT_EQ(path.rfind("legacy (", 0), 0u) << path;
    } else if (c.kind == "contexts") {
      EXPECT_EQ(path.rfind("fenced (", 0), 0u) << path;
    }
    if (c.kind == "contexts") {  // they were made (and served) in between
      EXPECT_EQ(b["contexts_made"].get<std::uint64_t>() - a["contexts_made"].get<std::uint64_t>(),
                std::stoull(n));
      if (!c.env.empty()) {
        EXPECT_GE(a["trace_sinks"].get<std::uint64_t>(), 1u) << r.result.out;
      }
    }
  }
}

// A context destroyed while another thread is inside luma waits in the graveyard for that
// thread (which could have loaded its entry); the next context's end, after the thread
// left, frees it.
TEST(Lifetimes, AnEndedContextWaitsForTheThreadsInsideLuma) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"grace-period"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  const json line = last_json_line(r.result.out);
  ASSERT_TRUE(line.is_object() && line["during"].is_object()) << r.result.out;
  EXPECT_EQ(line["during"]["contexts_graveyard"], 1) << r.result.out;
  EXPECT_EQ(line["during"]["thread_records"], 2) << r.result.out;
  EXPECT_EQ(line["after"]["contexts_graveyard"], 0) << r.result.out;
  EXPECT_EQ(line["after"]["contexts_live"], 1) << r.result.out;
}

// Contexts made and destroyed while other threads allocate and free (each free asks every
// context's ranges): no read of a freed entry (the sanitizer passes run this), every
// allocation right, and only the primary context's entry live at the end.
TEST(Lifetimes, ContextsEndWhileOtherThreadsFree) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"destroy-while-freeing", "300", "3"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  const json line = last_json_line(r.result.out);
  ASSERT_TRUE(line.is_object() && line["end"].is_object()) << r.result.out;
  EXPECT_EQ(line["end"]["contexts_live"], 1) << r.result.out;
  EXPECT_EQ(line["end"]["contexts_made"], 301) << r.result.out;
}

// A block freed in a capture that is then invalidated keeps its fence: the allocations
// after the failed EndCapture do not receive the late memset queued on it before the
// capture (and, without fences, they do: the check can fail).
TEST(RealPrograms, BlockFreedInAnInvalidatedCaptureIsFenced) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"capture-invalidated-free"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"capture-invalidated-free"});
  EXPECT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  LumaRun none = run_under_luma("driver", {"capture-invalidated-free"}, {{"LUMA_CONF", "free_sync:none"}});
  EXPECT_EQ(none.result.exit_code, 3) << describe(none.result);
}

// A relaxed capture on a blocking stream, with allocations and frees inside it from the
// capturing thread and another one: nothing luma does for them may use the legacy stream
// (which would invalidate the capture); the graph launches and writes its block.
TEST(RealPrograms, CaptureOnABlockingStreamWithAllocationsInside) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"capture-blocking"});
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma("driver", {"capture-blocking"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(r.result.out, plain.out);
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

// Stream-ordered reuse: with every operation on the legacy stream (one thread, one context,
// no stream of the program's own), a block freed while its slow write is still queued is
// handed back at once for the next allocation, with no fence and no wait, and the data is
// right (the next write runs after the first in the stream's order). A second stream, even
// one the program never uses, brings the fence back: the allocation waits for the first
// write. With stream_ordered_reuse:0 (as luma was before) the single-stream program waits.
TEST_P(EveryKind, OneStreamReusesAFreedBlockAtOnceAndASecondStreamBringsTheFenceBack) {
  REQUIRE_PROGRAMS();
  LumaRun one = run_under_luma(GetParam(), {"stream-order", "4"});
  ASSERT_EQ(one.result.exit_code, 0) << describe(one.result);
  EXPECT_NE(one.result.out.find("4 of 4 rounds got the freed block back"), std::string::npos) << one.result.out;
  const json& s1 = device_stats(one.stats, 0);
  ASSERT_TRUE(s1.is_object()) << one.stats.dump();
  EXPECT_EQ(s1["num_fence_waits"].get<int>(), 0) << s1.dump();
  EXPECT_EQ(s1["cuda_malloc_calls"].get<int>(), 1) << s1.dump();
  EXPECT_EQ(one.counters["calls"]["cuCtxRecordEvent"].get<int>(), 0) << one.counters.dump();
  EXPECT_EQ(one.counters["calls"]["cuEventRecord"].get<int>(), 0) << one.counters.dump();

  LumaRun two = run_under_luma(GetParam(), {"stream-order", "4", "second-stream"});
  ASSERT_EQ(two.result.exit_code, 0) << describe(two.result);
  // The freed block is pending behind its fence: the next allocation takes other memory.
  EXPECT_NE(two.result.out.find("0 of 4 rounds got the freed block back"), std::string::npos) << two.result.out;
  EXPECT_GE(two.counters["calls"]["cuCtxRecordEvent"].get<int>(), 1) << two.counters.dump();

  LumaRun off = run_under_luma(GetParam(), {"stream-order", "4"}, {{"LUMA_CONF", "stream_ordered_reuse:0"}});
  ASSERT_EQ(off.result.exit_code, 0) << describe(off.result);
  EXPECT_NE(off.result.out.find("0 of 4 rounds got the freed block back"), std::string::npos) << off.result.out;
  EXPECT_GE(off.counters["calls"]["cuCtxRecordEvent"].get<int>(), 1) << off.counters.dump();
}

// Two threads in the legacy order (PyTorch's main and autograd threads): the second thread
// frees a block whose slow write is queued on the main thread's per-thread stream and takes
// it again for its own per-thread stream. The fence is one barrier on the legacy stream:
// the block comes back with no host wait and no context fence, and the data is right (a
// reuse without the barrier leaves the late write in it: CORRUPTED). A non-blocking stream
// brings the fence back. Regression: a second thread brought back a fence per free and a
// host wait per reuse.
TEST_P(EveryKind, TwoThreadsInTheLegacyOrderReuseAfterALegacyBarrier) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"stream-order-threads", "3"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("3 of 3 rounds got the freed block back; data right"), std::string::npos)
      << r.result.out;
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << r.stats.dump();
  EXPECT_EQ(s["num_fence_waits"].get<int>(), 0) << s.dump();
  EXPECT_EQ(r.counters["calls"]["cuCtxRecordEvent"].get<int>(), 0) << r.counters.dump();

  LumaRun nb = run_under_luma(GetParam(), {"stream-order-threads", "3", "nonblocking"});
  ASSERT_EQ(nb.result.exit_code, 0) << describe(nb.result);
  const json& t = device_stats(nb.stats, 0);
  ASSERT_TRUE(t.is_object()) << nb.stats.dump();
  EXPECT_GE(t["num_fence_waits"].get<int>(), 1) << t.dump();
  EXPECT_GE(nb.counters["calls"]["cuCtxRecordEvent"].get<int>(), 1) << nb.counters.dump();
}

// The end of stream-ordered reuse: a block freed while it held (its slow write still
// queued) is taken, once the order has ended, for work that the ended order does not cover
// - a second thread's per-thread stream, or a new non-blocking stream. The block must hold
// the new write: luma waits for the work issued before the end, before the hook that ended
// it returns. Regression: luma only turned reuse at once off, and the late write landed in
// the new block (CORRUPTED, exit 3), on every kind of program.
TEST_P(EveryKind, TheEndOfStreamOrderedReuseWaitsForTheWorkIssuedBeforeIt) {
  REQUIRE_PROGRAMS();
  for (const char* what : {"thread", "stream"}) {
    SCOPED_TRACE(what);
    LumaRun r = run_under_luma(GetParam(), {"stream-order-ends", what});
    EXPECT_EQ(r.result.exit_code, 0) << describe(r.result);
    EXPECT_NE(r.result.out.find("the freed block came back"), std::string::npos) << r.result.out;
  }
}

// A stream-ordered free of a luma block goes into luma's cache, never to the driver (which
// would free the whole segment under its neighbours): every kind of program.
TEST_P(EveryKind, StreamOrderedFreeOfACachedBlockStaysInTheCache) {
  REQUIRE_PROGRAMS();
  Result plain = run({paths().prog(GetParam()), "free-async-cached"},
                     clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}}));
  ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
  LumaRun r = run_under_luma(GetParam(), {"free-async-cached"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << r.stats.dump();
  EXPECT_EQ(s["free_calls"], s["alloc_calls"]) << s.dump();
  EXPECT_EQ(device_counters(r.counters, 0)["mem_free_calls"].get<int>(), 0) << r.counters.dump();
}

TEST(Contexts, CreatedDestroyedAndReleasedContextsAreServedAfresh) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"contexts"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  int retired = 0;
  for (const json& d : r.stats["devices"]) retired += d["num_context_resets"].get<int>();
  EXPECT_EQ(retired, 4) << "3 created contexts and the primary one: " << r.stats.dump();
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

// Regression: entries of destroyed contexts used up the table, so after 256 of them
// caching stopped for good with a warning about "more than 256 contexts".
TEST(Contexts, OnlyContextsAliveAtOnceAreLimited) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"many-contexts", "300"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  int retired = 0, absorbed = 0;
  for (const json& d : r.stats["devices"]) {
    retired += d["num_context_resets"].get<int>();
    absorbed += d["cache_absorbed_calls"].get<int>();
  }
  EXPECT_EQ(retired, 300) << r.stats.dump();
  // Each context's second allocation came from its cache (and each free went into it).
  EXPECT_GE(absorbed, 300) << r.stats.dump();
  EXPECT_EQ(r.result.err.find("contexts"), std::string::npos) << r.result.err;
}

// Regression: frees still in the open epoch (fence pending) were reported at exit as
// "Active allocs 17" by a program that had freed everything.
TEST_P(EveryKind, FreesWithTheirFencePendingAreReportedAsFreedAtExit) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"loop", "17", "4096"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << r.stats.dump();
  EXPECT_EQ(s["memory_stats"]["active.all.current"].get<int>(), 0) << s.dump();
  EXPECT_EQ(s["memory_stats"]["allocation.all.current"].get<int>(), 0) << s.dump();
  EXPECT_EQ(s["pending_free_blocks"].get<int>() + s["free_blocks"].get<int>() > 0, true) << s.dump();
}

// Regression: a child forked after luma started but before it served anything (Python
// multiprocessing workers) printed no statistics when ended by SIGTERM: the fork took the
// signal handler away and nothing put it back.
TEST(Fork, AChildForkedBeforeServingWritesItsStatisticsOnSigterm) {
  REQUIRE_PROGRAMS();
  // GCC 12's AddressSanitizer allocator takes no lock across fork: a child forked while
  // another thread of the parent held it waits for it forever (seen: every thread of the
  // child, luma's flusher included, in SizeClassAllocator64::GetFromAllocator). Covered by
  // the normal pass.
  if (setting("LUMA_IT_SANITIZE").find("address") != std::string::npos)
    GTEST_SKIP() << "AddressSanitizer's allocator is not fork-safe in this toolchain";
  LumaRun r = run_under_luma("driver", {"fork-before-serving"});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  ASSERT_TRUE(r.stats.is_object()) << "no statistics from the child\n" << describe(r.result);
  EXPECT_EQ(r.stats.value("ended_by", ""), "SIGTERM") << r.stats.dump();
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << r.stats.dump();
  EXPECT_EQ(s["alloc_calls"].get<int>(), 8) << s.dump();
}

TEST_P(EveryKind, DisabledLumaForwardsEverything) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"loop", "1000", "4096"}, {{"LUMA_DISABLE", "1"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_TRUE(r.stats.is_null());
  EXPECT_EQ(device_counters(r.counters, 0)["mem_alloc_calls"].get<int>(), 1000);
}

// ---- memory limits (LUMA_CONF memory_limit, memory_fraction, limit_group) -----------

constexpr unsigned long long kMiB = 1ull << 20;

// The "limit" mode's line: total and free before, chunks that fit, free at the limit,
// free after freeing them all.
struct LimitLine {
  unsigned long long t0 = 0, f0 = 0, n = 0, chunk = 0, f1 = 0, t1 = 0, f2 = 0, t2 = 0;
};

bool parse_limit_line(const std::string& out, LimitLine* l) {
  const std::size_t at = out.find("limit: ");
  return at != std::string::npos &&
         std::sscanf(out.c_str() + at,
                     "limit: total %llu free %llu; %llu chunks of %llu; at the limit free %llu "
                     "total %llu; after freeing free %llu total %llu",
                     &l->t0, &l->f0, &l->n, &l->chunk, &l->f1, &l->t1, &l->f2, &l->t2) == 8;
}

// 64 MiB of a 1 GiB device: the limit is the total, four 16 MiB chunks fit only once the
// cached small segment was released, the fifth fails with out-of-memory (2) as at a real
// OOM - and the driver never refused anything.
TEST_P(EveryKind, MemoryLimitIsTheTotalAndAllocationsPastItFailAfterTheCacheWasReleased) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"limit", std::to_string(16 * kMiB)},
                             {{"LUMA_CONF", "memory_limit:64M"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  LimitLine l;
  ASSERT_TRUE(parse_limit_line(r.result.out, &l)) << r.result.out;
  EXPECT_EQ(l.t0, 64 * kMiB);
  EXPECT_EQ(l.f0, 64 * kMiB);
  EXPECT_EQ(l.n, 4u);
  EXPECT_EQ(l.f1, 0u);
  EXPECT_EQ(l.f2, 64 * kMiB);  // the chunks are cached, and free to the program
  const json& s = device_stats(r.stats, 0);
  ASSERT_TRUE(s.is_object()) << r.stats.dump();
  EXPECT_EQ(s["memory_stats"]["num_ooms"].get<int>(), 1) << s.dump();
  EXPECT_GE(s["memory_stats"]["num_alloc_retries"].get<int>(), 1) << s.dump();
  EXPECT_GE(s["cuda_free_calls"].get<int>(), 1) << "the cached segment was never released";
  EXPECT_EQ(count_of(r.result.err, "CUDA out of memory."), 1u) << r.result.err;
  EXPECT_NE(r.result.err.find("luma's memory limit on this device is 64.0 MiB."), std::string::npos)
      << r.result.err;
  EXPECT_EQ(device_counters(r.counters, 0)["failed_allocs"].get<int>(), 0) << r.counters.dump();
  EXPECT_LE(device_counters(r.counters, 0)["peak_bytes"].get<unsigned long long>(), 64 * kMiB);
}

// memory_fraction of the device's size (cuDeviceTotalMem): a quarter of 256 MiB.
TEST(MemoryLimits, FractionOfTheDevice) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"limit", std::to_string(16 * kMiB)},
                             {{"LUMA_CONF", "memory_fraction:0.25"},
                              {"LUMA_FAKE_CAPACITY", std::to_string(256 * kMiB)}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  LimitLine l;
  ASSERT_TRUE(parse_limit_line(r.result.out, &l)) << r.result.out;
  EXPECT_EQ(l.t0, 64 * kMiB);
  EXPECT_EQ(l.n, 4u);
  EXPECT_EQ(device_counters(r.counters, 0)["failed_allocs"].get<int>(), 0);
}

// A limit above the device: the device's own total and free, never more.
TEST(MemoryLimits, LimitAboveTheDeviceShowsTheDevice) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("shared", {"limit", std::to_string(16 * kMiB)},
                             {{"LUMA_CONF", "memory_limit:1G"},
                              {"LUMA_FAKE_CAPACITY", std::to_string(32 * kMiB)}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  LimitLine l;
  ASSERT_TRUE(parse_limit_line(r.result.out, &l)) << r.result.out;
  EXPECT_EQ(l.t0, 32 * kMiB);
  EXPECT_LE(l.f0, 32 * kMiB);
  EXPECT_GE(l.n, 1u);
  EXPECT_LT(l.f1, 16 * kMiB);
}

// Two processes of one limit_group share its 64 MiB: the other holds one 16 MiB chunk, so
// this one gets three; the other is killed with SIGKILL (no exit handler runs) and its
// chunk's share comes back to the group.
TEST(MemoryLimits, GroupMembersShareTheLimitAndAKilledMemberGivesItsShareBack) {
  REQUIRE_PROGRAMS();
  const std::string group = "it" + std::to_string(getpid());
  const std::string object = "/dev/shm/luma." + group + "." + std::to_string(getuid());
  LumaRun r = run_under_luma("driver", {"group-share", std::to_string(16 * kMiB), "1"},
                             {{"LUMA_CONF", "memory_limit:64M,limit_group:" + group}});
  const bool made = access(object.c_str(), F_OK) == 0;
  std::remove(object.c_str());
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_TRUE(made) << object;
  unsigned long long member = 0, chunk = 0, mine = 0, after = 0;
  const std::size_t at = r.result.out.find("group-share: ");
  ASSERT_NE(at, std::string::npos) << r.result.out;
  ASSERT_EQ(std::sscanf(r.result.out.c_str() + at,
                        "group-share: member held %llu chunks of %llu; this process got %llu; "
                        "after the member was killed %llu more",
                        &member, &chunk, &mine, &after),
            4)
      << r.result.out;
  EXPECT_EQ(member, 1u);
  EXPECT_EQ(mine, 3u);
  EXPECT_EQ(after, 1u);
}

// Shared memory that cannot be used (here: an object of another layout under the group's
// name): one line says so, and the limit still holds for the process alone.
TEST(MemoryLimits, UnusableSharedMemoryIsOneLineThenAProcessLimit) {
  REQUIRE_PROGRAMS();
  const std::string group = "itbad" + std::to_string(getpid());
  const std::string object = "/dev/shm/luma." + group + "." + std::to_string(getuid());
  if (FILE* f = std::fopen(object.c_str(), "w")) {
    std::fputs("not a luma group table", f);
    std::fclose(f);
  } else {
    GTEST_SKIP() << "no /dev/shm";
  }
  LumaRun r = run_under_luma("driver", {"limit", std::to_string(16 * kMiB)},
                             {{"LUMA_CONF", "memory_limit:64M,limit_group:" + group}});
  std::remove(object.c_str());
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(count(r.result.err, "limit_group:" + group), 1) << r.result.err;
  EXPECT_EQ(count(r.result.err, "another layout"), 1) << r.result.err;
  LimitLine l;
  ASSERT_TRUE(parse_limit_line(r.result.out, &l)) << r.result.out;
  EXPECT_EQ(l.t0, 64 * kMiB);
  EXPECT_EQ(l.n, 4u);
}

// A group table that others may write (made first by another user, or with a careless
// umask) could set the group's budget for every member: it is refused with one line, and
// the limit holds for the process alone.
TEST(MemoryLimits, AGroupTableOthersMayWriteIsOneLineThenAProcessLimit) {
  REQUIRE_PROGRAMS();
  const std::string group = "itopen" + std::to_string(getpid());
  const std::string object = "/dev/shm/luma." + group + "." + std::to_string(getuid());
  const int fd = ::open(object.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) GTEST_SKIP() << "no /dev/shm";
  ASSERT_EQ(fchmod(fd, 0666), 0);
  ::close(fd);
  LumaRun r = run_under_luma("driver", {"limit", std::to_string(16 * kMiB)},
                             {{"LUMA_CONF", "memory_limit:64M,limit_group:" + group}});
  struct stat st {};
  const bool sized = ::stat(object.c_str(), &st) == 0 && st.st_size != 0;
  std::remove(object.c_str());
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(count(r.result.err, "limit_group:" + group), 1) << r.result.err;
  EXPECT_EQ(count(r.result.err, "is writable by others (mode 0666)"), 1) << r.result.err;
  EXPECT_FALSE(sized) << "the refused table was used";
  LimitLine l;
  ASSERT_TRUE(parse_limit_line(r.result.out, &l)) << r.result.out;
  EXPECT_EQ(l.t0, 64 * kMiB);
  EXPECT_EQ(l.n, 4u);
}

// A reset device's memory went with its context: its share of the limit comes back, so
// the re-made context can reserve the same 22 MiB (a 2 MiB small and a 20 MiB large
// segment) under a 22 MiB limit.
TEST_P(EveryKind, DeviceResetGivesTheMemoryBackToTheLimit) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"reset"}, {{"LUMA_CONF", "memory_limit:22M"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  int ooms = 0;
  for (const json& d : r.stats["devices"]) ooms += d["memory_stats"]["num_ooms"].get<int>();
  EXPECT_EQ(ooms, 0) << r.stats.dump();
}

// The same two processes without a group: each has the whole limit.
TEST(MemoryLimits, WithoutAGroupEachProcessHasItsOwnLimit) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"group-share", std::to_string(16 * kMiB), "1"},
                             {{"LUMA_CONF", "memory_limit:64M"}});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("this process got 4; after the member was killed 0 more"),
            std::string::npos)
      << r.result.out;
}

TEST(MemoryLimits, BadLimitSettingsAreNamedAndTheProgramRunsOn) {
  REQUIRE_PROGRAMS();
  Result r = run({paths().prog("driver"), "loop", "10", "4096"},
                 luma_env({{"LUMA_CONF", "memory_fraction:1.5,limit_group:a/b"},
                           {"LUMA_STATS", "off"}}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count(r.err, "memory_fraction: bad value '1.5'"), 1) << r.err;
  EXPECT_EQ(count(r.err, "limit_group: bad value 'a/b'"), 1) << r.err;
}

// ---- expandable segments (LUMA_CONF=expandable_segments:1) ---------------------------
// Each pool's memory is pages mapped into address space it reserved once
// (shim/device/driver_device.h; docs/placement.md, "Expandable segments"). The stand-in's exit
// report says which driver calls were made and what virtual memory is still held.

const Env kExpandable = {{"LUMA_CONF", "expandable_segments:1"}};

std::uint64_t vmm_held(const LumaRun& r, const char* what) {
  if (!r.counters.is_object() || !r.counters.contains("vmm")) return ~std::uint64_t{0};
  return r.counters["vmm"].value(what, ~std::uint64_t{0});
}

// What luma counts as reserved on device 0 is exactly what the driver holds for it: the
// bytes of every cuMemCreate not yet given back, and no cuMemAlloc memory. Nothing is held
// that luma does not know of (memory leaked by a lost handle, a range not freed).
void expect_held_is_reserved(const LumaRun& r) {
  std::uint64_t reserved = 0;
  for (const json& d : r.stats["devices"])
    if (d.value("device", -1) == 0) reserved += d["reserved_bytes"].get<std::uint64_t>();
  ASSERT_TRUE(r.counters.is_object() && r.counters.contains("vmm")) << r.counters.dump();
  EXPECT_EQ(r.counters["vmm"]["physical_bytes"][0].get<std::uint64_t>(), reserved)
      << r.counters.dump() << r.stats.dump();
  EXPECT_EQ(device_counters(r.counters, 0)["live_bytes"].get<std::uint64_t>(), 0u) << r.counters.dump();
}

// Blocks of sizes across page boundaries, each written whole with its own tag and read
// back byte by byte after every other block was written, then half freed and others placed
// among the rest: no two blocks share a byte, and copies run across pages. With the driver
// API every byte of a block names the block as its range (cuMemGetAddressRange,
// cuPointerGetAttribute(s): the driver alone would name one memory) and every device may
// read and write it. No cuMemAlloc is made for ordinary allocations.
TEST_P(EveryKind, ExpandableSegmentsKeepBlocksAcrossPagesIntact) {
  REQUIRE_PROGRAMS();
  std::vector<std::string> args{"pages", "3"};
  if (GetParam() == "driver") args.push_back("peers");
  LumaRun r = run_under_luma(GetParam(), args, kExpandable);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("every block's bytes intact"), std::string::npos) << r.result.out;
  EXPECT_EQ(device_counters(r.counters, 0)["mem_alloc_calls"].get<int>(), 0) << r.counters.dump();
  EXPECT_GE(driver_calls(r, "cuMemCreate"), 1u) << r.counters.dump();
  EXPECT_EQ(driver_calls(r, "cuMemMap"), driver_calls(r, "cuMemSetAccess")) << r.counters.dump();
  expect_held_is_reserved(r);
  EXPECT_TRUE(r.result.err.empty()) << r.result.err;
}

// Loops of allocations reuse the pages they mapped: at most one cuMemCreate per 50
// allocations (a handful for thousands), none of cuMemAlloc; threads writing and checking
// their blocks likewise make no cuMemAlloc.
TEST_P(EveryKind, ExpandableSegmentsMakeFewDriverAllocations) {
  REQUIRE_PROGRAMS();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"loop", "1000", "1048576"}, {"loop-mixed", "2000"}, {"stress", "4", "300"}}) {
    LumaRun r = run_under_luma(GetParam(), args, kExpandable);
    ASSERT_EQ(r.result.exit_code, 0) << args[0] << "\n" << describe(r.result);
    const std::uint64_t allocations = device_stats(r.stats, 0)["alloc_calls"].get<std::uint64_t>();
    if (args[0] != "stress") {
      EXPECT_GE(allocations, 1000u) << args[0];
      EXPECT_LE(driver_calls(r, "cuMemCreate") * 50, allocations) << args[0] << " " << r.counters.dump();
    }
    EXPECT_GE(driver_calls(r, "cuMemCreate"), 1u) << args[0] << " " << r.counters.dump();
    EXPECT_EQ(device_counters(r.counters, 0)["mem_alloc_calls"].get<int>(), 0) << args[0] << " " << r.counters.dump();
    expect_held_is_reserved(r);
  }
}

// Out of memory with expandable segments: the free pages are unmapped and the memory made
// again where it is needed; the program recovers, and what the driver holds at the end is
// what luma counts.
TEST_P(EveryKind, ExpandableSegmentsRecoverFromOutOfMemory) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma(GetParam(), {"oom"}, kExpandable);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("recovered"), std::string::npos) << r.result.out;
  EXPECT_EQ(device_counters(r.counters, 0)["mem_alloc_calls"].get<int>(), 0) << r.counters.dump();
  expect_held_is_reserved(r);
}

// Contexts destroyed with pages mapped: their pages, handles and address ranges go back to
// the driver (which, on the stand-in, keeps virtual memory past a context); at exit the
// driver holds only what the one live context's allocator counts. Without the give-back
// the three created contexts and the first primary one left theirs behind (8 ranges).
TEST(ExpandableSegments, DestroyedContextsGiveTheirVirtualMemoryBack) {
  REQUIRE_PROGRAMS();
  LumaRun r = run_under_luma("driver", {"contexts"}, kExpandable);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_LE(vmm_held(r, "reservations"), 2u) << r.counters.dump();
  EXPECT_EQ(vmm_held(r, "handles"), vmm_held(r, "mappings")) << r.counters.dump();
  EXPECT_EQ(driver_calls(r, "cuMemAddressReserve") - driver_calls(r, "cuMemAddressFree"), vmm_held(r, "reservations"))
      << r.counters.dump();
  expect_held_is_reserved(r);
  LumaRun reset = run_under_luma("driver", {"reset"}, kExpandable);
  ASSERT_EQ(reset.result.exit_code, 0) << describe(reset.result);
  expect_held_is_reserved(reset);
}

// The stream-capture programs get the driver's answers with expandable segments as
// without: luma's own page calls during a capture run in relaxed mode and invalidate
// nothing, and nothing is unmapped while a capture is underway.
TEST(ExpandableSegments, CapturePatternsGetTheDriversAnswers) {
  REQUIRE_PROGRAMS();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"graph-pattern", "20"}, {"capture-global"}, {"capture-free-async"},
        {"capture-other-threads"}, {"capture-invalidated-free"}, {"capture-blocking"},
        {"capture-to-graph"}}) {
    Result plain = run_plain("driver", args);
    ASSERT_EQ(plain.exit_code, 0) << "without luma\n" << describe(plain);
    LumaRun r = run_under_luma("driver", args, kExpandable);
    ASSERT_EQ(r.result.exit_code, 0) << args[0] << "\n" << describe(r.result);
    EXPECT_EQ(r.result.out, plain.out) << args[0];
    EXPECT_TRUE(r.result.err.empty()) << args[0] << "\n" << r.result.err;
    expect_held_is_reserved(r);
  }
}

// Legacy IPC cannot export virtual memory: cuIpcGetMemHandle of a block of an expandable
// segment gets the driver's own refusal (CUDA_ERROR_INVALID_VALUE) and one line naming
// the settings that help. With ipc_own_segment an allocation of that size or more is a
// cuMemAlloc segment of its own: it exports, and CUDA's simpleIPC pattern works.
TEST(ExpandableSegments, IpcOfABlockGetsTheDriversRefusalAndTheWayOut) {
  REQUIRE_PROGRAMS();
  Result plain = run_plain("driver", {"ipc-answer", "4096"});
  ASSERT_EQ(plain.exit_code, 0) << describe(plain);
  EXPECT_NE(plain.out.find("bytes: 0"), std::string::npos) << plain.out;
  LumaRun r = run_under_luma("driver", {"ipc-answer", "4096"}, kExpandable);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_NE(r.result.out.find("bytes: 1"), std::string::npos) << r.result.out;
  EXPECT_EQ(count(r.result.err, "LUMA_CONF=ipc_own_segment:SIZE"), 1) << r.result.err;
  EXPECT_EQ(count(r.result.err, "expandable_segments:0"), 1) << r.result.err;
  EXPECT_EQ(r.result.err.find(kIpcInsideSegmentWarning), std::string::npos) << r.result.err;

  const Env own = {{"LUMA_CONF", "expandable_segments:1,ipc_own_segment:1M"}};
  LumaRun exported = run_under_luma("driver", {"ipc-answer", "2097152"}, own);
  ASSERT_EQ(exported.result.exit_code, 0) << describe(exported.result);
  EXPECT_NE(exported.result.out.find("bytes: 0"), std::string::npos) << exported.result.out;
  EXPECT_TRUE(exported.result.err.empty()) << exported.result.err;
  Result simple_plain = run_plain("driver", {"ipc-simple", "2097152"});
  ASSERT_EQ(simple_plain.exit_code, 0) << describe(simple_plain);
  LumaRun simple = run_under_luma("driver", {"ipc-simple", "2097152"}, own);
  ASSERT_EQ(simple.result.exit_code, 0) << describe(simple.result);
  EXPECT_EQ(simple.result.out, simple_plain.out);
}

INSTANTIATE_TEST_SUITE_P(Programs, EveryKind,
                         ::testing::Values("static", "shared", "dlopen", "driver"),
                         [](const auto& info) { return info.param; });

// ---- harmless where CUDA is not used -------------------------------------------------

void expect_unchanged(const std::vector<std::string>& argv) {
  Result plain = run(argv, clean_env());
  Result preloaded = run(argv, luma_env());
  EXPECT_EQ(preloaded.exit_code, plain.exit_code) << argv[0];
  EXPECT_EQ(preloaded.out, plain.out) << argv[0];
  EXPECT_EQ(preloaded.err, "") << argv[0];
  EXPECT_EQ(plain.err, "") << argv[0];
}

// A library that wraps driver functions and forwards with dlsym(RTLD_NEXT) (profilers,
// GPU-sharing layers) gets the next definition after itself, as without luma: a served
// name (cuMemAlloc_v2) and one luma does not serve (cuDeviceGetCount). Answered from
// inside libluma.so, "next" would be the wrapper again (exit 9: endless recursion).
TEST(Interposers, AWrapperForwardingWithRtldNextReachesTheDriver) {
  if (paths().rtld_next_prog.empty() || paths().lib.empty()) GTEST_SKIP() << "not built";
  Result plain = run({paths().rtld_next_prog}, clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}}));
  ASSERT_EQ(plain.exit_code, 0) << describe(plain);
  Result r = run({paths().rtld_next_prog}, luma_env());
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("alloc and free ok"), std::string::npos) << r.out;
}

TEST(Harmless, LsIsUnchanged) {
  if (paths().lib.empty()) GTEST_SKIP();
  // A directory nothing else changes while tests run in parallel (/ holds /proc and /tmp,
  // whose link counts move): the headers of a package the build depends on.
  expect_unchanged({"ls", "-la", "/usr/include/fmt"});
  expect_unchanged({"ls", "/"});
}

TEST(Harmless, PythonIsUnchanged) {
  if (paths().lib.empty()) GTEST_SKIP();
  if (run({"python3", "-c", "1"}, clean_env()).exit_code != 0) GTEST_SKIP() << "no python3";
  expect_unchanged({"python3", "-c", "1"});
  expect_unchanged({"python3", "-c", "import ctypes, sys; print(sys.version_info[0])"});
}

// Regression: scripts/demo sends the stand-in's counters to /dev/stdout. Reopened with
// O_TRUNC, that emptied the log the demo's output was redirected to and wrote over it from
// byte 0, leaving NUL bytes where the rest had been. The counters must come after the
// program's output, the same in a file as in a pipe.
TEST(Harmless, CountersOnTheProgramsOwnStdoutFollowItsOutputInAFileAndAPipe) {
  REQUIRE_PROGRAMS();
  const std::string dir = temp_dir();
  const std::string log = dir + "/demo.log";
  const std::string line = "echo head; LUMA_FAKE_COUNTERS=/dev/stdout LUMA_STATS=off '" +
                           paths().prog("static") + "' loop-mixed 50";
  Result to_file = run({"/bin/sh", "-c", "{ " + line + "; } > '" + log + "'"}, luma_env());
  ASSERT_EQ(to_file.exit_code, 0) << to_file.err;
  Result to_pipe = run({"/bin/sh", "-c", line}, luma_env());  // stdout: the harness's pipe
  ASSERT_EQ(to_pipe.exit_code, 0) << to_pipe.err;
  std::string written;
  if (FILE* f = std::fopen(log.c_str(), "rb")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) written.append(buf, n);
    std::fclose(f);
  }
  EXPECT_EQ(written.find('\0'), std::string::npos) << "NUL bytes in the log";
  EXPECT_EQ(written, to_pipe.out);
  const std::size_t head = written.find("head\n"), ok = written.find("loop-mixed: 50"),
                    counters = written.find("{\"devices\"");
  ASSERT_EQ(head, 0u) << written;
  ASSERT_NE(ok, std::string::npos) << written;
  ASSERT_NE(counters, std::string::npos) << written;
  EXPECT_LT(ok, counters) << written;
  EXPECT_TRUE(json::parse(written.substr(counters), nullptr, false).is_object()) << written;
}

TEST(Harmless, ProgramWithoutCudaIsUnchanged) {
  REQUIRE_PROGRAMS();
  expect_unchanged({paths().prog("nocuda")});
  EXPECT_EQ(run({paths().prog("nocuda")}, luma_env()).exit_code, 7);
}

TEST(Harmless, HostSpdlogAndFmtAreUndisturbed) {
  if (paths().lib.empty() || paths().host_spdlog.empty()) GTEST_SKIP();
  Result plain = run({paths().host_spdlog}, clean_env());
  ASSERT_EQ(plain.exit_code, 0) << describe(plain);
  ASSERT_NE(plain.out.find("[host] info: 1 + 2 = 3"), std::string::npos) << plain.out;
  Result preloaded = run({paths().host_spdlog}, luma_env({{"LUMA_LOG_LEVEL", "trace"}}));
  EXPECT_EQ(preloaded.exit_code, 0);
  EXPECT_EQ(preloaded.out, plain.out);
  EXPECT_EQ(preloaded.err, "");
}

// ---- the library itself --------------------------------------------------------------

TEST(Library, ExportsExactlyTheInterposedSymbols) {
  if (paths().lib.empty() || paths().nm.empty()) GTEST_SKIP();
  Result r = run({paths().nm, "-D", "--defined-only", paths().lib}, clean_env());
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::set<std::string> got;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    auto sp = line.rfind(' ');
    if (sp != std::string::npos) got.insert(line.substr(sp + 1));
  }
  // dlsym, luma_footprint (luma's own records, shim/observe/footprint.cpp) and every hook of the
  // one table (shim/driver/entry_points.h): the generated export list must give exactly these, and
  // nothing of spdlog, fmt or the core may leak.
  std::set<std::string> want = {"dlsym", "luma_footprint"};
#define LUMA_WANT_EXPORT(id, symbol, ...) want.insert(#symbol);
  LUMA_HOOKS(LUMA_WANT_EXPORT)
#undef LUMA_WANT_EXPORT
  for (const char* core_hook : {"cuGetProcAddress_v2", "cuMemAlloc_v2", "cuMemFree_v2"})
    EXPECT_EQ(want.count(core_hook), 1u) << core_hook << " left the table";
  EXPECT_EQ(got, want) << r.out;
}

TEST(Library, NeedsOnlyTheCAndCxxRuntime) {
  if (paths().lib.empty() || paths().ldd.empty()) GTEST_SKIP();
  Result r = run({paths().ldd, paths().lib}, clean_env());
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::vector<std::string> allowed = {"linux-vdso", "libc.so", "libstdc++.so",
                                      "libgcc_s.so", "libm.so", "ld-linux"};
  // A sanitizer build (scripts/sanitize) links its runtimes, and nothing else.
  if (setting("LUMA_IT_SANITIZE") != "none" && !setting("LUMA_IT_SANITIZE").empty())
    allowed.insert(allowed.end(), {"libasan.so", "libubsan.so", "libtsan.so"});
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    bool ok = std::any_of(allowed.begin(), allowed.end(),
                          [&](const std::string& a) { return line.find(a) != std::string::npos; });
    EXPECT_TRUE(ok) << "unexpected dependency: " << line;
  }
}

TEST(Library, CudaVersionDecidesWhichAbiIsHandedOut) {
  if (paths().lib.empty() || paths().probe.empty()) GTEST_SKIP();
  Result r = run({paths().probe}, luma_env());
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto line = [&](const std::string& prefix) {
    auto pos = r.out.find(prefix + " -> ");
    if (pos == std::string::npos) return std::string("missing");
    auto end = r.out.find_first_of(" \n", pos + prefix.size() + 4);
    return r.out.substr(pos + prefix.size() + 4, end - pos - prefix.size() - 4);
  };
  EXPECT_EQ(line("dlsym cuGetProcAddress_v2"), "libluma.so");
  EXPECT_EQ(line("dlsym cuMemAlloc_v2"), "libluma.so");
  EXPECT_EQ(line("dlsym cuInit"), "libcuda.so.1");
  EXPECT_EQ(line("cuGetProcAddress 12000 0"), "libluma.so");
  EXPECT_EQ(line("cuGetProcAddress 11030 0"), "libluma.so");
  EXPECT_EQ(line("cuMemAlloc 2000 0"), "libcuda.so.1");  // the 32-bit v1 ABI: the driver's
  EXPECT_EQ(line("cuMemFree 2000 0"), "libcuda.so.1");
  EXPECT_EQ(line("cuMemAlloc 3020 0"), "libluma.so");
  EXPECT_EQ(line("cuMemAlloc 3020 2"), "libluma.so");  // per-thread default stream flag
  EXPECT_EQ(line("cuMemFree 3020 0"), "libluma.so");
  EXPECT_EQ(line("cuMemFree 3020 2"), "libluma.so");
  EXPECT_EQ(line("cuMemGetInfo 3020 0"), "libluma.so");
  // The driver's own pool, managed and pinned host memory: forwarded by luma's functions,
  // which count them (shim/observe/forwarded_paths.h); before CUDA 11.2 there is no cuMemAllocAsync.
  EXPECT_EQ(line("cuMemAllocAsync 11020 0"), "libluma.so");
  EXPECT_EQ(line("cuMemAllocAsync 11020 2"), "libluma.so");
  EXPECT_NE(line("cuMemAllocAsync 11010 0"), "libluma.so");
  EXPECT_EQ(line("cuMemAllocHost 3020 0"), "libluma.so");
  EXPECT_EQ(line("cuMemHostAlloc 2020 0"), "libluma.so");
  EXPECT_EQ(line("cuMemFreeHost 2000 0"), "libluma.so");
  EXPECT_EQ(line("cuMemAllocManaged 6000 0"), "libluma.so");
  // A stream-ordered free may name a luma block: luma's, for both twins; before CUDA 11.2
  // there is no such function and the driver's answer stands.
  EXPECT_EQ(line("cuMemFreeAsync 11020 2"), "libluma.so");
  EXPECT_EQ(line("cuMemFreeAsync 11020 0"), "libluma.so");
  EXPECT_NE(line("cuMemFreeAsync 11010 0"), "libluma.so");
  EXPECT_EQ(line("cuStreamCreate 2000 0"), "libluma.so");
  EXPECT_EQ(line("cuStreamDestroy 4000 0"), "libluma.so");
  EXPECT_EQ(line("cuCtxSynchronize 2000 0"), "libcuda.so.1");
  EXPECT_EQ(line("cuInit 2000 0"), "libcuda.so.1");
  // Without luma every answer is the driver's.
  Result plain = run({paths().probe}, clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}}));
  EXPECT_EQ(count(plain.out, "libluma"), 0) << plain.out;
}

}  // namespace
}  // namespace luma::integration
