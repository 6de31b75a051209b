// caching_allocator_fence_test.cpp - stream safety through the Device fences: a block freed
// while work may still use it is pending (active, never reused) until its fence is done;
// the allocator polls fences at each allocate, waits on the oldest one rather than grow,
// and gives every fence token back exactly once.
#include "caching_allocator.h"

#include <gtest/gtest.h>

#include "allocator_test_util.h"
#include "host_device.h"

namespace luma::core {
namespace {

using testing::must_alloc;
using testing::RecordingSink;

class FenceTest : public ::testing::Test {
 protected:
  void SetUp() override { dev.set_fences(true); }
  HostDevice dev;
};

TEST_F(FenceTest, PendingBlockIsNotReusedBeforeItsFenceIsDone) {
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 1024);
  void* sep = must_alloc(a, 1024);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  DeviceStats s = a.stats();
  EXPECT_EQ(s.allocation.all.current, 1);  // the program no longer holds it ...
  EXPECT_EQ(s.active.all.current, 2);      // ... but it is still active
  EXPECT_EQ(s.active_bytes.all.current, 2048);
  EXPECT_FALSE(a.owns(p));
  void* q = must_alloc(a, 1024);  // the tail fits: no wait, and never p
  EXPECT_NE(q, p);
  EXPECT_TRUE(dev.fences_waited().empty());
  LUMA_ASSERT_CLEAN(a);
  dev.complete_fence(1);
  void* r = must_alloc(a, 1024);  // polled at the start of allocate: p is free again
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.stats().num_fence_waits, 0u);
  EXPECT_EQ(dev.fences_released(), 1u);
  LUMA_EXPECT_CLEAN(a);
  (void)sep;
}

TEST_F(FenceTest, FreeOfAPendingBlockIsInvalid) {
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 1024);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(a.free(p), FreeStatus::invalid);
  EXPECT_EQ(a.stats().invalid_frees, 1u);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, WaitsOnTheOldestFenceInsteadOfGrowing) {
  CachingAllocator a(dev, 0);
  RecordingSink sink;
  a.set_event_sink(&sink);
  void* p = must_alloc(a, 1 * MiB);  // two blocks fill one 2 MiB small segment
  void* q = must_alloc(a, 1 * MiB);
  ASSERT_EQ(a.free(p), FreeStatus::ok);  // fence 1
  ASSERT_EQ(a.free(q), FreeStatus::ok);  // fence 2
  LUMA_ASSERT_CLEAN(a);
  void* r = must_alloc(a, 1 * MiB);
  EXPECT_EQ(r, p);
  EXPECT_EQ(dev.fences_waited(), (std::vector<Fence>{1}));
  EXPECT_EQ(dev.reserve_calls(), 1u);
  EXPECT_EQ(a.stats().num_fence_waits, 1u);
  EXPECT_EQ(sink.count(EventKind::free_completed), 1u);
  LUMA_ASSERT_CLEAN(a);
  void* t = must_alloc(a, 1 * MiB);  // waits again, on fence 2
  EXPECT_EQ(t, q);
  EXPECT_EQ(dev.fences_waited(), (std::vector<Fence>{1, 2}));
  EXPECT_EQ(dev.reserve_calls(), 1u);
  LUMA_ASSERT_CLEAN(a);
  must_alloc(a, 1 * MiB);  // nothing pending: now it grows
  EXPECT_EQ(dev.reserve_calls(), 2u);
  EXPECT_EQ(dev.fences_waited().size(), 2u);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, WaitsOnlyForItsOwnPool) {
  CachingAllocator a(dev, 0);
  void* large = must_alloc(a, 20 * MiB);
  ASSERT_EQ(a.free(large), FreeStatus::ok);  // pending in the large pool
  must_alloc(a, 1 * MiB);                    // small pool: nothing of its own to wait for
  must_alloc(a, 1 * MiB);
  must_alloc(a, 1 * MiB);
  EXPECT_TRUE(dev.fences_waited().empty());
  EXPECT_EQ(dev.reserve_calls(), 3u);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, EmptyCacheWaitsForPendingBlocksFirst) {
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 4096);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(a.empty_cache(), 2 * MiB);
  EXPECT_EQ(dev.fences_waited(), (std::vector<Fence>{1}));
  EXPECT_EQ(dev.in_use(), 0u);
  EXPECT_EQ(a.stats().active.all.current, 0);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, EveryFenceIsReleasedExactlyOnce) {
  {
    CachingAllocator a(dev, 0);
    std::vector<void*> live;
    for (int round = 0; round < 50; ++round) {
      for (int i = 0; i < 8; ++i) live.push_back(must_alloc(a, static_cast<std::size_t>(512 + 1000 * i)));
      for (std::size_t i = 0; i < live.size(); i += 2) ASSERT_EQ(a.free(live[i]), FreeStatus::ok);
      std::vector<void*> rest;
      for (std::size_t i = 1; i < live.size(); i += 2) rest.push_back(live[i]);
      live.swap(rest);
      if (round % 3 == 0) dev.complete_all_fences();
      if (round % 10 == 9) a.empty_cache();
      LUMA_ASSERT_CLEAN(a);
    }
    for (void* p : live) ASSERT_EQ(a.free(p), FreeStatus::ok);
    LUMA_ASSERT_CLEAN(a);
    EXPECT_LT(dev.fences_released(), dev.fences_recorded());  // some are still pending
  }  // the destructor gives back those still pending
  EXPECT_EQ(dev.fences_released(), dev.fences_recorded());
  EXPECT_GT(dev.fences_recorded(), 200u);
  EXPECT_EQ(dev.contract_violations(), 0u);
}

TEST_F(FenceTest, NoFenceMeansReusableAtOnce) {
  dev.set_fences(false);
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 1024);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(a.stats().active.all.current, 0);
  EXPECT_EQ(must_alloc(a, 1024), p);
  EXPECT_EQ(dev.fences_recorded(), 0u);
  LUMA_EXPECT_CLEAN(a);
}

}  // namespace
}  // namespace luma::core
