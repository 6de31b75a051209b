// caching_allocator_test.cpp - unit tests of the caching allocator's behaviour: rounding,
// pools, best fit, split and merge, segments, empty_cache, bad frees, events and the
// PyTorch-style statistics. check() is asserted clean after every operation.
#include "allocator/caching_allocator.h"

#include <bit>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "allocator_test_util.h"
#include "allocator/free_index.h"
#include "host_device.h"

namespace luma::core {
namespace {

using testing::addr;
using testing::must_alloc;
using testing::RecordingSink;

constexpr std::size_t kSmall = static_cast<std::size_t>(Pool::small);
constexpr std::size_t kLarge = static_cast<std::size_t>(Pool::large);

TEST(RoundingAndPools, FollowPyTorchSizes) {
  const AllocatorOptions o = testing::pytorch_placement();
  EXPECT_EQ(round_size(o, 0), 0u);
  EXPECT_EQ(round_size(o, 1), 256u);
  EXPECT_EQ(round_size(o, 256), 256u);
  EXPECT_EQ(round_size(o, 257), 512u);
  EXPECT_EQ(pool_for(o, 1 * MiB), Pool::small);
  EXPECT_EQ(pool_for(o, 1 * MiB + 256), Pool::large);
  EXPECT_EQ(segment_size_for(o, 256), 2 * MiB);
  EXPECT_EQ(segment_size_for(o, 1 * MiB), 2 * MiB);
  EXPECT_EQ(segment_size_for(o, 1 * MiB + 256), 20 * MiB);
  EXPECT_EQ(segment_size_for(o, 10 * MiB - 256), 20 * MiB);
  EXPECT_EQ(segment_size_for(o, 10 * MiB), 10 * MiB);
  EXPECT_EQ(segment_size_for(o, 11 * MiB), 12 * MiB);
  AllocatorOptions big_min = o;
  big_min.min_segment = 4 * MiB;
  EXPECT_EQ(segment_size_for(big_min, 256), 4 * MiB);
}

TEST(CachingAllocator, ZeroBytesIsInvalidSize) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  const AllocResult r = a.allocate(0);
  EXPECT_EQ(r.status, AllocStatus::invalid_size);
  EXPECT_EQ(r.ptr, nullptr);
  EXPECT_EQ(dev.reserve_calls(), 0u);
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, SmallRequestGetsAlignedBlockOfSmallSegment) {
  HostDevice dev;
  CachingAllocator a(dev, 3, testing::pytorch_placement());
  void* p = must_alloc(a, 1000);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(addr(p) % 256, 0u);
  std::size_t size = 0;
  ASSERT_TRUE(a.owns(p, &size));
  EXPECT_EQ(size, 1024u);
  SegmentRange seg;
  ASSERT_TRUE(a.segment_of(static_cast<char*>(p) + 5000, &seg));
  EXPECT_EQ(seg.base, p);
  EXPECT_EQ(seg.size, 2 * MiB);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.device, 3);
  EXPECT_EQ(s.segment.pool[kSmall].current, 1);
  EXPECT_EQ(s.segment.pool[kLarge].current, 0);
  EXPECT_EQ(s.allocated_bytes.all.current, 1024);
  EXPECT_EQ(s.requested_bytes.all.current, 1000);
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(s.inactive_split.all.current, 1);  // the rest of the segment
  EXPECT_EQ(s.inactive_split_bytes.all.current, static_cast<std::int64_t>(2 * MiB - 1024));
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(dev.reserve_calls(), 1u);
  EXPECT_EQ(a.cached_bytes(), 2 * MiB - 1024);
}

TEST(CachingAllocator, LargeRequestsGetLargeSegments) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  void* mid = must_alloc(a, 5 * MiB);
  SegmentRange seg;
  ASSERT_TRUE(a.segment_of(mid, &seg));
  EXPECT_EQ(seg.size, 20 * MiB);
  void* big = must_alloc(a, 15 * MiB + 1);  // more than the 15 MiB left in the first
  ASSERT_TRUE(a.segment_of(big, &seg));
  EXPECT_EQ(seg.size, 16 * MiB);  // >= 10 MiB: its own segment, rounded up to 2 MiB
  LUMA_EXPECT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.segment.pool[kLarge].current, 2);
  EXPECT_EQ(s.allocated_bytes.pool[kLarge].current, static_cast<std::int64_t>(20 * MiB + 256));
}

TEST(CachingAllocator, FreedBlockIsReusedWithoutTheDevice) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  void* p = must_alloc(a, 4096);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  void* q = must_alloc(a, 4096);
  EXPECT_EQ(p, q);
  EXPECT_EQ(dev.reserve_calls(), 1u);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.alloc_calls, 2u);
  EXPECT_EQ(s.free_calls, 1u);
  EXPECT_EQ(s.num_device_alloc, 1u);
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, SplitsThenMergesNeighboursBackIntoOneBlock) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  void* x = must_alloc(a, 1024);
  void* y = must_alloc(a, 2048);
  void* z = must_alloc(a, 4096);
  EXPECT_EQ(addr(y), addr(x) + 1024);  // carved in address order from one segment
  EXPECT_EQ(addr(z), addr(y) + 2048);
  LUMA_ASSERT_CLEAN(a);
  ASSERT_EQ(a.free(y), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(a.stats().free_blocks, 2u);  // y's hole and the tail
  ASSERT_EQ(a.free(x), FreeStatus::ok);  // merges with y
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(a.stats().free_blocks, 2u);
  void* w = must_alloc(a, 3072);  // fits exactly in the merged x+y
  EXPECT_EQ(w, x);
  ASSERT_EQ(a.free(w), FreeStatus::ok);
  ASSERT_EQ(a.free(z), FreeStatus::ok);  // everything merges into the whole segment
  LUMA_ASSERT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(s.inactive_split.all.current, 0);  // a whole segment is releasable
  EXPECT_EQ(s.inactive_split_bytes.all.current, 0);
  EXPECT_EQ(s.active.all.current, 0);
}

TEST(CachingAllocator, BestFitPicksTheSmallestHoleThatFits) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  // Holes of 8 KiB, 2 KiB and 4 KiB, kept apart by live separators.
  void* h8 = must_alloc(a, 8192);
  void* s1 = must_alloc(a, 256);
  void* h2 = must_alloc(a, 2048);
  void* s2 = must_alloc(a, 256);
  void* h4 = must_alloc(a, 4096);
  void* s3 = must_alloc(a, 256);
  for (void* p : {h8, h2, h4}) ASSERT_EQ(a.free(p), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(must_alloc(a, 3000), h4);  // 3072 fits 4 KiB and 8 KiB: the smaller
  EXPECT_EQ(must_alloc(a, 2048), h2);  // exact fit
  EXPECT_EQ(must_alloc(a, 5000), h8);
  LUMA_EXPECT_CLEAN(a);
  (void)s1, (void)s2, (void)s3;
}

TEST(CachingAllocator, RemainderBelowMinSplitStaysWithTheBlock) {
  HostDevice dev;
  AllocatorOptions o = testing::pytorch_placement();
  o.min_split = 1024;
  CachingAllocator a(dev, 0, o);
  void* hole = must_alloc(a, 1280);
  void* sep = must_alloc(a, 256);
  ASSERT_EQ(a.free(hole), FreeStatus::ok);
  void* p = must_alloc(a, 512);  // remainder 768 < 1024: handed out whole
  EXPECT_EQ(p, hole);
  std::size_t size = 0;
  ASSERT_TRUE(a.owns(p, &size));
  EXPECT_EQ(size, 1280u);
  EXPECT_EQ(a.stats().allocated_bytes.all.current, 1280 + 256);
  EXPECT_EQ(a.stats().requested_bytes.all.current, 512 + 256);
  LUMA_EXPECT_CLEAN(a);
  (void)sep;
}

TEST(CachingAllocator, NeverMergesAcrossSegments) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  void* p = must_alloc(a, 1 * MiB);
  void* q = must_alloc(a, 1 * MiB);  // fills the first small segment
  void* r = must_alloc(a, 1 * MiB);  // second segment
  EXPECT_EQ(a.stats().segment.all.current, 2);
  for (void* x : {p, q, r}) ASSERT_EQ(a.free(x), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(a.stats().free_blocks, 2u);  // one per segment, however the host laid them out
}

TEST(CachingAllocator, PoolsDoNotShareBlocks) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  void* large = must_alloc(a, 2 * MiB);
  ASSERT_EQ(a.free(large), FreeStatus::ok);  // 20 MiB of free large-pool memory
  void* small = must_alloc(a, 1024);         // still gets its own small segment
  SegmentRange seg;
  ASSERT_TRUE(a.segment_of(small, &seg));
  EXPECT_EQ(seg.size, 2 * MiB);
  EXPECT_EQ(a.stats().segment.pool[kSmall].current, 1);
  ASSERT_EQ(a.free(small), FreeStatus::ok);
  void* large2 = must_alloc(a, 1 * MiB + 256);  // from the large pool's free block
  ASSERT_TRUE(a.segment_of(large2, &seg));
  EXPECT_EQ(seg.size, 20 * MiB);
  EXPECT_EQ(dev.reserve_calls(), 2u);
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, OversizeBlocksServeOnlyOversizeRequestsWhole) {
  HostDevice dev;
  AllocatorOptions o = testing::pytorch_placement();
  o.max_split_size = 4 * MiB;
  CachingAllocator a(dev, 0, o);
  void* big = must_alloc(a, 12 * MiB);  // own 12 MiB segment, an oversize block
  ASSERT_EQ(a.free(big), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  void* normal = must_alloc(a, 2 * MiB);  // below max_split_size: never takes it
  SegmentRange seg;
  ASSERT_TRUE(a.segment_of(normal, &seg));
  EXPECT_EQ(seg.size, 20 * MiB);
  void* over = must_alloc(a, 5 * MiB);  // oversize request: takes the 12 MiB block, unsplit
  EXPECT_EQ(over, big);
  std::size_t size = 0;
  ASSERT_TRUE(a.owns(over, &size));
  EXPECT_EQ(size, 12 * MiB);
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, OversizeRequestDoesNotTakeAFarBiggerBlock) {
  HostDevice dev;
  AllocatorOptions o = testing::pytorch_placement();
  o.max_split_size = 4 * MiB;
  CachingAllocator a(dev, 0, o);
  void* huge = must_alloc(a, 64 * MiB);
  ASSERT_EQ(a.free(huge), FreeStatus::ok);
  void* p = must_alloc(a, 10 * MiB);  // 64 >= 10 + 20 (large_segment): a new segment
  EXPECT_NE(p, huge);
  EXPECT_EQ(dev.reserve_calls(), 2u);
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, EmptyCacheReleasesOnlyWhollyFreeSegments) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  RecordingSink sink;
  a.set_event_sink(&sink);
  void* keep = must_alloc(a, 1 * MiB);
  void* other = must_alloc(a, 1 * MiB);
  void* gone = must_alloc(a, 1 * MiB);  // second segment
  ASSERT_EQ(a.free(gone), FreeStatus::ok);
  ASSERT_EQ(a.free(other), FreeStatus::ok);  // first segment still holds `keep`
  EXPECT_EQ(a.empty_cache(), 2 * MiB);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(dev.segments(), 1u);
  EXPECT_EQ(dev.in_use(), 2 * MiB);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.num_device_free, 1u);
  EXPECT_EQ(s.num_empty_cache, 1u);
  EXPECT_EQ(s.segment.all.current, 1);
  EXPECT_EQ(s.segment.all.peak, 2);
  EXPECT_EQ(s.reserved_bytes.all.peak, static_cast<std::int64_t>(4 * MiB));
  EXPECT_EQ(sink.count(EventKind::segment_release), 1u);
  ASSERT_EQ(sink.events.back().kind, EventKind::empty_cache);
  EXPECT_EQ(sink.events.back().size, 2 * MiB);
  EXPECT_TRUE(a.owns(keep));
  ASSERT_EQ(a.free(keep), FreeStatus::ok);
  EXPECT_EQ(a.empty_cache(), 2 * MiB);
  EXPECT_EQ(dev.in_use(), 0u);
  LUMA_EXPECT_CLEAN(a);
}

// Release before growth (release_free_segments, the default): above the high-water mark
// every wholly free segment of the request's pool goes, in the order the segments became
// wholly free, then the other pool's, least recently freed first, only as far as the new
// segment needs; a segment that is not wholly free and the rest of the other pool stay.
TEST(CachingAllocator, GrowthAboveTheMarkReleasesIdleSegmentsOldestFirst) {
  HostDevice dev;
  AllocatorOptions o;
  o.pressure_divisor = 0;
  CachingAllocator a(dev, 0, o);
  RecordingSink sink;
  a.set_event_sink(&sink);
  // Three 12 MiB blocks, a segment each (>= min_large_alloc), and two full 2 MiB
  // segments of the small pool, plus a small block that keeps a third one busy.
  void* x1 = must_alloc(a, 12 * MiB);
  void* x2 = must_alloc(a, 12 * MiB);
  void* x3 = must_alloc(a, 12 * MiB);
  void* s1a = must_alloc(a, 1 * MiB);
  void* s1b = must_alloc(a, 1 * MiB);
  void* s2a = must_alloc(a, 1 * MiB);
  void* s2b = must_alloc(a, 1 * MiB);
  void* busy = must_alloc(a, 4 * KiB);
  ASSERT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(42 * MiB));
  for (void* p : {x2, x1, x3, s2a, s2b, s1a, s1b}) ASSERT_EQ(a.free(p), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  sink.events.clear();
  // 38 MiB more would raise reserved (42 MiB, the mark) to 80: 38 MiB must go first. The
  // large pool's 36 MiB, in the order freed, then the small segment freed first (2 MiB).
  void* big = must_alloc(a, 38 * MiB);
  LUMA_ASSERT_CLEAN(a);
  std::vector<std::uintptr_t> released;
  for (const Event& e : sink.events)
    if (e.kind == EventKind::segment_release) released.push_back(e.address);
  EXPECT_EQ(released, (std::vector<std::uintptr_t>{addr(x2), addr(x1), addr(x3), addr(s2a)}));
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(42 * MiB));
  EXPECT_EQ(a.stats().segment.all.current, 3);  // big, the small one freed last, busy's
  ASSERT_EQ(a.free(big), FreeStatus::ok);
  ASSERT_EQ(a.free(busy), FreeStatus::ok);
  EXPECT_EQ(a.empty_cache(), 42 * MiB);
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, EmptyCacheKeepsASegmentTheDeviceWouldNotRelease) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  ASSERT_EQ(a.free(must_alloc(a, 512)), FreeStatus::ok);
  dev.set_fail_releases(true);
  EXPECT_EQ(a.empty_cache(), 0u);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(a.stats().segment.all.current, 1);
  dev.set_fail_releases(false);
  EXPECT_EQ(a.empty_cache(), 2 * MiB);
  LUMA_EXPECT_CLEAN(a);
}

// allocate_own_segment: a reservation of exactly the request (rounded to the alignment, no
// minimum segment), its pointer the reservation's start, counted like any allocation, and
// given back to the device at its free, not cached. A segment the device will not give
// back (exported, a capture underway) stays, fenced, as an ordinary cached segment.
TEST(CachingAllocator, OwnSegmentIsExactlyTheRequestAndGoesBackAtItsFree) {
  HostDevice dev;
  CachingAllocator a(dev, 0);
  RecordingSink sink;
  a.set_event_sink(&sink);
  const AllocResult r = a.allocate_own_segment(2 * MiB + 100);
  ASSERT_EQ(r.status, AllocStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  SegmentRange seg;
  ASSERT_TRUE(a.segment_of(r.ptr, &seg));
  EXPECT_EQ(seg.base, r.ptr);
  EXPECT_EQ(seg.size, 2 * MiB + 256);
  EXPECT_EQ(dev.in_use(), 2 * MiB + 256);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(2 * MiB + 256));
  EXPECT_EQ(a.stats().allocated_bytes.all.current, static_cast<std::int64_t>(2 * MiB + 256));
  // A small one too: no minimum segment.
  const AllocResult small = a.allocate_own_segment(1000);
  ASSERT_EQ(small.status, AllocStatus::ok);
  EXPECT_EQ(dev.in_use(), 2 * MiB + 256 + 1024);
  ASSERT_EQ(a.free(r.ptr), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(dev.in_use(), 1024u) << "given back at its free";
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 1024);
  EXPECT_EQ(a.free(r.ptr), FreeStatus::not_owned) << "gone: not luma's any more";
  // An ordinary allocation afterwards is served from a new ordinary segment.
  void* p = must_alloc(a, 4096);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(dev.segments(), 2u);
  // The device keeps a segment: it stays, cached, and is released by empty_cache later.
  dev.set_fail_releases(true);
  ASSERT_EQ(a.free(small.ptr), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(dev.segments(), 2u);
  dev.set_fail_releases(false);
  EXPECT_EQ(a.empty_cache(), 2 * MiB + 1024);
  EXPECT_EQ(dev.in_use(), 0u);
  EXPECT_EQ(sink.count(EventKind::segment_reserve), 3u);
  EXPECT_EQ(sink.count(EventKind::segment_release), 3u);
  EXPECT_EQ(sink.count(EventKind::free_completed), 3u);
  LUMA_EXPECT_CLEAN(a);
  a.set_event_sink(nullptr);
}

// With batched fences an own segment goes back at its free all the same (the driver's own
// free synchronizes, as the program's would have); when the device keeps it, the block
// waits for its fence like any free before it can be reused.
TEST(CachingAllocator, OwnSegmentKeptByTheDeviceIsFencedLikeAnyFree) {
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::per_free);
  CachingAllocator a(dev, 0);
  const AllocResult r = a.allocate_own_segment(4 * MiB);
  ASSERT_EQ(r.status, AllocStatus::ok);
  ASSERT_EQ(a.free(r.ptr), FreeStatus::ok);
  EXPECT_EQ(dev.in_use(), 0u);
  const AllocResult k = a.allocate_own_segment(4 * MiB);
  ASSERT_EQ(k.status, AllocStatus::ok);
  dev.set_fail_releases(true);
  ASSERT_EQ(a.free(k.ptr), FreeStatus::ok);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(dev.in_use(), 4 * MiB);
  EXPECT_EQ(a.cached_bytes(), 4 * MiB);
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, ForeignPointerIsNotOwned) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  int local = 0;
  EXPECT_EQ(a.free(&local), FreeStatus::not_owned);
  EXPECT_EQ(a.free(nullptr), FreeStatus::not_owned);
  void* p = must_alloc(a, 256);
  EXPECT_EQ(a.free(&local), FreeStatus::not_owned);
  EXPECT_EQ(a.stats().invalid_frees, 0u);
  EXPECT_FALSE(a.owns(&local));
  EXPECT_FALSE(a.segment_of(&local, nullptr));
  EXPECT_TRUE(a.owns(p));
  LUMA_EXPECT_CLEAN(a);
}

// The free index's size classes, computed without branches, against their definition:
// below 64 units one class per unit; above, the power of two and 64 steps of it.
TEST(FreeIndex, SizeClassesFollowTheirDefinition) {
  FreeIndex fi;
  fi.set_unit_shift(8);
  auto expected = [](std::uint64_t u) {
    if (u < FreeIndex::kSl) return FreeIndex::Class{0, static_cast<unsigned>(u)};
    const unsigned m = static_cast<unsigned>(std::bit_width(u)) - 1;
    return FreeIndex::Class{m - FreeIndex::kSlBits + 1,
                            static_cast<unsigned>((u >> (m - FreeIndex::kSlBits)) - FreeIndex::kSl)};
  };
  std::vector<std::uint64_t> units;
  for (std::uint64_t u = 0; u < (1u << 16); ++u) units.push_back(u);
  for (unsigned k = 16; k < 54; ++k)
    for (std::uint64_t d : {0ull, 1ull, 63ull, 64ull, 12345ull}) {
      units.push_back((std::uint64_t{1} << k) + d);
      units.push_back((std::uint64_t{1} << k) - 1 - d);
    }
  for (std::uint64_t u : units) {
    const FreeIndex::Class got = fi.class_of(static_cast<std::size_t>(u << 8));
    const FreeIndex::Class want = expected(u);
    ASSERT_EQ(got.fl, want.fl) << "units " << u;
    ASSERT_EQ(got.sl, want.sl) << "units " << u;
  }
}

// A test double that hands out address ranges it never touches (the allocator never
// dereferences device memory), so a block bigger than any host could back can exist.
class AddressRangeDevice final : public Device {
 public:
  Reservation reserve(std::size_t bytes) noexcept override {
    const std::uintptr_t base = next_;
    next_ += bytes;
    return {reinterpret_cast<void*>(base), 0};
  }
  bool release(void*, std::size_t) noexcept override { return true; }

 private:
  std::uintptr_t next_ = std::uintptr_t{1} << 44;
};

// The pointer map keeps a block's size in 31 bits of alignment units; a bigger block's
// size is read from its record instead, and must account exactly the same way.
TEST(CachingAllocator, ABlockTooBigForThePointerMapsSizeFieldIsAccountedExactly) {
  AddressRangeDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  const std::size_t huge = std::size_t{600} * GiB;  // 600 GiB / 256 B > 2^31 units
  void* big = must_alloc(a, huge);
  void* small = must_alloc(a, 1000);
  std::size_t size = 0;
  ASSERT_TRUE(a.owns(big, &size));
  EXPECT_EQ(size, huge);
  SegmentRange r;
  ASSERT_TRUE(a.block_of(big, &r));
  EXPECT_EQ(r.size, huge);
  LUMA_ASSERT_CLEAN(a);
  ASSERT_EQ(a.free(big), FreeStatus::ok);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 1024);
  EXPECT_EQ(s.allocated_bytes.all.freed, huge);
  EXPECT_EQ(s.requested_bytes.all.current, 1000);
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(must_alloc(a, huge), big);  // reused, not reserved again
  LUMA_EXPECT_CLEAN(a);
  (void)small;
}

TEST(CachingAllocator, BlockOfFindsTheLiveBlockAroundAnInteriorAddress) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  void* x = must_alloc(a, 1000);
  void* y = must_alloc(a, 4096);
  SegmentRange r;
  ASSERT_TRUE(a.block_of(static_cast<char*>(x) + 500, &r));
  EXPECT_EQ(r.base, x);
  EXPECT_EQ(r.size, 1024u);  // the rounded size
  ASSERT_TRUE(a.block_of(y, &r));
  EXPECT_EQ(r.base, y);
  ASSERT_TRUE(a.block_of(static_cast<char*>(y) + 4095, &r));
  EXPECT_EQ(r.base, y);
  EXPECT_EQ(r.size, 4096u);
  EXPECT_FALSE(a.block_of(static_cast<char*>(y) + 4096, &r));  // the free tail
  int local = 0;
  EXPECT_FALSE(a.block_of(&local, &r));
  ASSERT_EQ(a.free(x), FreeStatus::ok);
  EXPECT_FALSE(a.block_of(static_cast<char*>(x) + 1, &r));  // freed: no live block there
  EXPECT_TRUE(a.block_of(static_cast<char*>(y) + 1, nullptr));
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, DoubleAndInteriorFreesAreInvalidAndChangeNothing) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  void* p = must_alloc(a, 4096);
  void* q = must_alloc(a, 4096);
  EXPECT_EQ(a.free(static_cast<char*>(q) + 256), FreeStatus::invalid);  // interior
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  const DeviceStats before = a.stats();
  EXPECT_EQ(a.free(p), FreeStatus::invalid);  // double free
  EXPECT_EQ(a.free(static_cast<char*>(q) + 2 * MiB - 8192), FreeStatus::invalid);  // free tail
  const DeviceStats after = a.stats();
  EXPECT_EQ(after.invalid_frees, 3u);
  EXPECT_EQ(after.free_calls, before.free_calls);
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(after.free_blocks, before.free_blocks);
  EXPECT_TRUE(a.owns(q));
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, EventsArriveInOrderWithAddressesAndSizes) {
  HostDevice dev;
  CachingAllocator a(dev, 7, testing::pytorch_placement());
  RecordingSink sink;
  a.set_event_sink(&sink);
  void* p = must_alloc(a, 1000);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  a.empty_cache();
  using K = EventKind;
  EXPECT_EQ(sink.kinds(), (std::vector<K>{K::segment_reserve, K::alloc, K::free_requested, K::free_completed,
                                          K::segment_release, K::empty_cache}));
  const Event& alloc = sink.events[1];
  EXPECT_EQ(alloc.device, 7);
  EXPECT_EQ(alloc.address, addr(p));
  EXPECT_EQ(alloc.size, 1024u);
  EXPECT_EQ(alloc.requested, 1000u);
  EXPECT_EQ(sink.events[0].size, 2 * MiB);
  EXPECT_EQ(sink.events[2].address, addr(p));
  EXPECT_EQ(sink.events[4].address, addr(p));  // the segment started at the block
  a.set_event_sink(nullptr);
  must_alloc(a, 10);
  EXPECT_EQ(sink.events.size(), 6u);
}

TEST(CachingAllocator, CountersFollowPyTorchSemantics) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  void* p = must_alloc(a, 3 * MiB);  // large
  void* q = must_alloc(a, 100);      // small
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  void* r = must_alloc(a, 2 * MiB);  // large, reuses p's segment
  LUMA_ASSERT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.allocation.all.current, 2);
  EXPECT_EQ(s.allocation.all.peak, 2);
  EXPECT_EQ(s.allocation.all.allocated, 3u);
  EXPECT_EQ(s.allocation.all.freed, 1u);
  EXPECT_EQ(s.allocation.pool[kLarge].allocated, 2u);
  EXPECT_EQ(s.allocation.pool[kSmall].allocated, 1u);
  EXPECT_EQ(s.allocated_bytes.all.peak, static_cast<std::int64_t>(3 * MiB + 256));
  EXPECT_EQ(s.allocated_bytes.all.allocated, 5 * MiB + 256);
  EXPECT_EQ(s.allocated_bytes.all.freed, 3 * MiB);
  EXPECT_EQ(s.requested_bytes.all.current, static_cast<std::int64_t>(2 * MiB + 100));
  EXPECT_EQ(s.active.all.current, 2);
  EXPECT_EQ(s.segment.all.allocated, 2u);
  EXPECT_EQ(s.num_device_alloc, 2u);
  EXPECT_EQ(s.num_device_free, 0u);
  EXPECT_EQ(s.num_alloc_retries, 0u);
  const ReferenceStats ref = reference_view(s);
  EXPECT_EQ(ref.allocated_bytes, 2 * MiB + 256);
  EXPECT_EQ(ref.reserved_bytes, 22 * MiB);
  EXPECT_EQ(ref.peak_bytes, 3 * MiB + 256);
  EXPECT_EQ(ref.live_blocks, 2u);
  EXPECT_EQ(ref.free_blocks, 2u);
  EXPECT_EQ(ref.segments, 2u);
  EXPECT_EQ(ref.cuda_malloc_calls, 2u);
  EXPECT_EQ(ref.cuda_free_calls, 0u);
  (void)q, (void)r;
}

TEST(CachingAllocator, ReleaseAllGivesEverySegmentBack) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  must_alloc(a, 100);
  void* p = must_alloc(a, 5 * MiB);
  must_alloc(a, 30 * MiB);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  a.release_all();
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(dev.in_use(), 0u);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.segment.all.current, 0);
  EXPECT_EQ(s.allocation.all.current, 0);
  EXPECT_EQ(s.active_bytes.all.current, 0);
  EXPECT_EQ(s.free_blocks, 0u);
  EXPECT_EQ(s.num_device_free, 3u);
  must_alloc(a, 100);  // still usable
  LUMA_EXPECT_CLEAN(a);
}

TEST(CachingAllocator, HonoursALargerAlignment) {
  HostDevice dev(std::size_t{1} << 30, 4096);
  AllocatorOptions o = testing::pytorch_placement();
  o.alignment = 4096;
  o.min_split = 4096;
  CachingAllocator a(dev, 0, o);
  for (std::size_t n : {1u, 4097u, 100u, 70000u}) {
    void* p = must_alloc(a, n);
    EXPECT_EQ(addr(p) % 4096, 0u) << n;
  }
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.contract_violations(), 0u);
}

TEST(CachingAllocator, AbsurdRequestIsOutOfMemoryNotACrash) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  const AllocResult r = a.allocate(~std::size_t{0});
  EXPECT_EQ(r.status, AllocStatus::out_of_memory);
  EXPECT_EQ(r.ptr, nullptr);
  EXPECT_EQ(a.stats().num_ooms, 1u);
  LUMA_EXPECT_CLEAN(a);
}

}  // namespace
}  // namespace luma::core
