// periodic_test.cpp - repeating work (core/planner/periodic.h): the period search on
// synthetic sequences (warm-up and period found, the end of the trace cut short, no period,
// the shortest plan preferred over a period seen only at the tail, buffers living longer
// than one period, the search budget), the cyclic plan (phase chosen where the fewest bytes
// cross the boundary; captured run and repeated period checked; a broken plan caught), and
// the plan replayed for ten times the captured iterations.
#include <gtest/gtest.h>

#include <vector>

#include "host_device.h"
#include "replay/plan_replay.h"
#include "planner/periodic.h"
#include "replay_test_util.h"

namespace luma::core {
namespace {

using testing::addr;

// A program in allocation order: sizes and the allocation count before each free.
struct Seq {
  std::vector<std::uint64_t> size;
  std::vector<std::uint64_t> free_at;  // kNever: never freed
  static constexpr std::uint64_t kNever = ~std::uint64_t{0};

  // One allocation of `bytes` freed `life` allocations later (kNever: never).
  void add(std::uint64_t bytes, std::uint64_t life) {
    size.push_back(bytes);
    free_at.push_back(life == kNever ? kNever : size.size() - 1 + life);
  }
  // Lifetimes as a trace would give them: time = allocation index, the end of the trace
  // (after the last allocation) for anything freed there or never.
  std::vector<Lifetime> lifetimes() const {
    std::vector<Lifetime> out;
    const std::uint64_t n = size.size();
    for (std::size_t k = 0; k < n; ++k) {
      Lifetime l;
      l.id = std::to_string(k);
      l.lower = k;
      l.upper = free_at[k] == kNever ? n : std::min(free_at[k], n);
      l.size = size[k];
      l.alignment = 256;
      out.push_back(l);
    }
    return out;
  }
};

// Warm-up: `w` persistent buffers. Then `iterations` of a 5-allocation step:
// activation (4 KiB) to the end of the step, two temporaries, a gradient (1 KiB) live into
// the next step, a small one freed at once.
Seq training(std::size_t w, std::size_t iterations) {
  Seq s;
  for (std::size_t i = 0; i < w; ++i) s.add(65536 * (i + 1), Seq::kNever);
  for (std::size_t it = 0; it < iterations; ++it) {
    s.add(4096, 5);
    s.add(512, 2);
    s.add(2048, 2);
    s.add(1024, 4);  // crosses into the next step
    s.add(256, 1);
  }
  return s;
}

TEST(PeriodSearch, FindsTheWarmupAndThePeriod) {
  const Seq s = training(3, 20);
  const AllocationSequence seq = allocation_sequence(s.lifetimes());
  const PeriodSearch r = find_period(seq);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.found->warmup, 3u);
  EXPECT_EQ(r.found->period, 5u);
  EXPECT_FALSE(r.budget_exhausted);
}

TEST(PeriodSearch, TheRequestedBytesMustRepeatNotJustTheSizes) {
  const Seq s = training(1, 10);
  std::vector<std::uint64_t> keys = s.size;
  keys[1 + 2] -= 7;  // the first step asks for other bytes of the same size class
  const PeriodSearch by_size = find_period(allocation_sequence(s.lifetimes()));
  ASSERT_TRUE(by_size.found);
  EXPECT_EQ(by_size.found->warmup, 1u);
  const PeriodSearch by_request = find_period(allocation_sequence(s.lifetimes(), keys));
  ASSERT_TRUE(by_request.found);
  EXPECT_EQ(by_request.found->warmup, 4u);  // that allocation belongs to the warm-up now
  EXPECT_EQ(by_request.found->period, 5u);
}

TEST(PeriodSearch, FreesCutShortByTheEndOfTheTraceStillRepeat) {
  Seq s = training(2, 6);
  // The program exits without the frees its last step would make after the last
  // allocation (those of positions 0, 3 and 4): they never come.
  const std::size_t n = s.size.size();
  for (std::size_t k : {n - 5, n - 2, n - 1}) s.free_at[k] = Seq::kNever;
  const PeriodSearch r = find_period(allocation_sequence(s.lifetimes()));
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.found->warmup, 2u);
  EXPECT_EQ(r.found->period, 5u);
}

TEST(PeriodSearch, NoPeriodInIrregularWorkOrTooFewRepeats) {
  Seq irregular;
  for (std::uint64_t k = 0; k < 200; ++k) irregular.add(256 * (1 + (k * k * 7 + 3) % 97), 1 + k % 3);
  EXPECT_FALSE(find_period(allocation_sequence(irregular.lifetimes())).found);

  Seq kept;  // every buffer kept to the end: a later instance can never reuse the bytes
  for (int k = 0; k < 50; ++k) kept.add(1024, Seq::kNever);
  EXPECT_FALSE(find_period(allocation_sequence(kept.lifetimes())).found);

  // One full step and a bit of a second: fewer than the two repeats asked for.
  const Seq once = training(0, 1);
  EXPECT_FALSE(find_period(allocation_sequence(once.lifetimes())).found);
  EXPECT_FALSE(find_period(allocation_sequence(Seq{}.lifetimes())).found);
}

TEST(PeriodSearch, ThePeriodOfTheWholeLoopBeatsOneSeenOnlyAtTheTail) {
  // Steps of [4 KiB to the end of the step, 256 freed at once, 256 freed at once]: the last
  // two allocations alone look like a period of 1.
  Seq s;
  for (int it = 0; it < 8; ++it) {
    s.add(4096, 3);
    s.add(256, 1);
    s.add(256, 1);
  }
  const PeriodSearch r = find_period(allocation_sequence(s.lifetimes()));
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.found->warmup, 0u);
  EXPECT_EQ(r.found->period, 3u);
}

TEST(PeriodSearch, ABufferLivingIntoTheNextStepNeedsTwoStepsPerPeriod) {
  // Double buffering: each step's buffer is freed in the middle of the next step.
  Seq s;
  for (int it = 0; it < 12; ++it) {
    s.add(8192, 3);  // freed after the next step's first allocation
    s.add(256, 1);
  }
  const PeriodSearch r = find_period(allocation_sequence(s.lifetimes()));
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.found->period, 4u);
}

TEST(PeriodSearch, AnExhaustedBudgetIsReportedNotGuessed) {
  const Seq s = training(3, 20);
  const PeriodSearch r = find_period(allocation_sequence(s.lifetimes()), 10);
  EXPECT_TRUE(r.budget_exhausted);
  EXPECT_FALSE(r.found);
}

SearchOptions quick() {
  SearchOptions o;
  o.max_iterations = 1000;
  return o;
}

TEST(PeriodicPlan, IsCheckedOverTheCapturedRunAndTheRepeatedPeriod) {
  const Seq s = training(3, 20);
  const std::vector<Lifetime> lts = s.lifetimes();
  const AllocationSequence seq = allocation_sequence(lts);
  const PeriodSearch r = find_period(seq);
  ASSERT_TRUE(r.found);
  const PeriodicPlan pp = plan_periodic(lts, seq, *r.found, Strategy::best, quick());
  EXPECT_EQ(pp.period, 5u);
  EXPECT_GE(pp.warmup, 3u);
  EXPECT_LT(pp.warmup, 8u);
  EXPECT_EQ(pp.slots.size(), pp.warmup + pp.period);
  EXPECT_TRUE(check_periodic_plan(seq, pp).empty());
  EXPECT_TRUE(check_periodic_plan(seq, pp, 20).empty());
  // The arena holds at most the warm-up plus one whole step, whatever the step count.
  std::uint64_t warmup_bytes = 0, step_bytes = 0;
  for (std::size_t k = 0; k < 3; ++k) warmup_bytes += s.size[k];
  for (std::size_t k = 3; k < 8; ++k) step_bytes += s.size[k];
  EXPECT_LE(pp.report.chosen.arena, warmup_bytes + step_bytes);
  EXPECT_GE(pp.report.chosen.arena, pp.report.lower_bound);

  // Two period slots that meet in every step, put on the same bytes: caught.
  PeriodicPlan broken = pp;
  const std::size_t first = broken.warmup;  // the activation: live through the step
  broken.report.chosen.offsets[first + 2] = broken.report.chosen.offsets[first];
  EXPECT_FALSE(check_periodic_plan(seq, broken).empty());
}

TEST(PeriodicPlan, CutsThePeriodWhereTheFewestBytesAreLive) {
  // A 64 KiB buffer made at step position 1 lives exactly one step: a cut before position
  // 0 finds it live, a cut before position 1 finds nothing live.
  Seq s;
  for (int it = 0; it < 10; ++it) {
    s.add(256, 1);
    s.add(65536, 4);
    s.add(512, 1);
    s.add(1024, 1);
  }
  const std::vector<Lifetime> lts = s.lifetimes();
  const AllocationSequence seq = allocation_sequence(lts);
  const PeriodSearch r = find_period(seq);
  ASSERT_TRUE(r.found);
  ASSERT_EQ(r.found->warmup, 0u);
  const PeriodicPlan pp = plan_periodic(lts, seq, *r.found, Strategy::greedy, quick());
  EXPECT_EQ(pp.warmup, 1u);
  EXPECT_EQ(pp.detected_warmup, 0u);
  EXPECT_EQ(pp.boundary_bytes, 0u);
  // Without a crossing buffer, the 64 KiB one shares bytes with nothing else of its step
  // but the arena is no larger than one step's peak plus the first small buffer.
  EXPECT_LE(pp.report.chosen.arena, 65536u + 1024u + 256u);
}

DevicePlanFile as_plan_file(const PeriodicPlan& pp) {
  DevicePlanFile d;
  d.arena = pp.report.chosen.arena;
  d.alignment = 256;
  for (std::size_t k = 0; k < pp.slots.size(); ++k) {
    PlannedAllocation a;
    a.requested = pp.slot_key[k];
    a.size = pp.slots[k].size;
    a.offset = pp.report.chosen.offsets[k];
    d.allocations.push_back(a);
  }
  d.periodic = PeriodicLayout{pp.warmup, pp.period, pp.detected_warmup, pp.captured_iterations, pp.boundary_bytes};
  return d;
}

TEST(PeriodicPlan, ReplaysTenTimesTheCapturedIterations) {
  const Seq captured = training(3, 8);
  const std::vector<Lifetime> lts = captured.lifetimes();
  const AllocationSequence seq = allocation_sequence(lts);
  const PeriodSearch r = find_period(seq);
  ASSERT_TRUE(r.found);
  const PeriodicPlan pp = plan_periodic(lts, seq, *r.found, Strategy::best, quick());
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::per_free);
  PlanReplay replay(dev, 0, as_plan_file(pp));
  // The same program, ten times longer.
  const Seq longer = training(3, 80);
  const std::size_t n = longer.size.size();
  std::vector<void*> ptr(n, nullptr);
  testing::LiveRanges live;
  for (std::size_t k = 0; k < n; ++k) {
    for (std::size_t j = 0; j < k; ++j)
      if (ptr[j] != nullptr && longer.free_at[j] == k) {
        ASSERT_EQ(replay.free(ptr[j]), FreeStatus::ok);
        live.remove(ptr[j]);
        ptr[j] = nullptr;
      }
    const ReplayAllocation a = replay.allocate(longer.size[k]);
    ASSERT_NE(a.ptr, nullptr) << "allocation " << k << ": " << static_cast<int>(replay.divergence().reason);
    live.add(a.ptr, longer.size[k]);
    ptr[k] = a.ptr;
  }
  LUMA_REPLAY_CLEAN(replay);
  const ReplayStats st = replay.replay_stats();
  EXPECT_EQ(st.served, n);
  EXPECT_EQ(st.divergences, 0u);
  EXPECT_EQ(dev.reserve_calls(), 1u);
  EXPECT_GE(st.iterations, 10 * pp.captured_iterations - 1);
}

}  // namespace
}  // namespace luma::core
