// context_allocator_test.cpp - the per-device composition the shim holds (core/
// context_allocator.h): without a plan it is the caching allocator; with one it serves the
// plan, falls back to the cache at the first divergence (reported once, data intact, both
// allocators' check() clean), routes frees by address, merges statistics, and stays
// consistent under threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "replay/context_allocator.h"
#include "host_device.h"
#include "paged_device.h"
#include "replay_test_util.h"

namespace luma::core {
namespace {

using testing::addr;
using testing::has_tag;
using testing::LiveRanges;
using testing::manual_plan;
using testing::RecordingDivergences;
using testing::RecordingSink;
using testing::write_tag;

PlanFile plan_of(DevicePlanFile d) {
  PlanFile p;
  p.devices.push_back(std::move(d));
  return p;
}

// Ten blocks of 4 KiB, each freed before the next: the plan puts them all at offset 0.
PlanFile ten_in_turn() {
  std::vector<testing::Placed> placed;
  for (int i = 0; i < 10; ++i) placed.push_back({4000, 4096, 0});
  return plan_of(manual_plan(placed));
}

TEST(ContextAllocator, WithoutAPlanItIsTheCachingAllocator) {
  HostDevice dev;
  ContextAllocator a(dev, 0);
  EXPECT_FALSE(a.has_plan());
  EXPECT_FALSE(a.following_plan());
  const AllocResult r = a.allocate(1000);
  ASSERT_EQ(r.status, AllocStatus::ok);
  EXPECT_TRUE(a.owns(r.ptr));
  EXPECT_EQ(a.stats().num_device_alloc, 1u);
  EXPECT_EQ(a.free(r.ptr), FreeStatus::ok);
  EXPECT_EQ(a.allocate(0).status, AllocStatus::invalid_size);
  const ReplayStats s = a.replay_stats();
  EXPECT_EQ(s.served, 0u);
  EXPECT_EQ(s.real_allocations, 1u);
  LUMA_REPLAY_CLEAN(a);
}

TEST(ContextAllocator, FollowingThePlanMakesOneRealAllocation) {
  HostDevice dev;
  const PlanFile plan = ten_in_turn();
  ContextAllocator a(dev, 0, {}, &plan);
  EXPECT_TRUE(a.following_plan());
  void* first = nullptr;
  for (int i = 0; i < 10; ++i) {
    const AllocResult r = a.allocate(4000);
    ASSERT_EQ(r.status, AllocStatus::ok);
    if (i == 0) first = r.ptr;
    EXPECT_EQ(r.ptr, first);
    EXPECT_EQ(a.free(r.ptr), FreeStatus::ok);
    LUMA_REPLAY_CLEAN(a);
  }
  EXPECT_EQ(dev.reserve_calls(), 1u);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.num_device_alloc, 1u);
  EXPECT_EQ(s.alloc_calls, 10u);
  EXPECT_EQ(s.reserved_bytes.all.current, 4096);
  const ReplayStats r = a.replay_stats();
  EXPECT_EQ(r.served, 10u);
  EXPECT_EQ(r.real_allocations, 1u);
  EXPECT_EQ(r.cache_allocations, 0u);
  EXPECT_TRUE(r.followed());
}

TEST(ContextAllocator, ALostContextTakesTheArenaAndTheCacheAlong) {
  HostDevice dev;
  dev.set_fences(true);
  const PlanFile plan = ten_in_turn();
  ContextAllocator a(dev, 0, {}, &plan);
  RecordingDivergences divergences;
  a.set_divergence_sink(&divergences);
  void* held = a.allocate(4000).ptr;  // planned, live
  ASSERT_NE(held, nullptr);
  ASSERT_EQ(a.free(held), FreeStatus::ok);  // pending: its fence is open
  void* again = a.allocate(4000).ptr;       // waits for it, same offset
  ASSERT_EQ(again, held);
  const std::uint64_t releases = dev.release_calls();
  a.drop_device_memory();
  LUMA_REPLAY_CLEAN(a);
  EXPECT_EQ(dev.release_calls(), releases) << "the memory is gone: nothing to release";
  EXPECT_EQ(dev.fences_released(), dev.fences_recorded());
  EXPECT_EQ(dev.contract_violations(), 0u);
  EXPECT_FALSE(a.following_plan());
  EXPECT_FALSE(a.owns(again));
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.all.current, 0);
  EXPECT_EQ(s.allocation.all.current, 0);
  EXPECT_EQ(s.num_context_resets, 1u);
  const ReplayStats r = a.replay_stats();
  EXPECT_EQ(r.first_divergence.reason, DivergenceReason::context_lost);
  EXPECT_FALSE(r.arena_held);
  // The next allocation (a new context) is the cache's, in fresh memory.
  const AllocResult n = a.allocate(4000);
  ASSERT_EQ(n.status, AllocStatus::ok);
  EXPECT_EQ(a.replay_stats().cache_allocations, 1u);
  EXPECT_EQ(a.free(n.ptr), FreeStatus::ok);
  LUMA_REPLAY_CLEAN(a);
}

TEST(ContextAllocator, ADivergenceInTheMiddleFallsBackWithDataIntact) {
  HostDevice dev;
  // Three long-lived blocks, then the program asks for something the plan does not have.
  const PlanFile plan = plan_of(manual_plan({{1024, 1024, 0}, {2048, 2048, 1024}, {512, 512, 3072}, {256, 256, 3584}}));
  ContextAllocator a(dev, 0, {}, &plan);
  RecordingDivergences divergences;
  a.set_divergence_sink(&divergences);
  LiveRanges live;
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t bytes : {1024u, 2048u, 512u}) {
    const AllocResult r = a.allocate(bytes);
    ASSERT_EQ(r.status, AllocStatus::ok);
    write_tag(r.ptr, bytes, 0x1000 + bytes);
    live.add(r.ptr, bytes);
    blocks.push_back({r.ptr, bytes});
  }
  // Allocation 3: 300 bytes where the plan has 256: served by the cache instead.
  const AllocResult odd = a.allocate(300);
  ASSERT_EQ(odd.status, AllocStatus::ok);
  EXPECT_FALSE(a.following_plan());
  ASSERT_EQ(divergences.seen.size(), 1u);
  EXPECT_EQ(divergences.seen[0].reason, DivergenceReason::size_mismatch);
  EXPECT_EQ(divergences.seen[0].sequence, 3u);
  SegmentRange arena;
  ASSERT_TRUE(a.segment_of(blocks[0].first, &arena));
  EXPECT_FALSE(addr(odd.ptr) >= addr(arena.base) && addr(odd.ptr) < addr(arena.base) + arena.size);
  write_tag(odd.ptr, 300, 0x300);
  live.add(odd.ptr, 300);
  // More work on the cache, then everything freed in another order.
  std::vector<void*> more;
  for (int i = 0; i < 20; ++i) {
    const AllocResult r = a.allocate(256 * (i + 1));
    ASSERT_EQ(r.status, AllocStatus::ok);
    write_tag(r.ptr, 256 * (i + 1), 0x5000 + i);
    live.add(r.ptr, 256 * (i + 1));
    more.push_back(r.ptr);
  }
  EXPECT_EQ(divergences.seen.size(), 1u);  // reported once
  for (const auto& [p, n] : blocks) EXPECT_TRUE(has_tag(p, n, 0x1000 + n));
  EXPECT_TRUE(has_tag(odd.ptr, 300, 0x300));
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(has_tag(more[i], 256 * (i + 1), 0x5000 + i));
  LUMA_REPLAY_CLEAN(a);
  EXPECT_TRUE(a.cache().check().empty());
  for (void* p : more) EXPECT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(a.free(blocks[1].first), FreeStatus::ok);  // an arena block, after the divergence
  EXPECT_EQ(a.free(odd.ptr), FreeStatus::ok);
  EXPECT_EQ(a.free(blocks[0].first), FreeStatus::ok);
  EXPECT_EQ(a.free(blocks[0].first), FreeStatus::invalid);
  EXPECT_EQ(a.free(blocks[2].first), FreeStatus::ok);
  LUMA_REPLAY_CLEAN(a);
  const ReplayStats s = a.replay_stats();
  EXPECT_EQ(s.served, 3u);
  EXPECT_EQ(s.divergences, 1u);
  EXPECT_EQ(s.cache_allocations, 21u);
  EXPECT_GE(s.real_allocations, 2u);
  // After the divergence the arena goes back once it is empty.
  const std::size_t released = a.empty_cache();
  EXPECT_GE(released, 4096u);
  EXPECT_FALSE(a.replay_stats().arena_held);
  LUMA_REPLAY_CLEAN(a);
}

// Each kind of divergence, at the ContextAllocator: the blocks placed before it keep their
// data, the cache serves the rest, both allocators' check() stay clean, and the divergence
// is reported once with its kind and sequence number.
struct DivergenceCase {
  const char* name;
  DivergenceReason reason;
  std::uint64_t sequence;
};

class ContextAllocatorDivergence : public ::testing::TestWithParam<DivergenceCase> {};

TEST_P(ContextAllocatorDivergence, FallsBackCleanlyWithDataIntact) {
  const DivergenceCase& c = GetParam();
  // 0 and 1 live together; 0 is freed before 2, which takes its bytes; 3 follows.
  PlanFile plan = plan_of(manual_plan({{1000, 1024, 0}, {2000, 2048, 1024}, {1024, 1024, 0}, {512, 512, 3072}}));
  // The allocator promises 1024-byte blocks in the incompatible case (and the device
  // gives segments aligned so): the plan's 256-byte offsets cannot keep that promise.
  AllocatorOptions options;
  if (c.reason == DivergenceReason::incompatible_plan) options.alignment = 1024;
  HostDevice dev(std::size_t{1} << 30, options.alignment);
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::per_free);
  if (c.reason == DivergenceReason::arena_unavailable) dev.fail_next_reserves(1);
  ContextAllocator a(dev, 0, options, &plan);
  RecordingDivergences divergences;
  a.set_divergence_sink(&divergences);
  LiveRanges live;
  std::vector<std::pair<void*, std::size_t>> held;
  auto take = [&](std::size_t bytes, std::uint64_t tag) {
    const AllocResult r = a.allocate(bytes);
    EXPECT_EQ(r.status, AllocStatus::ok);
    if (r.ptr == nullptr) return r.ptr;
    write_tag(r.ptr, bytes, tag);
    live.add(r.ptr, bytes);
    held.push_back({r.ptr, bytes});
    return r.ptr;
  };
  // The program: as planned, except where the case makes it differ.
  void* first = take(1000, 1);
  take(c.reason == DivergenceReason::size_mismatch ? 1999 : 2000, 2);
  if (c.reason != DivergenceReason::live_conflict) {  // a late free: 0 is still held
    live.remove(first);
    EXPECT_EQ(a.free(first), FreeStatus::ok);
    held.erase(held.begin());
  }
  take(1024, 3);
  take(512, 4);
  if (c.reason == DivergenceReason::beyond_plan) take(256, 5);
  for (int i = 0; i < 10; ++i) take(300 + 100 * i, 100 + i);  // the program goes on
  ASSERT_EQ(divergences.seen.size(), 1u);
  EXPECT_EQ(divergences.seen[0].reason, c.reason);
  EXPECT_EQ(divergences.seen[0].sequence, c.sequence);
  EXPECT_FALSE(a.following_plan());
  std::uint64_t tag_of = 0;
  for (const auto& [p, n] : held) {
    std::uint64_t tag = 0;
    std::memcpy(&tag, p, sizeof tag);
    EXPECT_TRUE(has_tag(p, n, tag)) << "block " << tag_of++;
  }
  LUMA_REPLAY_CLEAN(a);
  EXPECT_TRUE(a.cache().check().empty());
  for (const auto& [p, n] : held) EXPECT_EQ(a.free(p), FreeStatus::ok);
  LUMA_REPLAY_CLEAN(a);
  EXPECT_EQ(a.stats().allocation.all.current, 0);
  EXPECT_EQ(a.replay_stats().served, c.sequence);
  EXPECT_EQ(dev.contract_violations(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, ContextAllocatorDivergence,
    ::testing::Values(DivergenceCase{"size_mismatch", DivergenceReason::size_mismatch, 1},
                      DivergenceCase{"beyond_plan", DivergenceReason::beyond_plan, 4},
                      DivergenceCase{"live_conflict", DivergenceReason::live_conflict, 2},
                      DivergenceCase{"arena_unavailable", DivergenceReason::arena_unavailable, 0},
                      DivergenceCase{"incompatible_plan", DivergenceReason::incompatible_plan, 0}),
    [](const ::testing::TestParamInfo<DivergenceCase>& i) { return std::string(i.param.name); });

TEST(ContextAllocator, ADeviceThePlanDoesNotListDivergesAtItsFirstAllocation) {
  HostDevice dev;
  const PlanFile plan = ten_in_turn();  // device 0 only
  ContextAllocator a(dev, 1, {}, &plan);
  RecordingDivergences divergences;
  a.set_divergence_sink(&divergences);
  ASSERT_EQ(a.allocate(4000).status, AllocStatus::ok);
  ASSERT_EQ(divergences.seen.size(), 1u);
  EXPECT_EQ(divergences.devices[0], 1);
  EXPECT_EQ(divergences.seen[0].reason, DivergenceReason::beyond_plan);
  EXPECT_EQ(divergences.seen[0].planned_allocations, 0u);
}

// Ordinary segments from one double (the plan's arena) and virtual memory from the other.
class ArenaAndPagesDevice final : public Device {
 public:
  Reservation reserve(std::size_t bytes) noexcept override { return host.reserve(bytes); }
  bool release(void* base, std::size_t bytes) noexcept override { return host.release(base, bytes); }
  VirtualMemory virtual_memory() const noexcept override { return pages.virtual_memory(); }
  Reservation reserve_address(std::size_t bytes) noexcept override { return pages.reserve_address(bytes); }
  bool release_address(void* base, std::size_t bytes) noexcept override { return pages.release_address(base, bytes); }
  Memory create_memory(std::size_t bytes) noexcept override { return pages.create_memory(bytes); }
  bool release_memory(std::uint64_t h, std::size_t bytes) noexcept override { return pages.release_memory(h, bytes); }
  int map_memory(void* addr, std::uint64_t h, std::size_t offset, std::size_t bytes) noexcept override {
    return pages.map_memory(addr, h, offset, bytes);
  }
  bool unmap_memory(void* addr, std::size_t bytes) noexcept override { return pages.unmap_memory(addr, bytes); }
  HostDevice host;
  PagedDevice pages;
};

// With a plan, the cache reaches the device through a lock of the context's; the virtual
// memory calls pass it too, so expandable segments work after a divergence.
TEST(ContextAllocator, AfterADivergenceTheCacheMakesExpandableSegments) {
  ArenaAndPagesDevice dev;
  const PlanFile plan = ten_in_turn();  // device 0 only: device 1 diverges at once
  AllocatorOptions options;
  options.expandable_segments = true;
  ContextAllocator a(dev, 1, options, &plan);
  const AllocResult r = a.allocate(3 * MiB);
  ASSERT_EQ(r.status, AllocStatus::ok);
  SegmentRange seg;
  ASSERT_TRUE(a.segment_of(r.ptr, &seg));
  EXPECT_TRUE(seg.expandable);
  EXPECT_GT(dev.pages.creates(), 0u);
  EXPECT_EQ(a.free(r.ptr), FreeStatus::ok);
  EXPECT_EQ(dev.pages.violations(), 0u);
}

TEST(ContextAllocator, MergedStatisticsAndEventsCoverTheArenaAndTheCache) {
  HostDevice dev;
  const PlanFile plan = ten_in_turn();
  ContextAllocator a(dev, 0, {}, &plan);
  RecordingSink sink;
  a.set_event_sink(&sink);
  void* p = a.allocate(4000).ptr;
  void* q = a.allocate(100).ptr;  // diverges: the cache serves it
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.num_device_alloc, 2u);  // the arena and one cache segment
  EXPECT_EQ(s.allocation.all.current, 2);
  EXPECT_EQ(s.allocated_bytes.all.current, 4096 + 256);
  EXPECT_EQ(s.requested_bytes.all.current, 4000 + 100);
  // The arena is a large-pool segment; the cache put the small request in its small pool.
  EXPECT_EQ(s.reserved_bytes.pool[static_cast<std::size_t>(Pool::large)].current, 4096);
  EXPECT_EQ(s.allocated_bytes.pool[static_cast<std::size_t>(Pool::large)].current, 4096);
  EXPECT_EQ(s.allocated_bytes.pool[static_cast<std::size_t>(Pool::small)].current, 256);
  EXPECT_EQ(a.cached_bytes(), static_cast<std::size_t>(s.reserved_bytes.all.current - s.allocated_bytes.all.current));
  std::size_t size = 0;
  EXPECT_TRUE(a.owns(p, &size));
  EXPECT_EQ(size, 4096u);
  EXPECT_TRUE(a.owns(q, &size));
  EXPECT_EQ(size, 256u);
  SegmentRange r;
  EXPECT_TRUE(a.block_of(static_cast<char*>(p) + 100, &r));
  EXPECT_EQ(r.base, p);
  EXPECT_TRUE(a.block_of(static_cast<char*>(q) + 100, &r));
  EXPECT_EQ(r.base, q);
  EXPECT_EQ(sink.count(EventKind::segment_reserve), 2u);
  EXPECT_EQ(sink.count(EventKind::alloc), 2u);
  a.free(p);
  a.free(q);
  EXPECT_EQ(sink.count(EventKind::free_requested), 2u);
  LUMA_REPLAY_CLEAN(a);
}

TEST(ContextAllocator, ReleaseAllGivesTheArenaBack) {
  HostDevice dev;
  const PlanFile plan = ten_in_turn();
  ContextAllocator a(dev, 0, {}, &plan);
  ASSERT_NE(a.allocate(4000).ptr, nullptr);
  a.release_all();
  EXPECT_EQ(dev.segments(), 0u);
  EXPECT_EQ(dev.contract_violations(), 0u);
  LUMA_REPLAY_CLEAN(a);
}

// After a divergence the arena serves nothing new; the program's frees (there is no other
// caller of empty_cache in libluma.so) give it back once no block in it is live, its
// pending frees waited for first.
TEST(ContextAllocator, AfterADivergenceTheArenaGoesBackWithItsLastLiveBlock) {
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::per_free);
  const PlanFile plan = ten_in_turn();
  ContextAllocator a(dev, 0, {}, &plan);
  void* p = a.allocate(4000).ptr;  // planned: the arena
  ASSERT_NE(p, nullptr);
  void* q = a.allocate(5000).ptr;  // allocation 1 asks for other bytes: diverged, cache
  ASSERT_NE(q, nullptr);
  ASSERT_FALSE(a.following_plan());
  EXPECT_TRUE(a.replay_stats().arena_held);  // p still lives in it
  EXPECT_EQ(dev.segments(), 2u);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_FALSE(a.replay_stats().arena_held);
  EXPECT_EQ(dev.segments(), 1u);  // the cache's
  EXPECT_EQ(dev.fences_waited(), std::vector<Fence>{1});  // p's free, before the release
  EXPECT_EQ(dev.fences_released(), dev.fences_recorded());
  EXPECT_EQ(a.stats().num_device_free, 1u);
  EXPECT_EQ(a.stats().segment.all.current, 1);
  EXPECT_EQ(dev.contract_violations(), 0u);
  LUMA_REPLAY_CLEAN(a);
  ASSERT_EQ(a.free(q), FreeStatus::ok);
  LUMA_REPLAY_CLEAN(a);
}

TEST(ContextAllocator, ADivergenceWithNothingLiveInTheArenaReleasesItAtOnce) {
  HostDevice dev;
  const PlanFile plan = ten_in_turn();
  ContextAllocator a(dev, 0, {}, &plan);
  void* p = a.allocate(4000).ptr;
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_TRUE(a.replay_stats().arena_held);  // still following: the plan reuses it
  ASSERT_NE(a.allocate(5000).ptr, nullptr);  // diverged
  EXPECT_FALSE(a.replay_stats().arena_held);
  EXPECT_EQ(dev.segments(), 1u);
  EXPECT_EQ(a.stats().num_device_free, 1u);
  LUMA_REPLAY_CLEAN(a);
}

// Threads allocate and free concurrently: the plan is followed in whatever order the lock
// gives until the order breaks it, and then the cache takes over. Whatever happens, no two
// live blocks overlap, tags survive, and both allocators stay consistent. (TSan: a race
// between the replay, the cache and the shared device would show here.)
TEST(ContextAllocator, ThreadsNeverSeeOverlapsOrCorruptState) {
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::per_free);
  dev.set_idle(true);  // fences complete at once: the caching allocator's reuse is immediate
  // Eight slots of 1 KiB per round, all freed before the next round reuses the arena.
  std::vector<testing::Placed> placed;
  for (int round = 0; round < 50; ++round)
    for (int s = 0; s < 8; ++s) placed.push_back({1024, 1024, static_cast<std::uint64_t>(s) * 1024});
  const PlanFile plan = plan_of(manual_plan(placed));
  ContextAllocator a(dev, 0, {}, &plan);
  std::atomic<bool> failed{false};
  auto worker = [&](int id) {
    for (int i = 0; i < 400; ++i) {
      const std::size_t bytes = (i % 5 == 0) ? 1024 : 512 + 256 * (id % 3);
      const AllocResult r = a.allocate(bytes);
      if (r.status != AllocStatus::ok) {
        failed = true;
        return;
      }
      const std::uint64_t tag = (static_cast<std::uint64_t>(id) << 32) | static_cast<std::uint64_t>(i);
      write_tag(r.ptr, bytes, tag);
      std::this_thread::yield();
      if (!has_tag(r.ptr, bytes, tag)) failed = true;
      if (a.free(r.ptr) != FreeStatus::ok) failed = true;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  EXPECT_FALSE(failed.load());
  LUMA_REPLAY_CLEAN(a);
  const ReplayStats s = a.replay_stats();
  EXPECT_EQ(s.served + s.cache_allocations, 1600u);
}

// Threads that all follow the plan: every allocation asks for the same bytes and the plan
// gives each its own bytes, so any interleaving follows it. Replay alone, under contention.
TEST(ContextAllocator, ThreadsFollowingThePlanTogetherAreAllServedFromIt) {
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::batched);
  std::vector<testing::Placed> placed;
  for (int k = 0; k < 1600; ++k) placed.push_back({1000, 1024, static_cast<std::uint64_t>(k) * 1024});
  const PlanFile plan = plan_of(manual_plan(placed));
  ContextAllocator a(dev, 0, {}, &plan);
  std::atomic<bool> failed{false};
  auto worker = [&](int id) {
    std::vector<void*> mine;
    for (int i = 0; i < 400; ++i) {
      const AllocResult r = a.allocate(1000);
      if (r.status != AllocStatus::ok) failed = true;
      write_tag(r.ptr, 1000, static_cast<std::uint64_t>(id) * 1000 + static_cast<std::uint64_t>(i));
      mine.push_back(r.ptr);
      if (i % 3 == 2) {  // free an older one now and then
        if (a.free(mine[static_cast<std::size_t>(i) - 2]) != FreeStatus::ok) failed = true;
        mine[static_cast<std::size_t>(i) - 2] = nullptr;
      }
    }
    for (int i = 0; i < 400; ++i) {
      void* p = mine[static_cast<std::size_t>(i)];
      if (p == nullptr) continue;
      if (!has_tag(p, 1000, static_cast<std::uint64_t>(id) * 1000 + static_cast<std::uint64_t>(i))) failed = true;
      if (a.free(p) != FreeStatus::ok) failed = true;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  EXPECT_FALSE(failed.load());
  const ReplayStats s = a.replay_stats();
  EXPECT_TRUE(s.followed());
  EXPECT_EQ(s.served, 1600u);
  EXPECT_EQ(s.real_allocations, 1u);
  EXPECT_EQ(a.stats().allocation.all.current, 0);
  LUMA_REPLAY_CLEAN(a);
}

}  // namespace
}  // namespace luma::core
