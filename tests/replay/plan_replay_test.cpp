// plan_replay_test.cpp - the replay allocator of one device (core/replay/plan_replay.h) on host
// memory: following the plan (exact offsets, one reservation, identical addresses across two
// replays), each kind of divergence (nothing served, earlier blocks intact), late frees
// never producing an overlap, the fence contract, periodic plans, arena release, lookups
// and events. check() runs after every operation.
#include <gtest/gtest.h>

#include <vector>

#include "host_device.h"
#include "replay/plan_replay.h"
#include "replay/replay_stats_format.h"
#include "replay_test_util.h"

namespace luma::core {
namespace {

using testing::addr;
using testing::FixedBaseDevice;
using testing::has_tag;
using testing::manual_plan;
using testing::planned;
using testing::RecordingSink;
using testing::sequence_lifetimes;
using testing::write_tag;

// Three blocks: 0 and 1 live together, 0 is freed before 2, which reuses its bytes.
DevicePlanFile three_blocks() {
  return manual_plan({{1000, 1024, 0}, {512, 512, 1024}, {900, 1024, 0}});
}

TEST(PlanReplay, ServesEveryAllocationAtItsPlannedOffsetWithOneReservation) {
  // Sizes and frees of a small "program", planned by the real planner.
  const std::vector<std::uint64_t> sizes{4096, 1024, 2048, 512, 4096, 256, 1024};
  const std::vector<std::uint64_t> free_at{3, 2, 5, 7, 6, 7, 7};
  const DevicePlanFile plan = planned(sequence_lifetimes(sizes, free_at), {});
  HostDevice dev;
  PlanReplay replay(dev, 0, plan);
  std::vector<void*> ptrs(sizes.size());
  std::uintptr_t base = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    for (std::size_t j = 0; j < k; ++j)
      if (free_at[j] == k && ptrs[j] != nullptr) {
        ASSERT_EQ(replay.free(ptrs[j]), FreeStatus::ok);
        ptrs[j] = nullptr;
      }
    const ReplayAllocation r = replay.allocate(sizes[k]);
    ASSERT_NE(r.ptr, nullptr) << "allocation " << k;
    if (k == 0) base = addr(r.ptr) - plan.allocations[0].offset;
    EXPECT_EQ(addr(r.ptr), base + plan.allocations[k].offset) << "allocation " << k;
    ptrs[k] = r.ptr;
    LUMA_REPLAY_CLEAN(replay);
  }
  EXPECT_EQ(dev.reserve_calls(), 1u);
  EXPECT_TRUE(dev.contains(reinterpret_cast<void*>(base), plan.arena));
  const ReplayStats s = replay.replay_stats();
  EXPECT_EQ(s.served, sizes.size());
  EXPECT_EQ(s.divergences, 0u);
  EXPECT_EQ(s.arena_reservations, 1u);
  EXPECT_TRUE(s.arena_held);
  EXPECT_TRUE(replay.following());
}

TEST(PlanReplay, TwoReplaysOnADeterministicDeviceGiveIdenticalAddresses) {
  const DevicePlanFile plan = three_blocks();
  FixedBaseDevice dev(1 << 20);
  std::vector<std::uintptr_t> first, second;
  for (std::vector<std::uintptr_t>* run : {&first, &second}) {
    PlanReplay replay(dev, 0, plan);
    void* a = replay.allocate(1000).ptr;
    void* b = replay.allocate(512).ptr;
    ASSERT_EQ(replay.free(a), FreeStatus::ok);
    void* c = replay.allocate(900).ptr;
    ASSERT_TRUE(a && b && c);
    *run = {addr(a), addr(b), addr(c)};
    replay.release_all();  // the process ends; the driver takes the arena back
  }
  EXPECT_EQ(first, second);
  EXPECT_EQ(dev.reserves, 2);
  // On devices with different bases the offsets still agree.
  HostDevice d1, d2;
  PlanReplay r1(d1, 0, plan), r2(d2, 0, plan);
  void* p1 = r1.allocate(1000).ptr;
  void* p2 = r2.allocate(1000).ptr;
  void* q1 = r1.allocate(512).ptr;
  void* q2 = r2.allocate(512).ptr;
  EXPECT_EQ(addr(q1) - addr(p1), addr(q2) - addr(p2));
}

TEST(PlanReplay, AnotherSizeDivergesAndServesNothingMore) {
  HostDevice dev;
  PlanReplay replay(dev, 3, three_blocks());
  void* a = replay.allocate(1000).ptr;
  ASSERT_NE(a, nullptr);
  write_tag(a, 1024, 0xA);
  const ReplayAllocation r = replay.allocate(513);  // the plan has 512 here
  EXPECT_EQ(r.ptr, nullptr);
  EXPECT_TRUE(r.diverged_now);
  EXPECT_FALSE(replay.following());
  const Divergence& d = replay.divergence();
  EXPECT_EQ(d.reason, DivergenceReason::size_mismatch);
  EXPECT_EQ(d.sequence, 1u);
  EXPECT_EQ(d.requested, 513u);
  EXPECT_EQ(d.planned_requested, 512u);
  EXPECT_EQ(describe_divergence(d), "allocation 1 asked for 513 bytes where the plan has 512");
  // Every later allocation is the caller's, even one that would fit the plan.
  const ReplayAllocation later = replay.allocate(512);
  EXPECT_EQ(later.ptr, nullptr);
  EXPECT_FALSE(later.diverged_now);
  // The block placed before stays valid and is freed here.
  EXPECT_TRUE(has_tag(a, 1024, 0xA));
  EXPECT_TRUE(replay.owns(a));
  EXPECT_EQ(replay.free(a), FreeStatus::ok);
  LUMA_REPLAY_CLEAN(replay);
  const ReplayStats s = replay.replay_stats();
  EXPECT_EQ(s.served, 1u);
  EXPECT_EQ(s.divergences, 1u);
  EXPECT_EQ(s.first_divergence.sequence, 1u);
}

TEST(PlanReplay, MoreAllocationsThanPlannedDiverge) {
  HostDevice dev;
  PlanReplay replay(dev, 0, manual_plan({{256, 256, 0}}));
  ASSERT_NE(replay.allocate(256).ptr, nullptr);
  const ReplayAllocation r = replay.allocate(256);
  EXPECT_TRUE(r.diverged_now);
  EXPECT_EQ(replay.divergence().reason, DivergenceReason::beyond_plan);
  EXPECT_EQ(replay.divergence().sequence, 1u);
  EXPECT_EQ(replay.divergence().planned_allocations, 1u);
  LUMA_REPLAY_CLEAN(replay);
}

TEST(PlanReplay, AnEmptyPlanDivergesAtTheFirstAllocationWithoutReserving) {
  HostDevice dev;
  DevicePlanFile empty;
  PlanReplay replay(dev, 1, empty);
  EXPECT_TRUE(replay.allocate(4096).diverged_now);
  EXPECT_EQ(replay.divergence().reason, DivergenceReason::beyond_plan);
  EXPECT_EQ(dev.reserve_calls(), 0u);
}

TEST(PlanReplay, ALateFreeIsADivergenceNeverAnOverlap) {
  HostDevice dev;
  PlanReplay replay(dev, 0, three_blocks());
  void* a = replay.allocate(1000).ptr;
  void* b = replay.allocate(512).ptr;
  write_tag(a, 1024, 0xAAAA);
  write_tag(b, 512, 0xBBBB);
  // The plan frees a before allocation 2 (which is placed on a's bytes); a is still live.
  const ReplayAllocation c = replay.allocate(900);
  EXPECT_EQ(c.ptr, nullptr);
  EXPECT_TRUE(c.diverged_now);
  EXPECT_EQ(replay.divergence().reason, DivergenceReason::live_conflict);
  EXPECT_EQ(replay.divergence().sequence, 2u);
  EXPECT_EQ(replay.divergence().conflicting_sequence, 0u);
  EXPECT_TRUE(has_tag(a, 1024, 0xAAAA));
  EXPECT_TRUE(has_tag(b, 512, 0xBBBB));
  EXPECT_EQ(replay.free(a), FreeStatus::ok);
  EXPECT_EQ(replay.free(b), FreeStatus::ok);
  LUMA_REPLAY_CLEAN(replay);
}

TEST(PlanReplay, ALateFreeOfAnOlderHolderIsCaughtThroughTheChain) {
  // 0 and 1 share bytes [0, 512) at different times; 2 covers both ranges of 0.
  // 0: [0, 1024)   1: [0, 512) after 0 is freed   2: [0, 1024) after 1 is freed.
  HostDevice dev;
  PlanReplay replay(dev, 0, manual_plan({{1024, 1024, 0}, {512, 512, 0}, {1024, 1024, 0}}));
  void* a = replay.allocate(1024).ptr;
  ASSERT_EQ(replay.free(a), FreeStatus::ok);
  void* b = replay.allocate(512).ptr;
  ASSERT_NE(b, nullptr);
  // b is not freed: allocation 2's bytes [0, 512) are b's, [512, 1024) were a's (free).
  EXPECT_TRUE(replay.allocate(1024).diverged_now);
  EXPECT_EQ(replay.divergence().conflicting_sequence, 1u);
  LUMA_REPLAY_CLEAN(replay);
}

TEST(PlanReplay, AnArenaTheDeviceRefusesIsADivergence) {
  HostDevice dev;
  dev.fail_next_reserves(1);
  PlanReplay replay(dev, 0, three_blocks());
  const ReplayAllocation r = replay.allocate(1000);
  EXPECT_TRUE(r.diverged_now);
  EXPECT_EQ(replay.divergence().reason, DivergenceReason::arena_unavailable);
  EXPECT_EQ(replay.divergence().arena_bytes, 1536u);
  EXPECT_EQ(replay.divergence().device_error, 0);
  EXPECT_EQ(replay.replay_stats().arena_reservations, 0u);

  HostDevice broken;
  broken.fail_next_reserves(1, 999);
  PlanReplay r2(broken, 0, three_blocks());
  EXPECT_TRUE(r2.allocate(1000).diverged_now);
  EXPECT_EQ(r2.divergence().device_error, 999);
  EXPECT_NE(describe_divergence(r2.divergence()).find("error 999"), std::string::npos);
}

TEST(PlanReplay, APlanBelowTheAllocatorsAlignmentIsNeverServed) {
  HostDevice dev;
  AllocatorOptions o;
  o.alignment = 512;
  PlanReplay replay(dev, 0, three_blocks(), o);  // offsets are multiples of 256 only
  EXPECT_TRUE(replay.allocate(1000).diverged_now);
  EXPECT_EQ(replay.divergence().reason, DivergenceReason::incompatible_plan);
  EXPECT_EQ(replay.divergence().plan_alignment, 256u);
  EXPECT_EQ(replay.divergence().allocator_alignment, 512u);
  EXPECT_EQ(dev.reserve_calls(), 0u);
}

TEST(PlanReplay, APlanBuiltInCodeWithABlockOutsideItsArenaIsNeverServed) {
  DevicePlanFile plan = three_blocks();
  plan.allocations[1].offset = 1536;  // ends at 2048, beyond the arena of 1536
  HostDevice dev;
  PlanReplay replay(dev, 0, plan);
  EXPECT_TRUE(replay.allocate(1000).diverged_now);
  EXPECT_EQ(replay.divergence().reason, DivergenceReason::incompatible_plan);
  EXPECT_EQ(dev.reserve_calls(), 0u);
  DevicePlanFile periodic = three_blocks();
  periodic.periodic = PeriodicLayout{1, 5, 1, 2, 0};  // 1 + 5 != 3 allocations
  PlanReplay r2(dev, 0, periodic);
  EXPECT_TRUE(r2.allocate(1000).diverged_now);
  EXPECT_EQ(r2.divergence().reason, DivergenceReason::incompatible_plan);
}

// The fence protocol of plan replay is tested with the cache's, in one typed suite:
// tests/core/fence_queue_test.cpp.

// ---- periodic plans -------------------------------------------------------------------

// Warm-up: one persistent block. Period of 3: x [256 B], y [512 B] freed before z, z
// [256 B] reuses y's bytes; x and z are freed at the end of the iteration.
DevicePlanFile periodic_plan() {
  DevicePlanFile d = manual_plan({{4096, 4096, 0}, {256, 256, 4096}, {512, 512, 4352}, {256, 256, 4352}});
  d.periodic = PeriodicLayout{1, 3, 1, 10, 0};
  return d;
}

TEST(PlanReplayPeriodic, ThePeriodIsServedAgainAndAgainAtTheSameOffsets) {
  HostDevice dev;
  PlanReplay replay(dev, 0, periodic_plan());
  void* weights = replay.allocate(4096).ptr;
  ASSERT_NE(weights, nullptr);
  write_tag(weights, 4096, 0x77);
  const std::uintptr_t base = addr(weights);
  constexpr int kIterations = 100;  // 10x the 10 captured
  for (int it = 0; it < kIterations; ++it) {
    void* x = replay.allocate(256).ptr;
    void* y = replay.allocate(512).ptr;
    ASSERT_TRUE(x && y) << "iteration " << it;
    replay.free(y);
    void* z = replay.allocate(256).ptr;
    ASSERT_NE(z, nullptr);
    EXPECT_EQ(addr(x), base + 4096);
    EXPECT_EQ(addr(y), base + 4352);
    EXPECT_EQ(addr(z), base + 4352);
    replay.free(x);
    replay.free(z);
  }
  LUMA_REPLAY_CLEAN(replay);
  EXPECT_TRUE(has_tag(weights, 4096, 0x77));
  const ReplayStats s = replay.replay_stats();
  EXPECT_EQ(s.served, 1u + 3u * kIterations);
  EXPECT_EQ(s.iterations, static_cast<std::uint64_t>(kIterations));
  EXPECT_EQ(s.warmup, 1u);
  EXPECT_EQ(s.period, 3u);
  EXPECT_EQ(dev.reserve_calls(), 1u);
}

TEST(PlanReplayPeriodic, ABlockKeptIntoTheNextIterationIsADivergence) {
  HostDevice dev;
  PlanReplay replay(dev, 0, periodic_plan());
  replay.allocate(4096);
  void* x = replay.allocate(256).ptr;
  void* y = replay.allocate(512).ptr;
  replay.free(y);
  void* z = replay.allocate(256).ptr;
  replay.free(z);
  // x is kept: the next iteration's x (sequence 4) is planned on its bytes.
  const ReplayAllocation next = replay.allocate(256);
  EXPECT_TRUE(next.diverged_now);
  EXPECT_EQ(replay.divergence().reason, DivergenceReason::live_conflict);
  EXPECT_EQ(replay.divergence().sequence, 4u);
  EXPECT_EQ(replay.divergence().conflicting_sequence, 1u);
  EXPECT_TRUE(replay.owns(x));
  LUMA_REPLAY_CLEAN(replay);
}

// ---- arena, lookups, events -------------------------------------------------------------

TEST(PlanReplay, TheArenaIsReleasedOnlyAfterADivergenceAndOnceNothingInItIsLive) {
  HostDevice dev;
  PlanReplay replay(dev, 0, three_blocks());
  void* a = replay.allocate(1000).ptr;
  EXPECT_EQ(replay.empty_cache(), 0u);  // following: the arena is the plan's
  EXPECT_EQ(dev.segments(), 1u);
  EXPECT_TRUE(replay.allocate(4).diverged_now);
  EXPECT_EQ(replay.empty_cache(), 0u);  // a is still live in it
  EXPECT_EQ(replay.free(a), FreeStatus::ok);
  EXPECT_EQ(replay.empty_cache(), 1536u);
  EXPECT_EQ(dev.segments(), 0u);
  EXPECT_FALSE(replay.replay_stats().arena_held);
  EXPECT_EQ(replay.free(a), FreeStatus::not_owned);  // the arena is gone: not ours
  LUMA_REPLAY_CLEAN(replay);
  EXPECT_EQ(replay.stats().num_device_free, 1u);
}

TEST(PlanReplay, LookupsAnswerForLiveBlocksOnly) {
  HostDevice dev;
  PlanReplay replay(dev, 0, three_blocks());
  void* a = replay.allocate(1000).ptr;
  void* b = replay.allocate(512).ptr;
  std::size_t size = 0;
  EXPECT_TRUE(replay.owns(b, &size));
  EXPECT_EQ(size, 512u);
  SegmentRange r;
  EXPECT_TRUE(replay.block_of(static_cast<char*>(a) + 700, &r));
  EXPECT_EQ(r.base, a);
  EXPECT_EQ(r.size, 1024u);
  EXPECT_TRUE(replay.segment_of(static_cast<char*>(b) + 5, &r));
  EXPECT_EQ(r.base, a);
  EXPECT_EQ(r.size, 1536u);
  EXPECT_EQ(replay.cached_bytes(), 0u);
  EXPECT_EQ(replay.free(static_cast<char*>(a) + 256), FreeStatus::invalid);  // interior
  EXPECT_EQ(replay.free(a), FreeStatus::ok);
  EXPECT_EQ(replay.free(a), FreeStatus::invalid);  // double
  EXPECT_FALSE(replay.owns(a));
  EXPECT_FALSE(replay.block_of(static_cast<char*>(a) + 10, &r));
  EXPECT_EQ(replay.cached_bytes(), 1024u);
  int outside = 0;
  EXPECT_EQ(replay.free(&outside), FreeStatus::not_owned);
  EXPECT_EQ(replay.stats().invalid_frees, 2u);
  LUMA_REPLAY_CLEAN(replay);
}

TEST(PlanReplay, EmitsTheEventsTheCachingAllocatorWould) {
  HostDevice dev;
  RecordingSink sink;
  PlanReplay replay(dev, 2, three_blocks());
  replay.set_event_sink(&sink);
  void* a = replay.allocate(1000).ptr;
  replay.allocate(512);
  replay.free(a);
  replay.allocate(900);
  ASSERT_EQ(sink.events.size(), 6u);
  EXPECT_EQ(sink.events[0].kind, EventKind::segment_reserve);
  EXPECT_EQ(sink.events[0].size, 1536u);
  EXPECT_EQ(sink.events[1].kind, EventKind::alloc);
  EXPECT_EQ(sink.events[1].address, addr(a));
  EXPECT_EQ(sink.events[1].size, 1024u);
  EXPECT_EQ(sink.events[1].requested, 1000u);
  EXPECT_EQ(sink.events[3].kind, EventKind::free_requested);
  EXPECT_EQ(sink.events[4].kind, EventKind::free_completed);
  EXPECT_EQ(sink.events[5].kind, EventKind::alloc);
  EXPECT_EQ(sink.events[5].requested, 900u);
  for (const Event& e : sink.events) EXPECT_EQ(e.device, 2);
}

}  // namespace
}  // namespace luma::core
