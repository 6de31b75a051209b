// check_full_test.cpp - the allocator's self-check of a -Dcheck=full build (its invariant
// check after each call that changes it, aborting on a failure): that it runs, and finds
// a broken state at the call that made it; and that ordinary use never trips it. The
// tree's setting reaches this program as it reaches core/ (tests/core/meson.build).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator_test_util.h"
#include "base/device.h"
#include "host_device.h"

namespace luma::core {
namespace {

#ifdef LUMA_CHECK_FULL
constexpr bool kCheckFull = true;
#else
constexpr bool kCheckFull = false;
#endif

constexpr std::size_t MiB = std::size_t{1} << 20;

// A device that breaks the contract: each segment starts 2 MiB after the last one's
// base, whatever its size, so a segment larger than that overlaps the next. Its
// addresses are numbers only (the allocator never touches device memory).
class OverlappingDevice final : public Device {
 public:
  FenceMode fence_mode() const noexcept override { return FenceMode::none; }
  Reservation reserve(std::size_t) noexcept override {
    const std::uintptr_t base = next_;
    next_ += 2 * MiB;
    return {reinterpret_cast<void*>(base), 0};
  }
  bool release(void*, std::size_t) noexcept override { return true; }

 private:
  std::uintptr_t next_ = std::uintptr_t{1} << 44;
};

// The second segment overlaps the first: the allocator cannot know, its check can. A
// check=full build stops at the allocate that took it, naming the call and the rule.
TEST(CheckFullDeathTest, AbortsAtTheCallThatBrokeAnInvariant) {
  if constexpr (!kCheckFull) GTEST_SKIP() << "a -Dcheck=full build's check; this tree is check=off";
  EXPECT_DEATH(
      {
        OverlappingDevice dev;
        CachingAllocator alloc(dev, 0);
        (void)alloc.allocate(64 * MiB);  // one segment: sound
        (void)alloc.allocate(64 * MiB);  // a second, 2 MiB on: overlapping
      },
      "luma: allocator check failed after allocate: segment 0x[0-9a-f]+ overlaps");
  // Without the second segment nothing is wrong, and nothing aborts.
  OverlappingDevice dev;
  CachingAllocator alloc(dev, 0);
  ASSERT_NE(alloc.allocate(64 * MiB).ptr, nullptr);
  EXPECT_TRUE(alloc.check().empty());
}

// 10^4 random allocations and frees of every size class, with fences pending, segments
// of their own, an empty_cache now and then and a release_all at the end: in a
// check=full build each of those calls ran the whole check, and none failed.
TEST(CheckFull, RandomUseNeverTripsTheCheck) {
  HostDevice dev(std::size_t{1} << 30);
  dev.set_fences(true);
  CachingAllocator alloc(dev, 0);
  std::mt19937_64 rng(20261208);
  std::vector<void*> live;
  std::vector<Fence> seen;
  for (int i = 0; i < 10000; ++i) {
    const unsigned what = rng() % 100;
    if (what < 50 || live.empty()) {
      const std::size_t sizes[] = {512, 4096, 100000, 1 * MiB + 7, 3 * MiB, 12 * MiB};
      const std::size_t bytes = sizes[rng() % 6] / (1 + rng() % 4);
      const AllocResult r = (what % 17 == 0) ? alloc.allocate_own_segment(bytes) : alloc.allocate(bytes);
      if (r.ptr != nullptr) live.push_back(r.ptr);
    } else if (what < 97) {
      const std::size_t k = rng() % live.size();
      ASSERT_EQ(alloc.free(live[k]), FreeStatus::ok);
      live[k] = live.back();
      live.pop_back();
    } else if (what < 99) {
      dev.complete_all_fences();
    } else {
      (void)alloc.empty_cache();
    }
  }
  for (void* p : live) ASSERT_EQ(alloc.free(p), FreeStatus::ok);
  dev.complete_all_fences();
  (void)alloc.empty_cache();
  LUMA_EXPECT_CLEAN(alloc);
  alloc.release_all();
  LUMA_EXPECT_CLEAN(alloc);
  EXPECT_EQ(dev.contract_violations(), 0u);
}

}  // namespace
}  // namespace luma::core
