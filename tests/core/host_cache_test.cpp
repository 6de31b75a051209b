// host_cache_test.cpp - core::HostCache (core/host_cache/): per flag set pools, sizes
// rounded to a page and served with at most 1/8 slack (never a power of two), the bound on
// bytes held with least-recently-freed eviction, and fences respected before reuse.
#include "host_cache/host_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "host_cache/host_cache_format.h"

namespace luma::core {
namespace {

// Fences a test completes by hand: each record() is a new token, not done until finish().
class ManualFences final : public HostFences {
 public:
  HostFence record() noexcept override {
    ++recorded;
    const HostFence f = next++;
    live.insert(f);
    return f;
  }
  bool done(HostFence f) noexcept override { return finished.count(f) != 0; }
  void release(HostFence f) noexcept override {
    EXPECT_EQ(live.erase(f), 1u) << "fence " << f << " released twice or never recorded";
  }
  void finish_all() { for (HostFence f = 1; f < next; ++f) finished.insert(f); }
  void finish(HostFence f) { finished.insert(f); }

  HostFence next = 1;
  int recorded = 0;
  std::set<HostFence> live, finished;
};

// Stands in for the driver: fresh, distinct addresses.
struct Driver {
  HostBlock alloc(HostCache& c, std::size_t bytes, unsigned flags, std::uintptr_t owner = 0) {
    HostBlock b{reinterpret_cast<void*>(next), c.block_size(bytes), flags, owner};
    next += b.bytes + 4096;
    c.adopt(b);
    return b;
  }
  std::uintptr_t next = 0x10000000;
};

constexpr std::size_t kMiB = std::size_t{1} << 20;

// What a program's allocation gets: a cached block, else a new one.
HostBlock get(HostCache& c, Driver& d, std::size_t bytes, unsigned flags = 0,
              std::uintptr_t owner = 0) {
  if (auto b = c.take(bytes, flags, owner)) return *b;
  return d.alloc(c, bytes, flags, owner);
}

TEST(HostCache, HitAfterFreeOnceTheFenceIsDone) {
  ManualFences f;
  HostCache c(f, {});
  Driver d;
  HostBlock a = get(c, d, kMiB);
  std::vector<HostBlock> to_free;
  EXPECT_EQ(c.give_back(a.ptr, to_free), HostCache::Freed::cached);
  EXPECT_TRUE(to_free.empty());
  EXPECT_EQ(f.recorded, 1);
  f.finish_all();
  auto again = c.take(kMiB, 0);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->ptr, a.ptr);
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().misses, 1u);
  EXPECT_TRUE(f.live.empty()) << "the fence of a reused block is given back";
}

TEST(HostCache, BlockWhoseFenceIsPendingIsNotReused) {
  ManualFences f;
  HostCache c(f, {});
  Driver d;
  HostBlock a = get(c, d, kMiB);
  std::vector<HostBlock> to_free;
  c.give_back(a.ptr, to_free);
  EXPECT_FALSE(c.take(kMiB, 0).has_value()) << "a copy may still read the block";
  EXPECT_EQ(c.stats().fenced_skips, 1u);
  f.finish(1);
  EXPECT_TRUE(c.take(kMiB, 0).has_value());
}

TEST(HostCache, FlagSetsArePoolsOfTheirOwn) {
  ManualFences f;
  HostCache c(f, {});
  Driver d;
  HostBlock mapped = get(c, d, kMiB, 0x2);  // DEVICEMAP
  std::vector<HostBlock> to_free;
  c.give_back(mapped.ptr, to_free);
  f.finish_all();
  EXPECT_FALSE(c.take(kMiB, 0).has_value());
  EXPECT_FALSE(c.take(kMiB, 0x1).has_value());
  EXPECT_FALSE(c.take(kMiB, 0x6).has_value());
  auto b = c.take(kMiB, 0x2);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->flags, 0x2u);
}

TEST(HostCache, BlocksServeTheirOwnerUnlessTheirFlagsServeAny) {
  ManualFences f;
  HostCache c(f, {.any_owner_flags = 0x1});  // PORTABLE
  Driver d;
  HostBlock mine = get(c, d, kMiB, 0, 7), portable = get(c, d, kMiB, 0x1, 7);
  std::vector<HostBlock> to_free;
  c.give_back(mine.ptr, to_free);
  c.give_back(portable.ptr, to_free);
  f.finish_all();
  EXPECT_FALSE(c.take(kMiB, 0, 8).has_value()) << "pinned for context 7 only";
  auto p = c.take(kMiB, 0x1, 8);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->ptr, portable.ptr);
  auto m = c.take(kMiB, 0, 7);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->ptr, mine.ptr);
}

TEST(HostCache, ForgetOwnerDropsItsBlocksWithoutFreeingThem) {
  ManualFences f;
  HostCache c(f, {});
  Driver d;
  HostBlock held = get(c, d, kMiB, 0, 7), live = get(c, d, kMiB, 0, 7), other = get(c, d, kMiB, 0, 9);
  std::vector<HostBlock> to_free;
  c.give_back(held.ptr, to_free);
  EXPECT_EQ(c.forget_owner(7), 2u);
  EXPECT_FALSE(c.owns(live.ptr));
  EXPECT_TRUE(c.owns(other.ptr));
  EXPECT_EQ(c.stats().held_bytes, 0u);
  EXPECT_EQ(c.stats().live_blocks, 1u);
  EXPECT_TRUE(f.live.empty());
  EXPECT_TRUE(to_free.empty());
  EXPECT_EQ(c.give_back(live.ptr, to_free), HostCache::Freed::not_ours);
}

TEST(HostCache, SizesRoundToAPageNotAPowerOfTwo) {
  ManualFences f;
  HostCache c(f, {});
  EXPECT_EQ(c.block_size(1), 4096u);
  EXPECT_EQ(c.block_size(kMiB + 1), kMiB + 4096);
  EXPECT_EQ(c.block_size(2 * kMiB + kMiB / 10), 2 * kMiB + 106496);  // 2.1 MiB: no 4 MiB
  EXPECT_EQ(c.block_size(0), 0u);
  EXPECT_EQ(c.block_size(SIZE_MAX), 0u);
}

TEST(HostCache, CachedBlockServesRequestsAtMostAnEighthSmaller) {
  ManualFences f;
  HostCache c(f, {});
  Driver d;
  HostBlock big = get(c, d, 9 * kMiB);
  std::vector<HostBlock> to_free;
  c.give_back(big.ptr, to_free);
  f.finish_all();
  // 8 MiB + 1 rounds to 8 MiB + 4 KiB; 9 MiB is within 1/8 of that: served.
  // 8 MiB - 4 KiB rounds to itself; 9 MiB is more than 1/8 larger: not served.
  EXPECT_FALSE(c.take(8 * kMiB - 4096, 0).has_value());
  auto hit = c.take(8 * kMiB + 1, 0);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->ptr, big.ptr);
  EXPECT_EQ(hit->bytes, 9 * kMiB) << "handed out whole: the driver's allocation";
  // Never a smaller block for a larger request.
  c.give_back(hit->ptr, to_free);
  f.finish_all();
  EXPECT_FALSE(c.take(9 * kMiB + 1, 0).has_value());
}

TEST(HostCache, BestFitAmongCachedBlocks) {
  ManualFences f;
  HostCache c(f, {});
  Driver d;
  HostBlock larger = get(c, d, kMiB + 100 * 1024);
  HostBlock exact = get(c, d, kMiB + 1);
  std::vector<HostBlock> to_free;
  c.give_back(larger.ptr, to_free);
  c.give_back(exact.ptr, to_free);
  f.finish_all();
  auto b = c.take(kMiB + 1, 0);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->ptr, exact.ptr);
}

TEST(HostCache, BoundEvictsLeastRecentlyFreedFirst) {
  ManualFences f;
  HostCache c(f, {.limit = 3 * kMiB});
  Driver d;
  HostBlock a = get(c, d, kMiB), b = get(c, d, kMiB), x = get(c, d, kMiB), y = get(c, d, kMiB);
  std::vector<HostBlock> to_free;
  c.give_back(a.ptr, to_free);
  c.give_back(b.ptr, to_free);
  c.give_back(x.ptr, to_free);
  EXPECT_TRUE(to_free.empty());
  EXPECT_EQ(c.stats().held_bytes, 3 * kMiB);
  c.give_back(y.ptr, to_free);  // a 4th MiB: the oldest (a) goes, though its fence is pending
  ASSERT_EQ(to_free.size(), 1u);
  EXPECT_EQ(to_free[0].ptr, a.ptr);
  EXPECT_EQ(c.stats().held_bytes, 3 * kMiB);
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(f.live.size(), 3u) << "the evicted block's fence is given back";
}

TEST(HostCache, BlockLargerThanTheBoundGoesToTheDriver) {
  ManualFences f;
  HostCache c(f, {.limit = kMiB});
  Driver d;
  HostBlock small = get(c, d, kMiB / 2), big = get(c, d, 2 * kMiB);
  std::vector<HostBlock> to_free;
  c.give_back(small.ptr, to_free);
  EXPECT_EQ(c.give_back(big.ptr, to_free), HostCache::Freed::to_driver);
  ASSERT_EQ(to_free.size(), 1u);
  EXPECT_EQ(to_free[0].ptr, big.ptr);
  EXPECT_EQ(c.stats().held_bytes, kMiB / 2) << "nothing evicted for a block that cannot stay";
  EXPECT_EQ(f.recorded, 1) << "no fence for a block the driver takes back";
}

TEST(HostCache, ZeroLimitKeepsNothing) {
  ManualFences f;
  HostCache c(f, {.limit = 0});
  Driver d;
  HostBlock a = get(c, d, 4096);
  std::vector<HostBlock> to_free;
  EXPECT_EQ(c.give_back(a.ptr, to_free), HostCache::Freed::to_driver);
  EXPECT_EQ(c.stats().held_bytes, 0u);
}

TEST(HostCache, UnknownPointerIsNotOursAndASecondFreeIsTwice) {
  ManualFences f;
  HostCache c(f, {});
  Driver d;
  int x = 0;
  std::vector<HostBlock> to_free;
  EXPECT_EQ(c.give_back(&x, to_free), HostCache::Freed::not_ours);
  HostBlock a = get(c, d, 4096);
  c.give_back(a.ptr, to_free);
  EXPECT_EQ(c.give_back(a.ptr, to_free), HostCache::Freed::twice)
      << "a second free of a cached block must not reach the driver, which would free it";
  EXPECT_TRUE(to_free.empty());
}

TEST(HostCache, ReleaseAllGivesBackEveryHeldBlockAndFence) {
  ManualFences f;
  HostCache c(f, {});
  Driver d;
  HostBlock a = get(c, d, 4096), b = get(c, d, kMiB, 0x4), live = get(c, d, 8192);
  std::vector<HostBlock> to_free;
  c.give_back(a.ptr, to_free);
  c.give_back(b.ptr, to_free);
  c.release_all(to_free);
  EXPECT_EQ(to_free.size(), 2u);
  EXPECT_TRUE(f.live.empty());
  EXPECT_EQ(c.stats().held_bytes, 0u);
  EXPECT_TRUE(c.owns(live.ptr)) << "live blocks stay the program's";
}

TEST(HostCache, DestructorGivesBackHeldFences) {
  ManualFences f;
  {
    HostCache c(f, {});
    Driver d;
    HostBlock a = get(c, d, 4096);
    std::vector<HostBlock> to_free;
    c.give_back(a.ptr, to_free);
    EXPECT_EQ(f.live.size(), 1u);
  }
  EXPECT_TRUE(f.live.empty());
}

TEST(HostCacheFormat, TextAndJsonShowTheCounters) {
  HostCacheStats s;
  EXPECT_EQ(format_host_cache_text(s, 1024), "");
  s.hits = 7;
  s.misses = 3;
  s.evictions = 2;
  const std::string text = format_host_cache_text(s, std::uint64_t{1} << 30);
  EXPECT_NE(text.find("hits 7, misses 3"), std::string::npos) << text;
  EXPECT_NE(text.find("of 1.0 GiB"), std::string::npos) << text;
  const std::string json = format_host_cache_json(s, 1024);
  EXPECT_NE(json.find("\"hits\": 7"), std::string::npos) << json;
  EXPECT_NE(json.find("\"limit\": 1024"), std::string::npos) << json;
  EXPECT_NE(json.find("\"evictions\": 2"), std::string::npos) << json;
}

}  // namespace
}  // namespace luma::core
