// capture_replay_test.cpp - the whole loop in core, on host memory: capture a sample
// program's trace on the caching allocator, read it (requested bytes and fingerprint),
// plan it, write and read the plan file, then run the same program on the plan: the same
// results, one real allocation per device, the same offsets, identical addresses across two
// replays on a deterministic device; a periodic plan serves ten times the captured steps; a
// divergence in the middle falls back with the results unchanged; the replayed run can be
// traced and its trace planned again; a plan for another program is refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "plan/plan_file.h"
#include "plan/plan_fingerprint.h"
#include "planner/input/trace_lifetime_reader.h"
#include "planner/periodic.h"
#include "planner/planner.h"
#include "replay/replay_stats_format.h"
#include "replay_test_util.h"
#include "sample_program.h"

namespace luma::core {
namespace {

using testing::capture_sample;
using testing::HostMemory;
using testing::run_sample_program;
using testing::temp_file;

const std::vector<std::string> kCommand = {"./sample", "--steps", "4"};

SearchOptions quick() {
  SearchOptions o;
  o.max_iterations = 2000;
  return o;
}

// The plan `luma plan -o` would write for the trace at `path` (periodic or not).
PlanFile plan_trace(const std::string& path, bool periodic) {
  const TraceAllocations run = read_trace_allocations_file(path, true);
  PlanFile file;
  file.input = path;
  file.fingerprint = run.fingerprint;
  for (int d : devices_of(run.lifetimes)) {
    const DeviceAllocations a = allocations_of_device(run, d);
    DevicePlanFile dp;
    dp.device = d;
    std::vector<Lifetime> lts = a.lifetimes;
    std::vector<std::uint64_t> requested = a.requested;
    PlanReport report;
    if (periodic) {
      const AllocationSequence seq = allocation_sequence(a.lifetimes, a.requested);
      const PeriodSearch found = find_period(seq);
      EXPECT_TRUE(found.found);
      if (!found.found) return file;
      const PeriodicPlan pp = plan_periodic(a.lifetimes, seq, *found.found, Strategy::best, quick());
      lts = pp.slots;
      requested = pp.slot_key;
      report = pp.report;
      dp.periodic = PeriodicLayout{pp.warmup, pp.period, pp.detected_warmup, pp.captured_iterations,
                                   pp.boundary_bytes};
    } else {
      report = plan_lifetimes(lts, Strategy::best, quick());
    }
    dp.arena = report.chosen.arena;
    dp.lower_bound = report.lower_bound;
    dp.strategy = report.chosen.strategy;
    for (std::size_t k = 0; k < lts.size(); ++k)
      dp.allocations.push_back({lts[k].id, requested[k], lts[k].size, report.chosen.offsets[k], lts[k].lower,
                                lts[k].upper});
    file.devices.push_back(std::move(dp));
  }
  // Through the file, as the shim will read it.
  const std::string plan_path = path + ".plan.json";
  write_plan_file(plan_path, file);
  PlanFile read = read_plan_file(plan_path);
  std::remove(plan_path.c_str());
  return read;
}

TEST(CaptureReplay, TheReplayedProgramComputesTheSameWithOneRealAllocationPerDevice) {
  const std::string trace = temp_file("capture.trace");
  const std::vector<std::uint64_t> expected = capture_sample(trace, 2, 4, kCommand);
  ASSERT_FALSE(expected.empty());
  const PlanFile plan = plan_trace(trace, false);
  ASSERT_EQ(plan.devices.size(), 2u);
  ASSERT_TRUE(plan.fingerprint);
  EXPECT_EQ(plan.fingerprint->executable, "./sample");
  EXPECT_EQ(plan.devices[0].allocations[0].requested, 100000u);
  EXPECT_EQ(plan.devices[0].allocations[0].size, 100096u);

  HostMemory replay(2, &plan);
  EXPECT_EQ(run_sample_program(replay, 2, 4), expected);
  for (int d = 0; d < 2; ++d) {
    const ReplayStats s = replay.allocator(d).replay_stats();
    EXPECT_TRUE(s.followed()) << describe_divergence(s.first_divergence);
    EXPECT_EQ(s.served, plan.devices[static_cast<std::size_t>(d)].allocations.size());
    EXPECT_EQ(s.real_allocations, 1u);
    EXPECT_EQ(replay.device(d).reserve_calls(), 1u);
    LUMA_REPLAY_CLEAN(replay.allocator(d));
  }
  std::remove(trace.c_str());
}

// Records the offsets (from the arena base) and addresses a run is served at.
class AddressLog final : public EventSink {
 public:
  void on_event(const Event& e) noexcept override {
    if (e.kind == EventKind::segment_reserve && base == 0) base = e.address;
    if (e.kind == EventKind::alloc) addresses.push_back(e.address);
  }
  std::uint64_t base = 0;
  std::vector<std::uint64_t> addresses;
};

TEST(CaptureReplay, TwoReplaysServeTheSameAddresses) {
  const std::string trace = temp_file("twice.trace");
  const std::vector<std::uint64_t> expected = capture_sample(trace, 1, 3, kCommand);
  const PlanFile plan = plan_trace(trace, false);
  testing::FixedBaseDevice dev(1 << 24);
  std::vector<std::vector<std::uint64_t>> runs;
  for (int run = 0; run < 2; ++run) {
    AddressLog log;
    ContextAllocator a(dev, 0, {}, &plan);
    a.set_event_sink(&log);
    struct Memory final : testing::ProgramMemory {
      ContextAllocator& a;
      explicit Memory(ContextAllocator& x) : a(x) {}
      void* alloc(int, std::size_t n) override { return a.allocate(n).ptr; }
      void release(int, void* p) override { EXPECT_EQ(a.free(p), FreeStatus::ok); }
    } memory(a);
    EXPECT_EQ(run_sample_program(memory, 1, 3), expected);
    EXPECT_TRUE(a.following_plan());
    // Every address is the arena base plus the planned offset.
    ASSERT_EQ(log.addresses.size(), plan.devices[0].allocations.size());
    for (std::size_t k = 0; k < log.addresses.size(); ++k)
      EXPECT_EQ(log.addresses[k] - log.base, plan.devices[0].allocations[k].offset) << k;
    runs.push_back(log.addresses);
    a.release_all();  // the process ends
  }
  EXPECT_EQ(runs[0], runs[1]);
  std::remove(trace.c_str());
}

TEST(CaptureReplay, APeriodicPlanServesTenTimesTheCapturedSteps) {
  const std::string trace = temp_file("periodic.trace");
  capture_sample(trace, 2, 4, kCommand);
  const PlanFile plan = plan_trace(trace, true);
  ASSERT_EQ(plan.devices.size(), 2u);
  for (const DevicePlanFile& d : plan.devices) {
    ASSERT_TRUE(d.periodic);
    EXPECT_EQ(d.periodic->period, 3u);  // activation, temporary, gradient
    EXPECT_EQ(d.periodic->detected_warmup, 3u);  // the weights
    EXPECT_EQ(d.periodic->captured_iterations, 4u);
  }
  // The same program, ten times longer, on the 4-step plan; compared with a plain run.
  HostMemory plain(2, nullptr);
  const std::vector<std::uint64_t> expected = run_sample_program(plain, 2, 40);
  HostMemory replay(2, &plan, nullptr, /*fences=*/true);
  EXPECT_EQ(run_sample_program(replay, 2, 40), expected);
  for (int d = 0; d < 2; ++d) {
    const ReplayStats s = replay.allocator(d).replay_stats();
    EXPECT_TRUE(s.followed()) << describe_divergence(s.first_divergence);
    EXPECT_EQ(s.served, 3u + 3u * 40u);
    EXPECT_EQ(s.iterations, 40u);
    EXPECT_EQ(s.real_allocations, 1u);
    EXPECT_EQ(replay.device(d).contract_violations(), 0u);
    LUMA_REPLAY_CLEAN(replay.allocator(d));
  }
  // What the exit statistics will say.
  const std::vector<ReplayStats> stats = {replay.allocator(0).replay_stats(), replay.allocator(1).replay_stats()};
  const std::string text = format_replay_text({"plan.json", true, ""}, stats);
  EXPECT_NE(text.find("luma: plan replay (plan.json): served from the plan: yes\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  device 1: served from the plan: yes; 123 allocations from the plan (warm-up 3, then 40 "
                      "full iteration(s) of a 3-allocation period); real allocations 1 (arena "),
            std::string::npos)
      << text;
  const nlohmann::json json = nlohmann::json::parse(format_replay_json({"plan.json", true, ""}, stats));
  EXPECT_EQ(json["served_from_plan"], true);
  EXPECT_EQ(json["divergences"], 0);
  ASSERT_EQ(json["devices"].size(), 2u);
  EXPECT_EQ(json["devices"][1]["iterations"], 40);
  EXPECT_EQ(json["devices"][1]["real_allocations"], 1);
  EXPECT_TRUE(json["devices"][1]["first_divergence"].is_null());
  // The arena is the warm-up plus one step, not forty.
  EXPECT_LT(plan.devices[0].arena, 100096u + 30208u + 50176u + 7168u + 30208u + 5120u + 1024u);
  std::remove(trace.c_str());
}

TEST(CaptureReplay, ADivergenceInTheMiddleKeepsTheResultsAndFallsBack) {
  const std::string trace = temp_file("short.trace");
  capture_sample(trace, 1, 3, kCommand);
  const PlanFile plan = plan_trace(trace, false);  // not periodic: 3 steps only
  HostMemory plain(1, nullptr);
  const std::vector<std::uint64_t> expected = run_sample_program(plain, 1, 8);
  HostMemory replay(1, &plan);
  testing::RecordingDivergences divergences;
  replay.allocator(0).set_divergence_sink(&divergences);
  EXPECT_EQ(run_sample_program(replay, 1, 8), expected);  // 5 steps past the plan
  ASSERT_EQ(divergences.seen.size(), 1u);
  EXPECT_EQ(divergences.seen[0].reason, DivergenceReason::beyond_plan);
  EXPECT_EQ(divergences.seen[0].sequence, plan.devices[0].allocations.size());
  const ReplayStats s = replay.allocator(0).replay_stats();
  EXPECT_EQ(s.served, plan.devices[0].allocations.size());
  EXPECT_GT(s.cache_allocations, 0u);
  LUMA_REPLAY_CLEAN(replay.allocator(0));
  const std::string text = format_replay_text({"plan.json", true, ""}, {s});
  EXPECT_NE(text.find("served from the plan: partly, diverged at allocation 12 is beyond the plan's 12 allocations"),
            std::string::npos)
      << text;
  const nlohmann::json json = nlohmann::json::parse(format_replay_json({"plan.json", true, ""}, {s}));
  EXPECT_EQ(json["served_from_plan"], false);
  EXPECT_EQ(json["divergences"], 1);
  EXPECT_EQ(json["devices"][0]["first_divergence"]["sequence"], 12);
  EXPECT_EQ(json["devices"][0]["first_divergence"]["reason"], "beyond_plan");
  std::remove(trace.c_str());
}

TEST(CaptureReplay, AReplayedRunCanBeTracedAndPlannedAgain) {
  const std::string first = temp_file("first.trace");
  capture_sample(first, 1, 3, kCommand);
  const PlanFile plan = plan_trace(first, false);
  const std::string second = temp_file("second.trace");
  capture_sample(second, 1, 3, kCommand, &plan);
  const TraceAllocations a = read_trace_allocations_file(first, true);
  const TraceAllocations b = read_trace_allocations_file(second, true);
  ASSERT_EQ(a.lifetimes.size(), b.lifetimes.size());
  EXPECT_EQ(a.requested, b.requested);
  for (std::size_t k = 0; k < a.lifetimes.size(); ++k) EXPECT_EQ(a.lifetimes[k].size, b.lifetimes[k].size);
  // The replayed trace plans to the same arena.
  const PlanFile again = plan_trace(second, false);
  EXPECT_EQ(again.devices[0].arena, plan.devices[0].arena);
  std::remove(first.c_str());
  std::remove(second.c_str());
}

TEST(CaptureReplay, APlanForAnotherProgramIsRefusedWithOneLine) {
  const std::string trace = temp_file("fp.trace");
  capture_sample(trace, 1, 2, kCommand);
  const PlanFile plan = plan_trace(trace, false);
  RunFingerprint current = *plan.fingerprint;
  EXPECT_TRUE(match_fingerprint(*plan.fingerprint, current).match);
  current.arguments = {"--steps", "5"};
  const FingerprintMatch m = match_fingerprint(*plan.fingerprint, current);
  EXPECT_FALSE(m.match);
  EXPECT_EQ(m.reason, "argument 2 differs: the plan has '4', this run '5'");
  const std::string text = format_replay_text({"plan.json", false, m.reason}, {});
  EXPECT_EQ(text,
            "luma: plan replay (plan.json): refused: argument 2 differs: the plan has '4', this run '5'; every "
            "device was served by the caching allocator\n");
  std::remove(trace.c_str());
}

}  // namespace
}  // namespace luma::core
