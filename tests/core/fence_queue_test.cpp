// fence_queue_test.cpp - the fence protocol (core/allocator/fence_queue.h) as each of its two users
// keeps it: the caching allocator and plan replay (through the ContextAllocator that puts a
// plan in front of the cache). One typed suite: the same scenario and the same assertions
// for both. A freed block's bytes come back only after a fence recorded after its free is
// done: polled when done already, waited for (oldest first) when needed at once, at once
// on an idle device or one without fences; batched frees share one fence; the oldest fence
// is waited for first; every token goes back exactly once; and a device that cannot wait now
// (a stream capture underway, core/base/device.h) is never waited for and its memory never
// reused early: the allocation is served from a new segment instead. This is the one place
// the protocol is tested; the users' own suites test only their policies around it (the
// cache's epochs and poll backoff: caching_allocator_fence_test.cpp).
//
// The scenario: four 512 KiB blocks fill 2 MiB (one small-pool segment of the cache; the
// plan's whole arena), the first is freed, and the next 512 KiB allocation can only reuse
// its bytes (the cache has nothing else free; the plan places it there) or take new memory.
#include <gtest/gtest.h>

#include <array>
#include <memory>

#include "allocator_test_util.h"
#include "allocator/caching_allocator.h"
#include "replay/context_allocator.h"
#include "host_device.h"
#include "plan/plan_file.h"

namespace luma::core {
namespace {

constexpr std::size_t kBlock = 512 * KiB;

// The caching allocator on its own.
class CacheUser {
 public:
  explicit CacheUser(HostDevice& dev) : a_(dev, 0) {}
  CachingAllocator& allocator() { return a_; }

 private:
  CachingAllocator a_;
};

// Plan replay: allocations 0-3 fill the arena, allocation 4 is planned on allocation 0's
// bytes. After a divergence the cache behind it serves.
class ReplayUser {
 public:
  explicit ReplayUser(HostDevice& dev) : plan_(make_plan()), a_(dev, 0, {}, &plan_) {}
  ContextAllocator& allocator() { return a_; }

 private:
  static PlanFile make_plan() {
    DevicePlanFile d;
    d.device = 0;
    d.alignment = 256;
    d.arena = 4 * kBlock;
    for (const std::uint64_t offset : {std::uint64_t{0}, 1 * kBlock, 2 * kBlock, 3 * kBlock, std::uint64_t{0}}) {
      PlannedAllocation a;
      a.name = std::to_string(d.allocations.size());
      a.requested = kBlock;
      a.size = kBlock;
      a.offset = offset;
      d.allocations.push_back(a);
    }
    PlanFile p;
    p.devices.push_back(d);
    return p;
  }
  PlanFile plan_;
  ContextAllocator a_;
};

template <class User>
class FenceQueueTest : public ::testing::Test {
 protected:
  FenceQueueTest() {
    dev.set_fences(true);
    dev.set_fence_mode(FenceMode::per_free);  // one fence per free: fence k is the k-th free
    user = std::make_unique<User>(dev);
  }

  // Makes the user again over a device of another fence mode (read once, at construction).
  void remake(FenceMode mode, bool fences = true) {
    user.reset();
    dev.set_fences(fences);
    dev.set_fence_mode(mode);
    user = std::make_unique<User>(dev);
  }
  auto& a() { return user->allocator(); }
  void* alloc() {
    const AllocResult r = a().allocate(kBlock);
    EXPECT_EQ(r.status, AllocStatus::ok);
    EXPECT_NE(r.ptr, nullptr);
    return r.ptr;
  }
  // Fills the 2 MiB and frees the first block; returns it.
  void* fill_and_free_first() {
    for (void*& p : held) p = alloc();
    EXPECT_EQ(a().free(held[0]), FreeStatus::ok);
    return held[0];
  }

  HostDevice dev;
  std::unique_ptr<User> user;
  std::array<void*, 4> held{};
};

using Users = ::testing::Types<CacheUser, ReplayUser>;
TYPED_TEST_SUITE(FenceQueueTest, Users);

TYPED_TEST(FenceQueueTest, ADoneFenceIsPolledAndTheBytesReusedWithoutAWait) {
  void* first = this->fill_and_free_first();
  EXPECT_EQ(this->dev.fences_recorded(), 1u);
  LUMA_ASSERT_CLEAN(this->a());
  this->dev.complete_fence(1);
  EXPECT_EQ(this->alloc(), first);
  EXPECT_TRUE(this->dev.fences_waited().empty());
  EXPECT_EQ(this->dev.fences_released(), 1u);
  EXPECT_EQ(this->a().stats().num_fence_waits, 0u);
  LUMA_EXPECT_CLEAN(this->a());
}

TYPED_TEST(FenceQueueTest, BytesNeededAtOnceWaitForTheirFenceFirst) {
  void* first = this->fill_and_free_first();
  const std::uint64_t reserves = this->dev.reserve_calls();
  EXPECT_EQ(this->alloc(), first);  // fence 1 is not done: waited for, never skipped
  EXPECT_EQ(this->dev.fences_waited(), std::vector<Fence>{1});
  EXPECT_EQ(this->dev.fences_released(), 1u);
  EXPECT_EQ(this->a().stats().num_fence_waits, 1u);
  EXPECT_EQ(this->dev.reserve_calls(), reserves);  // waited rather than grew
  LUMA_EXPECT_CLEAN(this->a());
}

TYPED_TEST(FenceQueueTest, AnIdleDeviceMakesTheBytesReusableAtOnce) {
  this->dev.set_idle(true);  // record_fence answers kNoFence
  void* first = this->fill_and_free_first();
  EXPECT_EQ(this->dev.record_calls(), 1u);
  EXPECT_EQ(this->dev.fences_recorded(), 0u);
  EXPECT_EQ(this->alloc(), first);
  EXPECT_TRUE(this->dev.fences_waited().empty());
  LUMA_EXPECT_CLEAN(this->a());
}

TYPED_TEST(FenceQueueTest, TheOldestFenceIsWaitedForNotTheNewest) {
  void* first = this->fill_and_free_first();
  ASSERT_EQ(this->a().free(this->held[1]), FreeStatus::ok);  // fence 2
  EXPECT_EQ(this->alloc(), first);
  EXPECT_EQ(this->dev.fences_waited(), std::vector<Fence>{1});
  EXPECT_EQ(this->dev.fences_released(), 1u);
  LUMA_EXPECT_CLEAN(this->a());
}

// Batched mode: the frees join an open epoch and call no device; one fence, recorded when
// an allocation needs their bytes, covers them all.
TYPED_TEST(FenceQueueTest, BatchedFreesShareOneFenceRecordedWhenTheirBytesAreNeeded) {
  this->remake(FenceMode::batched);
  void* first = this->fill_and_free_first();
  ASSERT_EQ(this->a().free(this->held[1]), FreeStatus::ok);
  EXPECT_EQ(this->dev.record_calls(), 0u);
  EXPECT_EQ(this->alloc(), first);
  EXPECT_EQ(this->dev.record_calls(), 1u);
  EXPECT_EQ(this->dev.fences_waited(), std::vector<Fence>{1});
  EXPECT_EQ(this->dev.fences_released(), 1u);
  LUMA_EXPECT_CLEAN(this->a());
}

TYPED_TEST(FenceQueueTest, ADeviceWithoutFencesMakesTheBytesReusableAtOnce) {
  this->remake(FenceMode::none, /*fences=*/false);
  void* first = this->fill_and_free_first();
  EXPECT_EQ(this->a().stats().active.all.current, 3);
  EXPECT_EQ(this->alloc(), first);
  EXPECT_EQ(this->dev.record_calls(), 0u);
  EXPECT_TRUE(this->dev.fences_waited().empty());
  LUMA_EXPECT_CLEAN(this->a());
}

TYPED_TEST(FenceQueueTest, EveryTokenGoesBackExactlyOnceAtDestruction) {
  this->fill_and_free_first();
  ASSERT_EQ(this->a().free(this->held[1]), FreeStatus::ok);
  EXPECT_EQ(this->dev.fences_recorded(), 2u);
  EXPECT_EQ(this->dev.fences_released(), 0u);
  this->user.reset();
  EXPECT_EQ(this->dev.fences_released(), 2u);
  EXPECT_TRUE(this->dev.fences_waited().empty());
  EXPECT_EQ(this->dev.contract_violations(), 0u);
}

TYPED_TEST(FenceQueueTest, ALostContextGivesTheTokensBackUnchecked) {
  this->fill_and_free_first();
  this->a().drop_device_memory();
  EXPECT_EQ(this->dev.fences_released(), 1u);
  EXPECT_TRUE(this->dev.fences_waited().empty());
  EXPECT_EQ(this->dev.poll_calls(), 0u);
  LUMA_EXPECT_CLEAN(this->a());
  this->user.reset();  // nothing left to give back twice
  EXPECT_EQ(this->dev.fences_released(), 1u);
  EXPECT_EQ(this->dev.contract_violations(), 0u);
}

TYPED_TEST(FenceQueueTest, EmptyCacheWaitsForEveryPendingFree) {
  this->fill_and_free_first();
  this->a().empty_cache();
  EXPECT_EQ(this->dev.fences_waited(), std::vector<Fence>{1});
  EXPECT_EQ(this->dev.fences_released(), 1u);
  EXPECT_EQ(this->a().stats().active.all.current, 3);
  LUMA_EXPECT_CLEAN(this->a());
}

// The requirement of stream capture (core/base/device.h): while the device cannot wait, the
// fence is not done, so the bytes are not reused; the allocation takes a new segment.
TYPED_TEST(FenceQueueTest, ADeviceThatCannotWaitNowGetsANewSegmentNeverTheFencedBytes) {
  void* first = this->fill_and_free_first();
  this->dev.set_capturing(true);
  const std::uint64_t reserves = this->dev.reserve_calls();
  void* next = this->alloc();
  EXPECT_NE(next, first);
  EXPECT_EQ(this->dev.reserve_calls(), reserves + 1);  // a new segment
  EXPECT_GE(this->dev.refused_waits(), 1u);
  EXPECT_TRUE(this->dev.fences_waited().empty());
  EXPECT_EQ(this->dev.fences_released(), 0u);       // fence 1 is still queued ...
  EXPECT_EQ(this->a().stats().active.all.current, 5);  // ... and its block still active
  EXPECT_EQ(this->a().stats().num_fence_waits, 0u);
  LUMA_ASSERT_CLEAN(this->a());

  // empty_cache cannot wait either: the pending block stays pending.
  this->a().empty_cache();
  EXPECT_TRUE(this->dev.fences_waited().empty());
  EXPECT_EQ(this->a().stats().active.all.current, 5);
  LUMA_ASSERT_CLEAN(this->a());

  // Capture over: the deferred fence completes and the block is free again.
  this->dev.set_capturing(false);
  this->dev.complete_all_fences();
  this->a().empty_cache();
  EXPECT_EQ(this->dev.fences_released(), 1u);
  EXPECT_EQ(this->a().stats().active.all.current, 4);
  EXPECT_EQ(this->dev.contract_violations(), 0u);
  LUMA_EXPECT_CLEAN(this->a());
}

}  // namespace
}  // namespace luma::core
