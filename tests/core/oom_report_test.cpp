// oom_report_test.cpp - the out-of-memory report (core/stats/oom_report.h) built from a
// real caching allocator on the host test device: its numbers match the allocator's, the
// fragmentation hint appears when the cache holds enough memory but in pieces too small,
// and not when the device is simply full; and largest_free_block, the query it needs.
#include "stats/oom_report.h"

#include <gtest/gtest.h>

#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator_test_util.h"
#include "host_device.h"

namespace luma::core {
namespace {

using testing::must_alloc;

// Ten 4 MiB blocks fill two 20 MiB large segments (requests below min_large_alloc share
// them): the whole 40 MiB device.
std::vector<void*> fill_two_segments(CachingAllocator& a) {
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(must_alloc(a, 4 * MiB));
  return blocks;
}

OomReport report_after_failed(CachingAllocator& a, std::size_t bytes) {
  const AllocResult r = a.allocate(bytes);
  EXPECT_EQ(r.status, AllocStatus::out_of_memory);
  return make_oom_report(a.stats(), a.options(), a.largest_free_block(), bytes);
}

TEST(OomReport, FragmentedCacheGetsTheHint) {
  HostDevice dev(40 * MiB);
  CachingAllocator a(dev, 3, testing::pytorch_placement());
  std::vector<void*> blocks = fill_two_segments(a);
  for (std::size_t i = 0; i < blocks.size(); i += 2) ASSERT_EQ(a.free(blocks[i]), FreeStatus::ok);
  // 20 MiB cached in five separate 4 MiB holes; 8 MiB fits in none, and no segment is
  // wholly free, so releasing the cache gives nothing back.
  const OomReport r = report_after_failed(a, 8 * MiB);
  EXPECT_EQ(r.device, 3);
  EXPECT_EQ(r.requested, 8 * MiB);
  EXPECT_EQ(r.rounded, 8 * MiB);
  EXPECT_EQ(r.allocated, 20 * MiB);
  EXPECT_EQ(r.reserved, 40 * MiB);
  EXPECT_EQ(r.cached, 20 * MiB);
  EXPECT_EQ(r.largest_free_block, 4 * MiB);
  EXPECT_EQ(r.segments, 2);
  EXPECT_TRUE(oom_from_fragmentation(r));

  const std::string text = describe_oom(r);
  EXPECT_NE(text.find("CUDA out of memory. Tried to allocate 8.0 MiB."), std::string::npos) << text;
  EXPECT_NE(text.find("20.0 MiB is allocated by luma, and 20.0 MiB is reserved by luma but unallocated"),
            std::string::npos) << text;
  EXPECT_NE(text.find("the largest free block is 4.0 MiB, in 2 segments (40.0 MiB reserved)"),
            std::string::npos) << text;
  EXPECT_NE(text.find("fragmentation"), std::string::npos) << text;
  // large_segment is 20 MiB, and LUMA_CONF wants max_split_size above it.
  EXPECT_NE(text.find("LUMA_CONF=max_split_size_mb:21"), std::string::npos) << text;
  EXPECT_NE(text.find("a smaller large_segment (now 20.0 MiB)"), std::string::npos) << text;
  EXPECT_NE(text.find("driver did not report"), std::string::npos) << text;  // device fields unset
}

TEST(OomReport, FullDeviceGetsNoHint) {
  HostDevice dev(40 * MiB);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  const std::vector<void*> blocks = fill_two_segments(a);
  OomReport r = report_after_failed(a, 8 * MiB);
  EXPECT_EQ(r.allocated, 40 * MiB);
  EXPECT_EQ(r.cached, 0u);
  EXPECT_EQ(r.largest_free_block, 0u);
  EXPECT_FALSE(oom_from_fragmentation(r));
  r.device_known = true;
  r.device_total = 40 * MiB;
  r.device_free = 512;
  const std::string text = describe_oom(r);
  EXPECT_NE(text.find("GPU 0 has a total capacity of 40.0 MiB of which 512 B is free."), std::string::npos)
      << text;
  EXPECT_EQ(text.find("fragmentation"), std::string::npos) << text;
  EXPECT_EQ(text.find("LUMA_CONF"), std::string::npos) << text;
  EXPECT_EQ(text.find("memory limit"), std::string::npos) << text;
  r.memory_limit = 32 * MiB;
  EXPECT_NE(describe_oom(r).find("luma's memory limit on this device is 32.0 MiB."), std::string::npos)
      << describe_oom(r);
}

TEST(OomReport, CachedButNotEnoughIsNoFragmentation) {
  // One 4 MiB hole: the cache could not hold 8 MiB even in one piece.
  HostDevice dev(40 * MiB);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  std::vector<void*> blocks = fill_two_segments(a);
  ASSERT_EQ(a.free(blocks[3]), FreeStatus::ok);
  const OomReport r = report_after_failed(a, 8 * MiB);
  EXPECT_EQ(r.cached, 4 * MiB);
  EXPECT_EQ(r.largest_free_block, 4 * MiB);
  EXPECT_FALSE(oom_from_fragmentation(r));
}

TEST(OomReport, MaxSplitSizeAlreadySmallIsNotSuggestedAgain) {
  HostDevice dev(40 * MiB);
  AllocatorOptions o = testing::pytorch_placement();
  o.max_split_size = 21 * MiB;
  CachingAllocator a(dev, 0, o);
  std::vector<void*> blocks = fill_two_segments(a);
  for (std::size_t i = 0; i < blocks.size(); i += 2) ASSERT_EQ(a.free(blocks[i]), FreeStatus::ok);
  const OomReport r = report_after_failed(a, 8 * MiB);
  ASSERT_TRUE(oom_from_fragmentation(r));
  const std::string text = describe_oom(r);
  EXPECT_EQ(text.find("max_split_size_mb"), std::string::npos) << text;
  EXPECT_NE(text.find("Try a smaller large_segment"), std::string::npos) << text;
}

TEST(LargestFreeBlock, IsTheLargestMergedFreeBlock) {
  HostDevice dev(40 * MiB);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  EXPECT_EQ(a.largest_free_block(), 0u);  // no segment yet
  std::vector<void*> blocks = fill_two_segments(a);
  ASSERT_EQ(a.free(blocks[1]), FreeStatus::ok);
  ASSERT_EQ(a.free(blocks[2]), FreeStatus::ok);  // merges with blocks[1] once reusable
  ASSERT_EQ(a.free(blocks[7]), FreeStatus::ok);
  a.empty_cache();  // waits for pending frees: every freed block is free now
  EXPECT_EQ(a.largest_free_block(), 8 * MiB);
  LUMA_EXPECT_CLEAN(a);
}

TEST(OomTopSites, RanksSitesByLiveBytesAndLeavesOutBlocksWithoutStack) {
  const std::vector<LiveBlockSite> blocks = {
      {1, 100}, {2, 300}, {1, 150}, {0, 10'000}, {3, 50}, {2, 1}, {4, 250}, {5, 250}};
  const std::vector<SiteTotal> top = top_sites(blocks, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].stack, 2u);
  EXPECT_EQ(top[0].live_bytes, 301u);
  EXPECT_EQ(top[0].blocks, 2u);
  EXPECT_EQ(top[1].stack, 1u);  // 250 each for sites 1 (two blocks), 4 and 5: lower ids first
  EXPECT_EQ(top[1].live_bytes, 250u);
  EXPECT_EQ(top[1].blocks, 2u);
  EXPECT_EQ(top[2].stack, 4u);
  EXPECT_EQ(top_sites(blocks, 10).size(), 5u) << "stack 0 is no site";
  EXPECT_TRUE(top_sites({}, 5).empty());
}

TEST(OomReport, TopSitesAreListedWithTheirFrames) {
  HostDevice dev(8 * MiB);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  must_alloc(a, 6 * MiB);
  OomReport r = report_after_failed(a, 4 * MiB);
  EXPECT_EQ(describe_oom(r).find("Top allocation sites"), std::string::npos);
  r.top_sites.push_back({6 * MiB, 1, {"alloc_weights+0x1c", "main+0x20", "f3", "f4", "f5"}});
  r.top_sites.push_back({2 * MiB, 2, {"alloc_activations+0x8"}});
  const std::string text = describe_oom(r);
  EXPECT_NE(text.find(" Top allocation sites by live bytes: #1 6.0 MiB in 1 block: alloc_weights+0x1c "
                      "<- main+0x20 <- f3 <- f4; #2 2.0 MiB in 2 blocks: alloc_activations+0x8."),
            std::string::npos) << text;
  EXPECT_EQ(text.find("f5"), std::string::npos) << "at most kOomSiteFrames frames";
}

}  // namespace
}  // namespace luma::core
