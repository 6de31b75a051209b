// allocator_lock_test.cpp - the per-device lock (core/allocator/allocator_lock.h): mutual exclusion
// under contention, waiters that went to sleep are woken (a lost wake-up would hang this
// test until meson's timeout fails it), try_lock semantics.
#include "allocator/allocator_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace luma::core {
namespace {

TEST(AllocatorLock, ExcludesUnderContention) {
  AllocatorLock lock;
  std::uint64_t counter = 0;  // plain: only the lock keeps the increments whole
  constexpr int kThreads = 8;
  constexpr int kRounds = 200'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard<AllocatorLock> g(lock);
        counter = counter + 1;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter, std::uint64_t{kThreads} * kRounds);
}

TEST(AllocatorLock, WakesWaitersThatWentToSleep) {
  AllocatorLock lock;
  std::atomic<int> inside{0};
  std::atomic<int> done{0};
  lock.lock();
  std::vector<std::thread> waiters;
  for (int t = 0; t < 4; ++t)
    waiters.emplace_back([&] {
      std::lock_guard<AllocatorLock> g(lock);
      inside.fetch_add(1);
      done.fetch_add(1);
    });
  // Long past the spin phase (about a microsecond): the waiters are asleep by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(inside.load(), 0) << "a waiter got in while the lock was held";
  lock.unlock();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(done.load(), 4);
}

TEST(AllocatorLock, TryLockFailsWhileHeldAndSucceedsAfter) {
  AllocatorLock lock;
  ASSERT_TRUE(lock.try_lock());
  bool other = true;
  std::thread([&] { other = lock.try_lock(); }).join();
  EXPECT_FALSE(other);
  lock.unlock();
  std::thread([&] {
    other = lock.try_lock();
    if (other) lock.unlock();
  }).join();
  EXPECT_TRUE(other);
}

// lock_until gives up at its deadline while the lock stays held (the exit statistics'
// case: a call stuck in a fence wait, or the exiting thread itself holding it), and takes
// the lock once it is released before the deadline.
TEST(LockUntil, GivesUpAtTheDeadlineAndTakesTheLockWhenReleased) {
  using Clock = std::chrono::steady_clock;
  AllocatorLock lock;
  lock.lock();
  const auto start = Clock::now();
  EXPECT_FALSE(lock_until(lock, start + std::chrono::milliseconds(50)));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(50));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    lock.unlock();
  });
  EXPECT_TRUE(lock_until(lock, Clock::now() + std::chrono::seconds(30)));
  releaser.join();
  EXPECT_FALSE(lock.try_lock());  // lock_until left it held by this thread
  lock.unlock();
  std::mutex m;  // any Lockable; time_point::max() waits as lock() does
  EXPECT_TRUE(lock_until(m, Clock::time_point::max()));
  m.unlock();
}

}  // namespace
}  // namespace luma::core
