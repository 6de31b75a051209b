// limited_device_test.cpp - core::LimitedDevice over the host test device: a reserve past
// the budget is refused as out of memory before the device is asked; the caching
// allocator then releases its cache, retries, and fails as at a real OOM; releases,
// device refusals and forgotten memory give the budget back; concurrent takers never pass
// the limit together.
#include "limits/limited_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "allocator_test_util.h"
#include "allocator/caching_allocator.h"
#include "host_device.h"
#include "limits/memory_budget.h"

namespace luma::core {
namespace {

using testing::must_alloc;

TEST(LimitedDevice, RefusesPastTheBudgetWithoutAskingTheDevice) {
  HostDevice host(1024 * MiB);
  ProcessBudget budget(8 * MiB);
  LimitedDevice dev(host, budget);
  Reservation a = dev.reserve(6 * MiB);
  ASSERT_NE(a.base, nullptr);
  EXPECT_EQ(budget.used(), 6 * MiB);
  const std::uint64_t calls = host.reserve_calls();
  Reservation b = dev.reserve(4 * MiB);
  EXPECT_EQ(b.base, nullptr);
  EXPECT_EQ(b.error, 0);  // out of memory, the code the allocator retries on
  EXPECT_EQ(host.reserve_calls(), calls);
  EXPECT_EQ(dev.refusals(), 1u);
  Reservation c = dev.reserve(2 * MiB);  // exactly up to the limit
  ASSERT_NE(c.base, nullptr);
  EXPECT_EQ(budget.used(), 8 * MiB);
  EXPECT_EQ(dev.reserved(), 8 * MiB);
  EXPECT_TRUE(dev.release(a.base, 6 * MiB));
  EXPECT_EQ(budget.used(), 2 * MiB);
  EXPECT_TRUE(dev.release(c.base, 2 * MiB));
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(host.in_use(), 0u);
}

TEST(LimitedDevice, ADeviceRefusalOrErrorGivesTheBudgetBack) {
  HostDevice host(4 * MiB);
  ProcessBudget budget(64 * MiB);
  LimitedDevice dev(host, budget);
  EXPECT_EQ(dev.reserve(8 * MiB).base, nullptr);  // the device is smaller than the budget
  EXPECT_EQ(budget.used(), 0u);
  host.fail_next_reserves(1, 46);
  Reservation r = dev.reserve(2 * MiB);
  EXPECT_EQ(r.base, nullptr);
  EXPECT_EQ(r.error, 46);  // the device's own code, unchanged
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(dev.refusals(), 0u);
}

TEST(LimitedDevice, AFailedReleaseKeepsTheBudget) {
  HostDevice host;
  ProcessBudget budget(8 * MiB);
  LimitedDevice dev(host, budget);
  Reservation r = dev.reserve(4 * MiB);
  ASSERT_NE(r.base, nullptr);
  host.set_fail_releases(true);
  EXPECT_FALSE(dev.release(r.base, 4 * MiB));
  EXPECT_EQ(budget.used(), 4 * MiB);  // the memory is still held
  host.set_fail_releases(false);
  EXPECT_TRUE(dev.release(r.base, 4 * MiB));
  EXPECT_EQ(budget.used(), 0u);
}

TEST(LimitedDevice, ForgottenMemoryGoesBackToTheBudget) {
  HostDevice host;
  ProcessBudget budget(8 * MiB);
  LimitedDevice a(host, budget), b(host, budget);  // two contexts of one device
  ASSERT_NE(a.reserve(4 * MiB).base, nullptr);
  ASSERT_NE(b.reserve(4 * MiB).base, nullptr);
  EXPECT_EQ(b.reserve(2 * MiB).base, nullptr);  // the two share the limit
  EXPECT_EQ(a.forget_reserved(), 4 * MiB);       // a's context was destroyed
  EXPECT_EQ(a.reserved(), 0u);
  EXPECT_EQ(budget.used(), 4 * MiB);
  EXPECT_NE(b.reserve(2 * MiB).base, nullptr);
}

TEST(LimitedDevice, FencesAreTheWrappedDevices) {
  HostDevice host;
  host.set_fences(true);
  host.set_fence_mode(FenceMode::per_free);
  ProcessBudget budget(8 * MiB);
  LimitedDevice dev(host, budget);
  EXPECT_EQ(dev.fence_mode(), FenceMode::per_free);
  const Fence f = dev.record_fence();
  EXPECT_NE(f, kNoFence);
  EXPECT_FALSE(dev.fence_done(f));
  dev.fence_wait(f);
  EXPECT_TRUE(dev.fence_done(f));
  dev.fence_release(f);
  EXPECT_EQ(host.fences_released(), 1u);
  EXPECT_EQ(host.contract_violations(), 0u);
}

// The allocator's own out-of-memory path does the rest: at the limit the cached segment
// is released and the request retried, then out_of_memory with nothing changed.
TEST(LimitedDevice, TheAllocatorReleasesItsCacheAtTheLimitThenFails) {
  HostDevice host(1024 * MiB);
  ProcessBudget budget(64 * MiB);
  LimitedDevice dev(host, budget);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  ASSERT_EQ(a.free(must_alloc(a, 1000)), FreeStatus::ok);  // a 2 MiB small segment, cached
  std::vector<void*> held;
  for (int i = 0; i < 3; ++i) held.push_back(must_alloc(a, 16 * MiB));
  EXPECT_EQ(a.stats().num_alloc_retries, 0u);
  held.push_back(must_alloc(a, 16 * MiB));  // 2 + 64 MiB > 64: only after the release
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  EXPECT_EQ(a.stats().num_device_free, 1u);
  EXPECT_EQ(budget.used(), 64 * MiB);
  const AllocResult r = a.allocate(16 * MiB);
  EXPECT_EQ(r.status, AllocStatus::out_of_memory);
  EXPECT_EQ(a.stats().num_ooms, 1u);
  EXPECT_LE(host.in_use(), 64 * MiB);
  LUMA_EXPECT_CLEAN(a);
  ASSERT_EQ(a.free(held.back()), FreeStatus::ok);
  held.pop_back();
  EXPECT_NE(must_alloc(a, 16 * MiB), nullptr);  // from the cache, no new reservation
  EXPECT_EQ(budget.used(), 64 * MiB);
  a.release_all();
  EXPECT_EQ(budget.used(), 0u);
}

// Many threads, two devices (contexts) on one budget: what is held never passes the
// limit, and everything comes back.
TEST(ProcessBudget, ConcurrentTakersNeverPassTheLimit) {
  ProcessBudget budget(10 * MiB);
  std::atomic<std::size_t> held{0};
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t n = (static_cast<std::size_t>(t) % 3 + 1) * MiB;
      for (int i = 0; i < 20000; ++i) {
        if (!budget.take(n)) continue;
        if (held.fetch_add(n) + n > 10 * MiB) over = true;
        held.fetch_sub(n);
        budget.give_back(n);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(over.load());
  EXPECT_EQ(budget.used(), 0u);
}

TEST(ProcessBudget, ARequestLargerThanTheLimitIsRefused) {
  ProcessBudget budget(4 * MiB);
  EXPECT_FALSE(budget.take(4 * MiB + 1));
  EXPECT_TRUE(budget.take(4 * MiB));
  EXPECT_FALSE(budget.take(1));
  EXPECT_FALSE(budget.take(SIZE_MAX));  // no wrap-around past the limit
  EXPECT_EQ(budget.used(), 4 * MiB);
  ProcessBudget none(0);  // a zero limit holds nothing
  EXPECT_FALSE(none.take(256));
}

}  // namespace
}  // namespace luma::core
