// fence_aware_test.cpp - fence-aware plans (core/planner/fence_slack.h, `luma plan
// --fence-slack`): lifetimes extended by L allocations of their device; a plan made from
// them never places a buffer on bytes freed fewer than L allocations before it (the free's
// fence has had L allocations to complete), on random programs and on the sample training
// loop, whole-run and periodic; the arena cost on the sample loop stays within 1.10 x the
// run's lower bound; the plan file keeps the slack; and replay of such a plan records one
// fence per burst only when its bytes are needed within L allocations.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "host_device.h"
#include "planner/fence_slack.h"
#include "planner/lower_bound.h"
#include "planner/periodic.h"
#include "planner/planner.h"
#include "plan/plan_file.h"
#include "replay/plan_replay.h"
#include "replay_test_util.h"

namespace luma::core {
namespace {

Lifetime life(std::uint64_t lower, std::uint64_t upper, std::uint64_t size, int device = 0) {
  Lifetime l;
  l.id = std::to_string(lower);
  l.lower = lower;
  l.upper = upper;
  l.size = size;
  l.alignment = 256;
  l.device = device;
  return l;
}

SearchOptions quick() {
  SearchOptions s;
  s.time_limit_seconds = 0.2;
  return s;
}

TEST(FenceSlack, KeepsFreedBytesForTheNextLAllocationsOfTheDevice) {
  // Trace time (event indices, both devices interleaved): device 0 allocates at 0, 2, 5, 7, 9.
  std::vector<Lifetime> in = {life(0, 3, 256), life(2, 10, 256), life(5, 6, 256), life(7, 8, 256),
                              life(9, 11, 256), life(1, 4, 256, 1), life(4, 12, 256, 1)};
  const std::vector<Lifetime> out = with_fence_slack(in, 2);
  // Freed at 3: the next allocation is 5, so 5 and 7 may not take its bytes: upper = 9.
  EXPECT_EQ(out[0].upper, 9u);
  // Freed at 10, after the device's last allocation: nothing later can reuse it anyway.
  EXPECT_EQ(out[1].upper, 10u);
  EXPECT_EQ(out[2].upper, 9 + 1u);  // freed at 6: 7 and 9 kept out, past the last one
  EXPECT_EQ(out[4].upper, 11u);     // live to the end: unchanged
  // Device 1 counts its own allocations (1 and 4): its free at 4 comes before its
  // allocation at 4, which is kept out, and there is none after.
  EXPECT_EQ(out[5].upper, 5u);
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].lower, in[i].lower);
    EXPECT_EQ(out[i].size, in[i].size);
    EXPECT_GE(out[i].upper, in[i].upper);
  }
  EXPECT_EQ(with_fence_slack(in, 0)[0].upper, 3u);  // no slack: the lifetimes as given
}

TEST(FenceSlack, MinReuseGapCountsAllocationsFromTheFirstAfterTheFree) {
  // 0 freed before allocation 2 (time 2); 2 reuses its bytes at once (gap 0); 3 reuses the
  // bytes of 1 (freed before 3) at once too; with 3 placed elsewhere only 2's reuse counts.
  std::vector<Lifetime> ls = {life(0, 2, 256), life(1, 3, 256), life(2, 4, 256), life(3, 4, 256), life(4, 5, 256)};
  EXPECT_EQ(min_reuse_gap(ls, {0, 256, 0, 256, 512}), 0u);
  // 4 on 0's bytes: 0 was freed before 2, so 2 and 3 came between: gap 2.
  EXPECT_EQ(min_reuse_gap(ls, {0, 256, 512, 768, 0}), 2u);
  EXPECT_EQ(min_reuse_gap(ls, {0, 256, 512, 768, 1024}), ~std::uint64_t{0});
}

// Random programs in allocation time: a planned buffer never lands on bytes freed fewer
// than L allocations before it, and the plain plan does (so the check can fail).
TEST(FenceSlack, PlansNeverReuseBytesWithinTheSlack) {
  std::mt19937_64 rng(7);
  bool plain_reused_early = false;
  for (int round = 0; round < 30; ++round) {
    const std::size_t n = 20 + rng() % 40;
    std::vector<Lifetime> ls;
    for (std::size_t k = 0; k < n; ++k)
      ls.push_back(life(k, k + 1 + rng() % 6, 256 * (1 + rng() % 16)));
    for (Lifetime& l : ls) l.upper = std::min<std::uint64_t>(l.upper, n);
    const Plan plain = plan_lifetimes(ls, Strategy::greedy, quick()).chosen;
    if (min_reuse_gap(ls, plain.offsets) == 0) plain_reused_early = true;
    for (std::uint64_t slack : {1, 2, 3}) {
      const PlanReport r = plan_lifetimes(with_fence_slack(ls, slack), Strategy::greedy, quick());
      EXPECT_GE(min_reuse_gap(ls, r.chosen.offsets), slack) << "round " << round << ", slack " << slack;
      EXPECT_GE(r.chosen.arena, lower_bound_bytes(ls));
    }
  }
  EXPECT_TRUE(plain_reused_early);
}

// The sample training loop of tests/programs/modes_train.cpp (mode train) in allocation
// time: 3 weights, then per step 4 activations, a workspace, a temporary, freed, a second
// temporary, then all six freed.
std::vector<Lifetime> sample_loop(std::size_t steps) {
  const std::uint64_t kMiB = 1 << 20;
  auto r = [](std::uint64_t b) { return (b + 255) / 256 * 256; };
  std::vector<Lifetime> ls;
  std::uint64_t t = 0;
  const std::uint64_t end = 3 + 7 * steps;
  for (std::uint64_t w : {3 * kMiB + 1000, std::uint64_t{200000}, std::uint64_t{5000}}) ls.push_back(life(t++, end, r(w)));
  for (std::size_t s = 0; s < steps; ++s) {
    const std::uint64_t start = t, step_end = start + 7;
    for (std::uint64_t a : {std::uint64_t{1000}, std::uint64_t{70000}, kMiB + 12345, 3 * kMiB})
      ls.push_back(life(t++, step_end, r(a)));
    ls.push_back(life(t++, step_end, 8 * kMiB));
    ls.push_back(life(t, t + 1, r(40000)));  // temp, freed before temp2
    ++t;
    ls.push_back(life(t++, step_end, r(20000)));
  }
  return ls;
}

TEST(FenceSlack, SampleLoopWholeRunWithinTenPercentOfTheLowerBound) {
  const std::vector<Lifetime> ls = sample_loop(5);
  const std::uint64_t lb = lower_bound_bytes(ls);
  EXPECT_EQ(min_reuse_gap(ls, plan_lifetimes(ls, Strategy::best, quick()).chosen.offsets), 0u);
  const Plan p = plan_lifetimes(with_fence_slack(ls, 2), Strategy::best, quick()).chosen;
  EXPECT_GE(min_reuse_gap(ls, p.offsets), 2u);
  EXPECT_LE(static_cast<double>(p.arena), 1.10 * static_cast<double>(lb));
}

TEST(FenceSlack, SampleLoopPeriodicEveryCapturedAndRepeatedStepKeepsTheSlack) {
  const std::vector<Lifetime> ls = sample_loop(5);
  const std::uint64_t lb = lower_bound_bytes(ls);
  const std::vector<Lifetime> slack = with_fence_slack(ls, 2);
  const AllocationSequence seq = allocation_sequence(slack);
  const PeriodSearch found = find_period(seq);
  ASSERT_TRUE(found.found);
  // Step s + 1's first activation may not take step s's bytes: one step no longer repeats
  // on itself, two do.
  EXPECT_EQ(found.found->period, 14u);
  const PeriodicPlan pp = plan_periodic(slack, seq, *found.found, Strategy::best, quick());
  EXPECT_LE(static_cast<double>(pp.report.chosen.arena), 1.10 * static_cast<double>(lb));
  // Unrolled over 12 steps with the real (not extended) lifetimes: every allocation at
  // its slot's offset, every reuse at least 2 allocations after the free.
  const std::vector<Lifetime> run = sample_loop(12);
  std::vector<std::uint64_t> offsets;
  for (std::uint64_t k = 0; k < run.size(); ++k)
    offsets.push_back(pp.report.chosen.offsets[k < pp.warmup ? k : pp.warmup + (k - pp.warmup) % pp.period]);
  EXPECT_GE(min_reuse_gap(run, offsets), 2u);
}

TEST(FenceSlack, PlanFileKeepsIt) {
  PlanFile f;
  DevicePlanFile d = testing::manual_plan({{256, 256, 0}});
  d.fence_slack = FenceSlackLayout{3, 200};
  f.devices.push_back(d);
  const PlanFile back = parse_plan_file(format_plan_file(f), "mem");
  ASSERT_TRUE(back.devices[0].fence_slack.has_value());
  EXPECT_EQ(back.devices[0].fence_slack->allocations, 3u);
  EXPECT_EQ(back.devices[0].fence_slack->run_lower_bound, 200u);
  f.devices[0].fence_slack.reset();
  EXPECT_FALSE(parse_plan_file(format_plan_file(f), "mem").devices[0].fence_slack.has_value());
  EXPECT_THROW(parse_plan_file(R"({"version": 1, "devices": [{"device": 0, "arena": 256, "alignment": 256,
    "fence_slack": {"allocations": -1}, "allocations": [{"id": 0, "size": 256, "offset": 0}]}]})", "mem"),
               PlanFileError);
}

TEST(FenceSlack, PlanFileKeepsSelective) {
  PlanFile f;
  DevicePlanFile d = testing::manual_plan({{256, 256, 0}});
  d.fence_slack = FenceSlackLayout{4, 200, true};
  f.devices.push_back(d);
  EXPECT_TRUE(parse_plan_file(format_plan_file(f), "mem").devices[0].fence_slack->selective);
  f.devices[0].fence_slack->selective = false;
  EXPECT_FALSE(parse_plan_file(format_plan_file(f), "mem").devices[0].fence_slack->selective);
  try {
    parse_plan_file(R"({"version": 1, "devices": [{"device": 0, "arena": 256, "alignment": 256,
      "fence_slack": {"allocations": 2, "selective": 1}, "allocations": [{"id": 0, "size": 256, "offset": 0}]}]})",
                    "mem");
    ADD_FAILURE() << "a number for selective was accepted";
  } catch (const PlanFileError& e) {
    EXPECT_NE(std::string(e.what()).find("selective: must be true or false"), std::string::npos) << e.what();
  }
}

// Selective slack, by hand, in allocation time (sizes in units of 256 B): a base of 4
// units lives throughout; a temporary T of `t` units is allocated at 2 and freed before
// 3; three buffers are freed together before 5, the step boundary (held there: the base
// alone, the fewest of the second half), then two more live to the end.
std::vector<Lifetime> selective_example(std::uint64_t t) {
  const std::uint64_t u = 256;
  return {life(0, 7, 4 * u), life(1, 5, 1 * u), life(2, 3, t * u), life(3, 5, 1 * u),
          life(4, 5, 2 * u),  life(5, 7, 1 * u), life(6, 7, 1 * u)};
}

TEST(FenceSlack, SelectiveKeepsAFreeOnlyWhereItCostsNoPeakBytesNorCrossesAQuietPoint) {
  // T of 2 units. Live at allocations 0..6: 4, 5, 7, 6, 8, 5, 6 (peak 8); held before
  // them: 0, 4, 5, 5, 6, 4, 5; quiet level (second half, 3..6): 4.
  const std::vector<Lifetime> in = selective_example(2);
  std::uint64_t kept = 0;
  const std::vector<Lifetime> out = with_selective_fence_slack(in, 2, &kept);
  // T over 3 (6 + 2 <= 8) but not 4 (8 + 2 > 8): kept over the prefix, up to 4.
  EXPECT_EQ(out[2].upper, 4u);
  // The three freed before 5: allocation 5 comes at the quiet level: not kept.
  for (std::size_t i : {1, 3, 4}) EXPECT_EQ(out[i].upper, 5u) << i;
  EXPECT_EQ(kept, 1u);
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].lower, in[i].lower);
    EXPECT_EQ(out[i].size, in[i].size);
  }
  EXPECT_EQ(lower_bound_bytes(out), lower_bound_bytes(in));
  EXPECT_EQ(with_selective_fence_slack(in, 0)[2].upper, 3u);
  // With the buffer allocated at 4 one unit instead of two, the peak is 7 (at 2): T kept
  // over 3 would make 6 + 2 = 8 live there, above it: not kept at all.
  std::vector<Lifetime> big = selective_example(2);
  big[4].size = 256;
  EXPECT_EQ(with_selective_fence_slack(big, 2, &kept)[2].upper, 3u);
  EXPECT_EQ(kept, 0u);
}

// The two-stream loop of tests/programs/modes_train.cpp (mode train-streams) in allocation
// time: 2 weights; per step, per stream: an activation, a workspace, a temporary freed
// before the output; then all six freed. Every free kept even one allocation costs more
// than 10 % (each step starts with a 2 MiB activation while the last step's bytes wait);
// selectively, the temporaries are kept to the end of their step within 1 % of the lower
// bound.
std::vector<Lifetime> two_stream_loop(std::size_t steps, std::vector<std::size_t>* temps = nullptr) {
  const std::uint64_t kMiB = 1 << 20;
  auto r = [](std::uint64_t b) { return (b + 255) / 256 * 256; };
  std::vector<Lifetime> ls;
  std::uint64_t t = 0;
  const std::uint64_t end = 2 + 8 * steps;
  for (std::uint64_t w : {4 * kMiB + 100, std::uint64_t{100000}}) ls.push_back(life(t++, end, r(w)));
  for (std::size_t s = 0; s < steps; ++s) {
    const std::uint64_t step_end = t + 8;
    for (std::uint64_t i = 0; i < 2; ++i) {
      ls.push_back(life(t++, step_end, r(2 * kMiB + 1000 * i)));
      ls.push_back(life(t++, step_end, 4 * kMiB));
      if (temps != nullptr) temps->push_back(ls.size());
      ls.push_back(life(t, t + 1, r(30000)));
      ++t;
      ls.push_back(life(t++, step_end, 64 * 1024));
    }
  }
  return ls;
}

TEST(FenceSlack, SelectiveSlackOnTheTwoStreamLoopKeepsTheTemporariesAtTheLowerBound) {
  std::vector<std::size_t> temps;
  const std::vector<Lifetime> ls = two_stream_loop(5, &temps);
  const std::uint64_t lb = lower_bound_bytes(ls);
  // Why it is needed: the whole slack for every free is over the budget here.
  EXPECT_GT(static_cast<double>(lower_bound_bytes(with_fence_slack(ls, 1))), 1.10 * static_cast<double>(lb));
  std::uint64_t kept = 0;
  const std::vector<Lifetime> sel = with_selective_fence_slack(ls, 16, &kept);
  // Every temporary kept (the second stream's, freed where the step peaks, within the 1/64
  // allowance above the peak); nothing across a step's start.
  EXPECT_EQ(kept, temps.size());
  EXPECT_LE(lower_bound_bytes(sel), lb + lb / 64);
  std::uint64_t temps_kept = 0;
  for (std::size_t i = 0; i < ls.size(); ++i) {
    const bool is_temp = std::find(temps.begin(), temps.end(), i) != temps.end();
    if (sel[i].upper != ls[i].upper) {
      EXPECT_TRUE(is_temp) << "buffer " << i << " (not a temporary) was kept";
      ++temps_kept;
    }
  }
  EXPECT_EQ(temps_kept, kept);
  const AllocationSequence seq = allocation_sequence(sel);
  const PeriodSearch found = find_period(seq);
  ASSERT_TRUE(found.found);
  const PeriodicPlan pp = plan_periodic(sel, seq, *found.found, Strategy::best, quick());
  EXPECT_LE(static_cast<double>(pp.report.chosen.arena), 1.10 * static_cast<double>(lb));
  // Unrolled over 12 steps with the real lifetimes: a temporary's bytes are never taken
  // by any later allocation of its step (the writes of its stream may still run until the
  // step synchronizes), where the plain plan takes them at once.
  std::vector<std::size_t> run_temps;
  const std::vector<Lifetime> run = two_stream_loop(12, &run_temps);
  auto unrolled = [&](const PlanReport& r, std::uint64_t warmup, std::uint64_t period) {
    std::vector<std::uint64_t> offsets;
    for (std::uint64_t k = 0; k < run.size(); ++k)
      offsets.push_back(r.chosen.offsets[k < warmup ? k : warmup + (k - warmup) % period]);
    return offsets;
  };
  auto temps_reused_within_their_step = [&](const std::vector<std::uint64_t>& offsets) {
    std::uint64_t n = 0;
    for (std::size_t t = 0; t < run_temps.size(); ++t) {
      const std::size_t i = run_temps[t];
      const std::size_t step_end = 2 + (t / 2 + 1) * 8;  // the step's last allocation + 1
      for (std::size_t k = i + 1; k < step_end; ++k)
        if (offsets[k] < offsets[i] + run[i].size && offsets[i] < offsets[k] + run[k].size) ++n;
    }
    return n;
  };
  EXPECT_EQ(temps_reused_within_their_step(unrolled(pp.report, pp.warmup, pp.period)), 0u);
  EXPECT_LE(static_cast<double>(pp.report.chosen.arena), 1.01 * static_cast<double>(lb));
  const AllocationSequence plain_seq = allocation_sequence(ls);
  const PeriodicPlan plain = plan_periodic(ls, plain_seq, *find_period(plain_seq).found, Strategy::best, quick());
  EXPECT_GT(temps_reused_within_their_step(unrolled(plain.report, plain.warmup, plain.period)), 0u);
}

// Replay of a fence-aware plan: frees join one open epoch until some of their bytes are
// needed within the slack; the fence is recorded then, L allocations ahead, and is done
// (here: completed by hand) before the reuse, so nothing waits.
TEST(FenceSlack, ReplayRecordsTheFenceSlackAllocationsBeforeTheBytesAreNeeded) {
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::batched);
  // 0 and 1 freed after allocation 1; 2, 3, 4 elsewhere; 5 reuses 0's bytes (gap 3 from the
  // first allocation after the free, allocation 2); 6 reuses 1's.
  DevicePlanFile plan = testing::manual_plan({{256, 256, 0}, {256, 256, 256}, {256, 256, 512}, {256, 256, 768},
                                             {256, 256, 1024}, {256, 256, 0}, {256, 256, 256}});
  plan.fence_slack = FenceSlackLayout{2, 0};
  PlanReplay replay(dev, 0, plan);
  void* a = replay.allocate(256).ptr;
  void* b = replay.allocate(256).ptr;
  replay.free(a);
  replay.free(b);
  ASSERT_NE(replay.allocate(256).ptr, nullptr);  // 2: 0's bytes are needed at 5, 3 ahead
  EXPECT_EQ(dev.record_calls(), 0u);
  void* c = replay.allocate(256).ptr;  // 3: needed 2 ahead: the fence is recorded now
  EXPECT_EQ(dev.record_calls(), 1u);
  replay.free(c);  // never reused: joins the open epoch, no fence of its own
  dev.complete_fence(1);
  ASSERT_NE(replay.allocate(256).ptr, nullptr);  // 4
  EXPECT_EQ(replay.allocate(256).ptr, a);        // 5
  EXPECT_EQ(replay.allocate(256).ptr, b);        // 6
  EXPECT_TRUE(dev.fences_waited().empty());
  EXPECT_EQ(dev.record_calls(), 1u);
  LUMA_REPLAY_CLEAN(replay);
  // The same plan without the slack: the fence at the first allocation after the frees.
  HostDevice dev2;
  dev2.set_fences(true);
  dev2.set_fence_mode(FenceMode::batched);
  plan.fence_slack.reset();
  PlanReplay plain(dev2, 0, plan);
  a = plain.allocate(256).ptr;
  b = plain.allocate(256).ptr;
  plain.free(a);
  plain.free(b);
  ASSERT_NE(plain.allocate(256).ptr, nullptr);
  EXPECT_EQ(dev2.record_calls(), 1u);
}

// While the GPU keeps up (the last fence was done at the next allocation, no wait), replay
// records a burst's fence kKeptUpFenceLead allocations before its bytes are needed instead
// of the plan's L, so that later frees can join it; a fence not done at the next
// allocation keeps the plan's lead.
TEST(FenceSlack, ReplayRecordsTheFenceLaterWhileTheGpuKeepsUp) {
  // Slot 3 reuses 0's bytes, 7 reuses 1's, 8 reuses 2's; 4, 5, 6 elsewhere. Slack 2.
  DevicePlanFile plan = testing::manual_plan({{256, 256, 0}, {256, 256, 256}, {256, 256, 512}, {256, 256, 0},
                                             {256, 256, 768}, {256, 256, 1024}, {256, 256, 1280},
                                             {256, 256, 256}, {256, 256, 512}});
  plan.fence_slack = FenceSlackLayout{2, 0};
  // Returns record_calls() after allocations 4, 5 and 6.
  auto run = [&](bool first_fence_done_at_once) {
    HostDevice dev;
    dev.set_fences(true);
    dev.set_fence_mode(FenceMode::batched);
    PlanReplay replay(dev, 0, plan);
    void* a0 = replay.allocate(256).ptr;
    void* a1 = replay.allocate(256).ptr;
    replay.free(a0);
    void* a2 = replay.allocate(256).ptr;  // 2: 0's bytes needed at 3, within 2: fence 1
    EXPECT_EQ(dev.record_calls(), 1u);
    if (first_fence_done_at_once) dev.complete_fence(1);
    EXPECT_EQ(replay.allocate(256).ptr, a0);  // 3 (waits for fence 1 when it is not done)
    replay.free(a1);                          // needed at 7
    replay.free(a2);                          // needed at 8
    std::vector<std::uint64_t> records;
    for (int k = 4; k <= 6; ++k) {
      EXPECT_NE(replay.allocate(256).ptr, nullptr);
      records.push_back(dev.record_calls());
    }
    dev.complete_all_fences();
    EXPECT_EQ(replay.allocate(256).ptr, a1);  // 7
    EXPECT_EQ(replay.allocate(256).ptr, a2);  // 8
    EXPECT_EQ(dev.fences_waited().size(), first_fence_done_at_once ? 0u : 1u);
    LUMA_REPLAY_CLEAN(replay);
    return records;
  };
  // Kept up: the fence of 1 and 2 at 6, one allocation before 7 needs it.
  EXPECT_EQ(run(true), (std::vector<std::uint64_t>{1, 1, 2}));
  // Fence 1 was not done at 3 (waited for): the plan's lead, the fence at 5.
  EXPECT_EQ(run(false), (std::vector<std::uint64_t>{1, 2, 2}));
}

// Safety never depends on the slack being right: a plan that claims a slack but reuses
// bytes at once still waits for the fence rather than hand out pending bytes.
TEST(FenceSlack, ReplayOfAWrongSlackStillWaits) {
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::batched);
  DevicePlanFile plan = testing::manual_plan({{256, 256, 0}, {256, 256, 0}});
  plan.fence_slack = FenceSlackLayout{4, 0};
  PlanReplay replay(dev, 0, plan);
  void* a = replay.allocate(256).ptr;
  replay.free(a);
  EXPECT_EQ(replay.allocate(256).ptr, a);
  EXPECT_EQ(dev.fences_waited(), std::vector<Fence>{1});
  LUMA_REPLAY_CLEAN(replay);
}

}  // namespace
}  // namespace luma::core
