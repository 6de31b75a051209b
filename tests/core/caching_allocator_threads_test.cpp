// caching_allocator_threads_test.cpp - concurrent allocate / free from 8 threads on one
// allocator: each block is filled with its owner's tag and checked before it is freed, so
// two threads ever sharing bytes shows up; the counts add up at the end.
#include "allocator/caching_allocator.h"

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "allocator_test_util.h"
#include "host_device.h"

namespace luma::core {
namespace {

TEST(Threads, ConcurrentAllocateAndFreeNeverShareBytes) {
  HostDevice dev(std::size_t{4} << 30);
  CachingAllocator a(dev, 0);
  constexpr int kThreads = 8;
  constexpr int kSteps = 3000;
  std::atomic<int> corrupted{0};
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};

  auto worker = [&](int id) {
    std::mt19937 rng(static_cast<unsigned>(id) * 7919u + 1u);
    std::vector<std::pair<unsigned char*, std::size_t>> mine;
    const auto tag = static_cast<unsigned char>(id + 1);
    auto release = [&](std::size_t i) {
      auto [p, n] = mine[i];
      for (std::size_t k = 0; k < n; ++k)
        if (p[k] != tag) {
          ++corrupted;
          break;
        }
      if (a.free(p) != FreeStatus::ok) ++failures;
      mine[i] = mine.back();
      mine.pop_back();
    };
    for (int step = 0; step < kSteps; ++step) {
      if (mine.size() < 24 && rng() % 2 == 0) {
        const std::size_t n = rng() % 10 == 0 ? 1 + rng() % (2 * MiB) : 1 + rng() % (16 * KiB);
        const AllocResult r = a.allocate(n);
        if (r.status != AllocStatus::ok) {
          ++failures;
          continue;
        }
        auto* p = static_cast<unsigned char*>(r.ptr);
        std::memset(p, tag, n);
        mine.emplace_back(p, n);
      } else if (!mine.empty()) {
        release(rng() % mine.size());
      }
    }
    while (!mine.empty()) release(mine.size() - 1);
  };

  // A reader takes stats and runs check() while the workers run: both must be safe.
  std::thread reader([&] {
    while (!done.load()) {
      const DeviceStats s = a.stats();
      if (s.allocation.all.current < 0) ++failures;
      (void)a.cached_bytes();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  done = true;
  reader.join();

  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  LUMA_EXPECT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.allocation.all.current, 0);
  EXPECT_EQ(s.alloc_calls, s.free_calls);
  EXPECT_GT(s.alloc_calls, 0u);
}

}  // namespace
}  // namespace luma::core
