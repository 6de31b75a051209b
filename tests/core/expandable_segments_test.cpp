// expandable_segments_test.cpp - the caching allocator with expandable segments
// (AllocatorOptions::expandable_segments) on a device double that checks the virtual
// memory contract strictly (tests/doubles/paged_device.h): one address range per pool,
// growth by the missing pages only, free memory moving to where it is needed,
// empty_cache, refused unmaps, pending blocks, out of memory and device errors, refused
// address space (ordinary segments instead), release
// and forgetting, snapshots, and a randomized model test. Every test ends with the
// allocator's invariants clean and no contract violation on the device.
#include "allocator/caching_allocator.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "allocator_test_util.h"
#include "host_device.h"
#include "paged_device.h"

namespace luma::core {
namespace {

using testing::addr;
using testing::must_alloc;

constexpr std::size_t kPage = 2 * MiB;

AllocatorOptions expandable() {
  AllocatorOptions o;
  o.expandable_segments = true;
  return o;
}

std::size_t reserved(const CachingAllocator& a) {
  return static_cast<std::size_t>(a.stats().reserved_bytes.all.current);
}
std::int64_t reserved_now(const CachingAllocator& a) { return a.stats().reserved_bytes.all.current; }

SegmentRange segment(const CachingAllocator& a, const void* p) {
  SegmentRange r;
  EXPECT_TRUE(a.segment_of(p, &r));
  return r;
}

TEST(ExpandableSegments, BlocksOfEachPoolLieInOneRangeAndReservedIsThePagesMapped) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  std::vector<void*> small, large;
  for (std::size_t n : {std::size_t{512}, std::size_t{4096}, 100 * KiB, 1 * MiB}) small.push_back(must_alloc(a, n));
  for (std::size_t n : {3 * MiB, 5 * MiB, 12 * MiB, 40 * MiB}) large.push_back(must_alloc(a, n));
  const SegmentRange s0 = segment(a, small[0]), l0 = segment(a, large[0]);
  EXPECT_TRUE(s0.expandable);
  EXPECT_TRUE(l0.expandable);
  EXPECT_NE(s0.base, l0.base);
  for (void* p : small) {
    EXPECT_EQ(segment(a, p).base, s0.base);
    EXPECT_TRUE(dev.mapped(p, 1));
  }
  for (void* p : large) EXPECT_EQ(segment(a, p).base, l0.base);
  EXPECT_EQ(dev.address_ranges(), 2u);
  EXPECT_EQ(dev.ordinary_reserves(), 0u);
  EXPECT_EQ(reserved_now(a), static_cast<std::int64_t>(dev.mapped_bytes()));
  EXPECT_EQ(dev.held(), dev.mapped_bytes());
  EXPECT_EQ(dev.mapped_bytes() % kPage, 0u);
  // The small blocks (1.1 MiB in all) fill one page; the large ones (60 MiB) exactly 30
  // pages, each growth merging the free end of the last page with the new ones.
  EXPECT_EQ(dev.mapped_bytes(), kPage + 60 * MiB);
  for (void* p : small) EXPECT_EQ(a.free(p), FreeStatus::ok);
  for (void* p : large) EXPECT_EQ(a.free(p), FreeStatus::ok);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, AFreeBlockAtTheEndMergesWithTheNewPages) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  // A growth's new memory comes in pieces of at least a page (and at most four pieces):
  // 4 MiB is two memories of one page.
  void* p = must_alloc(a, 3 * MiB);  // maps 4 MiB; 1 MiB free at the end
  EXPECT_EQ(reserved_now(a), static_cast<std::int64_t>(4 * MiB));
  EXPECT_EQ(dev.creates(), 2u);
  void* q = must_alloc(a, 5 * MiB);  // the free 1 MiB and 4 MiB more
  EXPECT_EQ(addr(q), addr(p) + 3 * MiB);
  EXPECT_EQ(reserved_now(a), static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(dev.held(), 8 * MiB);
  EXPECT_EQ(dev.creates(), 4u);
  EXPECT_EQ(dev.created_bytes(), 8 * MiB);
  EXPECT_TRUE(dev.mapped(q, 5 * MiB));
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, AFreePageInTheMiddleMovesWhereABiggerRequestNeedsIt) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  void* x = must_alloc(a, 4 * MiB);
  void* b = must_alloc(a, 4 * MiB);
  void* c = must_alloc(a, 4 * MiB);
  void* e = must_alloc(a, 4 * MiB);
  const std::size_t high = 16 * MiB;
  EXPECT_EQ(reserved_now(a), static_cast<std::int64_t>(high));
  ASSERT_EQ(a.free(e), FreeStatus::ok);
  a.empty_cache();  // the top 4 MiB go back: reserved 12 MiB, the mark stays at 16
  EXPECT_EQ(dev.held(), 12 * MiB);
  ASSERT_EQ(a.free(b), FreeStatus::ok);
  const std::uint64_t creates = dev.creates();
  const std::size_t created = dev.created_bytes();
  void* d = must_alloc(a, 8 * MiB);  // b's 4 MiB does not fit: its memories move up
  EXPECT_TRUE(dev.mapped(d, 8 * MiB));
  EXPECT_FALSE(dev.any_mapped(b, 4 * MiB));
  EXPECT_EQ(reserved_now(a), static_cast<std::int64_t>(high));  // no higher than the mark
  EXPECT_EQ(dev.held(), high);
  EXPECT_EQ(dev.creates(), creates + 2);              // two pages, for the part not covered
  EXPECT_EQ(dev.created_bytes(), created + 4 * MiB);  // not 8: b's memories were reused
  EXPECT_EQ(dev.mapped_bytes(), high);
  for (void* p : {x, c, d}) EXPECT_EQ(a.free(p), FreeStatus::ok);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, EmptyCacheGivesBackEveryMemoryWhollyFree) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  std::vector<void*> ps;
  for (std::size_t n : {std::size_t{512}, std::size_t{3000}, 700 * KiB, 3 * MiB, 9 * MiB, 33 * MiB}) ps.push_back(must_alloc(a, n));
  for (void* p : ps) ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_GT(a.empty_cache(), 0u);
  EXPECT_EQ(dev.held(), 0u);
  EXPECT_EQ(dev.memories(), 0u);
  EXPECT_EQ(dev.mapped_bytes(), 0u);
  EXPECT_EQ(reserved(a), 0u);
  LUMA_EXPECT_CLEAN(a);

  // 16 MiB is four memories of 4 MiB. A live block on the first keeps it mapped, whole
  // (a memory is unmapped only whole); the three others go back.
  void* whole = must_alloc(a, 16 * MiB);
  EXPECT_EQ(dev.memories(), 4u);
  ASSERT_EQ(a.free(whole), FreeStatus::ok);
  void* live = must_alloc(a, 2 * MiB);
  const std::uint64_t creates = dev.creates();
  a.empty_cache();
  EXPECT_TRUE(dev.mapped(live, 2 * MiB));
  EXPECT_EQ(dev.mapped_bytes(), 4 * MiB);
  EXPECT_EQ(dev.held(), 4 * MiB);
  EXPECT_EQ(dev.memories(), 1u);
  EXPECT_EQ(reserved(a), 4 * MiB);
  LUMA_EXPECT_CLEAN(a);
  void* next = must_alloc(a, 2 * MiB);  // the free half of that memory: no new memory
  EXPECT_TRUE(dev.mapped(next, 2 * MiB));
  EXPECT_EQ(dev.creates(), creates);
  EXPECT_EQ(dev.held(), 4 * MiB);
  EXPECT_EQ(reserved(a), 4 * MiB);
  EXPECT_EQ(a.free(live), FreeStatus::ok);
  EXPECT_EQ(a.free(next), FreeStatus::ok);
  a.empty_cache();
  EXPECT_EQ(dev.held(), 0u);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, WhileTheDeviceRefusesToUnmapNothingIsGivenBack) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  void* x = must_alloc(a, 4 * MiB);
  void* y = must_alloc(a, 4 * MiB);
  void* z = must_alloc(a, 4 * MiB);
  ASSERT_EQ(a.free(y), FreeStatus::ok);
  ASSERT_EQ(a.free(z), FreeStatus::ok);
  dev.set_capturing(true);
  EXPECT_EQ(a.empty_cache(), 0u);
  EXPECT_GT(dev.refused_unmaps(), 0u);
  EXPECT_EQ(dev.held(), 12 * MiB);
  EXPECT_EQ(reserved(a), 12 * MiB);
  EXPECT_TRUE(dev.mapped(y, 8 * MiB));
  LUMA_EXPECT_CLEAN(a);
  // Growth above the mark cannot move y's pages now: new memory instead, still correct.
  void* big = must_alloc(a, 10 * MiB);
  EXPECT_TRUE(dev.mapped(big, 10 * MiB));
  LUMA_EXPECT_CLEAN(a);
  dev.set_capturing(false);
  ASSERT_EQ(a.free(big), FreeStatus::ok);
  ASSERT_EQ(a.free(x), FreeStatus::ok);
  EXPECT_GT(a.empty_cache(), 0u);
  EXPECT_EQ(dev.held(), 0u);
  EXPECT_EQ(reserved(a), 0u);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, PendingBlocksAreNeverUnmapped) {
  for (FenceMode mode : {FenceMode::per_free, FenceMode::batched}) {
    PagedDevice dev;
    dev.set_fences(true, mode);
    dev.set_cannot_wait(true);  // fences stay not done: the blocks stay pending
    CachingAllocator a(dev, 0, expandable());
    void* x = must_alloc(a, 4 * MiB);
    void* y = must_alloc(a, 4 * MiB);
    void* z = must_alloc(a, 4 * MiB);
    ASSERT_EQ(a.free(y), FreeStatus::ok);
    ASSERT_EQ(a.free(z), FreeStatus::ok);
    a.empty_cache();
    EXPECT_TRUE(dev.mapped(y, 8 * MiB));
    LUMA_EXPECT_CLEAN(a);
    void* big = must_alloc(a, 16 * MiB);  // above the mark: unmaps free pages, not pending ones
    EXPECT_TRUE(dev.mapped(y, 8 * MiB));
    EXPECT_TRUE(dev.mapped(big, 16 * MiB));
    EXPECT_GE(addr(big), addr(z) + 4 * MiB);
    LUMA_EXPECT_CLEAN(a);
    dev.set_cannot_wait(false);
    dev.complete_all_fences();
    for (void* p : {x, big}) ASSERT_EQ(a.free(p), FreeStatus::ok);
    a.empty_cache();
    EXPECT_EQ(dev.held(), 0u);
    EXPECT_EQ(reserved(a), 0u);
    LUMA_EXPECT_CLEAN(a);
    EXPECT_EQ(dev.violations(), 0u);
  }
}

TEST(ExpandableSegments, OutOfMemoryReleasesFreePagesAndRetries) {
  PagedDevice dev(kPage, 16 * MiB);
  AllocatorOptions o = expandable();
  o.release_free_segments = false;  // only the out-of-memory path gives pages back
  CachingAllocator a(dev, 0, o);
  void* s = must_alloc(a, 512);        // a small page
  void* big = must_alloc(a, 8 * MiB);  // freed below: pages elsewhere
  void* keep = must_alloc(a, 2 * MiB);
  ASSERT_EQ(a.free(big), FreeStatus::ok);
  EXPECT_EQ(dev.held(), 12 * MiB);
  void* p = must_alloc(a, 4 * MiB + 6 * MiB);  // 10 MiB: fits only after big's pages go
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(dev.mapped(p, 10 * MiB));
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  EXPECT_GT(dev.refused_creates(), 0u);
  EXPECT_LE(dev.peak_held(), 16 * MiB);
  LUMA_EXPECT_CLEAN(a);

  const DeviceStats before = a.stats();
  const AllocResult r = a.allocate(8 * MiB);  // 4 MiB left at most: cannot fit
  EXPECT_EQ(r.status, AllocStatus::out_of_memory);
  EXPECT_EQ(r.ptr, nullptr);
  EXPECT_EQ(a.stats().num_ooms, before.num_ooms + 1);
  EXPECT_EQ(a.stats().allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_LE(dev.peak_held(), 16 * MiB);
  LUMA_EXPECT_CLEAN(a);
  for (void* q : {s, keep, p}) EXPECT_EQ(a.free(q), FreeStatus::ok);
  void* again = must_alloc(a, 14 * MiB);  // everything back in the cache: fits again
  EXPECT_TRUE(dev.mapped(again, 14 * MiB));
  EXPECT_EQ(a.free(again), FreeStatus::ok);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, OutOfMemoryAtTheHighWaterMarkMovesFreePages) {
  PagedDevice dev(kPage, 16 * MiB);
  CachingAllocator a(dev, 0, expandable());  // release_free_segments on (the default)
  void* s = must_alloc(a, 512);
  void* big = must_alloc(a, 8 * MiB);
  void* keep = must_alloc(a, 2 * MiB);
  ASSERT_EQ(a.free(big), FreeStatus::ok);
  void* p = must_alloc(a, 12 * MiB);
  EXPECT_TRUE(dev.mapped(p, 12 * MiB));
  EXPECT_LE(dev.peak_held(), 16 * MiB);
  EXPECT_EQ(a.allocate(4 * MiB).status, AllocStatus::out_of_memory);
  LUMA_EXPECT_CLEAN(a);
  for (void* q : {s, keep, p}) EXPECT_EQ(a.free(q), FreeStatus::ok);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, DeviceErrorsAreReturnedWithTheirCode) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  void* held = must_alloc(a, 1 * MiB + 256);  // the expanse exists now
  dev.fail_next_creates(1, 802);
  AllocResult r = a.allocate(6 * MiB);
  EXPECT_EQ(r.status, AllocStatus::device_error);
  EXPECT_EQ(r.device_error, 802);
  LUMA_EXPECT_CLEAN(a);

  for (int skip : {0, 2}) {  // the first page, or the third of four, refused
    const std::size_t before = dev.held();
    dev.fail_next_maps(1, 803, skip);
    r = a.allocate(8 * MiB + 3 * MiB);
    EXPECT_EQ(r.status, AllocStatus::device_error) << skip;
    EXPECT_EQ(r.device_error, 803);
    EXPECT_EQ(dev.held(), before);  // the memory made for it went back
    EXPECT_EQ(reserved(a), dev.mapped_bytes());
    LUMA_EXPECT_CLEAN(a);
  }
  EXPECT_EQ(a.stats().num_ooms, 0u);
  void* ok = must_alloc(a, 11 * MiB);
  EXPECT_TRUE(dev.mapped(ok, 11 * MiB));
  EXPECT_EQ(a.free(ok), FreeStatus::ok);
  EXPECT_EQ(a.free(held), FreeStatus::ok);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

// The device refuses address space for a pool (cuMemAddressReserve: a process short of
// address space, or any refusal): that pool grows by ordinary segments from then on, and
// the device is not asked again; the other pool keeps its expanse. Nothing fails that an
// ordinary segment can serve.
TEST(ExpandableSegments, RefusedAddressSpaceGivesThePoolOrdinarySegments) {
  PagedDevice dev;
  dev.allow_ordinary_segments(true);
  CachingAllocator a(dev, 0, expandable());
  dev.fail_next_reserve_addresses(1, 801);
  void* p = must_alloc(a, 4 * MiB);  // the large pool: refused, an ordinary segment
  EXPECT_FALSE(segment(a, p).expandable);
  EXPECT_EQ(dev.ordinary_segments(), 1u);
  void* q = must_alloc(a, 512);  // the small pool: its expanse
  EXPECT_TRUE(segment(a, q).expandable);
  EXPECT_EQ(dev.address_reserves(), 1u);
  void* r = must_alloc(a, 30 * MiB);  // the large pool again: not asked again
  EXPECT_FALSE(segment(a, r).expandable);
  EXPECT_EQ(dev.address_reserves(), 1u);
  EXPECT_EQ(dev.ordinary_segments(), 2u);

  LUMA_EXPECT_CLEAN(a);
  for (void* x : {p, q, r}) EXPECT_EQ(a.free(x), FreeStatus::ok);
  a.empty_cache();
  EXPECT_EQ(dev.ordinary_segments(), 0u);
  EXPECT_EQ(dev.held(), 0u);
  EXPECT_EQ(reserved(a), 0u);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

// A range larger than usual, for one huge request, refused: that request is tried as an
// ordinary segment (out of memory here), and the pool still asks for its usual range.
TEST(ExpandableSegments, AHugeRequestsRefusedRangeDoesNotDecideForThePool) {
  PagedDevice dev;
  dev.allow_ordinary_segments(true);
  CachingAllocator a(dev, 0, expandable());
  dev.fail_next_reserve_addresses(1, 2);
  const AllocResult huge = a.allocate(std::size_t{1} << 40);
  EXPECT_EQ(huge.ptr, nullptr);
  EXPECT_EQ(huge.status, AllocStatus::out_of_memory);
  EXPECT_EQ(dev.ordinary_segments(), 0u);
  void* p = must_alloc(a, 4 * MiB);
  EXPECT_TRUE(segment(a, p).expandable);
  EXPECT_EQ(dev.address_reserves(), 1u);
  EXPECT_EQ(a.free(p), FreeStatus::ok);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, ADeviceWithoutVirtualMemoryGetsOrdinarySegments) {
  HostDevice dev;
  CachingAllocator a(dev, 0, expandable());
  void* p = must_alloc(a, 3 * MiB);
  void* q = must_alloc(a, 512);
  EXPECT_FALSE(segment(a, p).expandable);
  EXPECT_FALSE(segment(a, q).expandable);
  EXPECT_EQ(dev.segments(), 2u);
  EXPECT_TRUE(dev.contains(p, 3 * MiB));
  for (const SegmentSnapshot& s : a.snapshot()) EXPECT_FALSE(s.expandable);
  EXPECT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(a.free(q), FreeStatus::ok);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.contract_violations(), 0u);
}

TEST(ExpandableSegments, ReleaseAllGivesBackEverything) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  std::vector<void*> ps;
  for (std::size_t n : {std::size_t{512}, 2 * MiB, 7 * MiB, std::size_t{20000}, 30 * MiB, 5 * MiB}) ps.push_back(must_alloc(a, n));
  ASSERT_EQ(a.free(ps[2]), FreeStatus::ok);
  ASSERT_EQ(a.free(ps[3]), FreeStatus::ok);
  a.empty_cache();  // leaves holes behind
  a.release_all();
  EXPECT_EQ(dev.held(), 0u);
  EXPECT_EQ(dev.mapped_bytes(), 0u);
  EXPECT_EQ(dev.memories(), 0u);
  EXPECT_EQ(dev.address_ranges(), 0u);
  EXPECT_EQ(reserved(a), 0u);
  EXPECT_EQ(a.stats().segment.all.current, 0);
  EXPECT_FALSE(a.owns(ps[0]));
  LUMA_EXPECT_CLEAN(a);
  void* again = must_alloc(a, 3 * MiB);  // usable again: a new range
  EXPECT_TRUE(dev.mapped(again, 3 * MiB));
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, DropDeviceMemoryForgetsEverything) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  void* x = must_alloc(a, 512);
  void* y = must_alloc(a, 6 * MiB);
  void* z = must_alloc(a, 6 * MiB);
  ASSERT_EQ(a.free(y), FreeStatus::ok);
  a.empty_cache();  // y's memories unmapped: a hole in the large range
  const std::uint64_t unmaps = dev.unmaps(), releases = dev.releases();
  a.drop_device_memory();
  EXPECT_EQ(dev.unmaps(), unmaps);  // no device call
  EXPECT_EQ(dev.releases(), releases);
  EXPECT_EQ(reserved(a), 0u);
  EXPECT_EQ(a.stats().segment.all.current, 0);
  EXPECT_EQ(a.stats().allocated_bytes.all.current, 0);
  EXPECT_FALSE(a.owns(x));
  EXPECT_FALSE(a.owns(z));
  LUMA_EXPECT_CLEAN(a);
  void* again = must_alloc(a, 5 * MiB);
  EXPECT_TRUE(dev.mapped(again, 5 * MiB));
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegments, SnapshotListsEachMappedRunAsASegment) {
  PagedDevice dev;
  CachingAllocator a(dev, 0, expandable());
  void* s = must_alloc(a, 4096);
  void* x = must_alloc(a, 4 * MiB);
  void* y = must_alloc(a, 4 * MiB);
  void* z = must_alloc(a, 3 * MiB);
  ASSERT_EQ(a.free(y), FreeStatus::ok);
  a.empty_cache();  // y's pages unmapped: the large range has two runs
  const AllocatorSnapshot snap = a.snapshot();
  std::size_t large_runs = 0, total = 0;
  for (const SegmentSnapshot& seg : snap) {
    EXPECT_TRUE(seg.expandable);
    EXPECT_EQ(seg.address % kPage, 0u);
    EXPECT_EQ(seg.size % kPage, 0u);
    EXPECT_TRUE(dev.mapped(reinterpret_cast<void*>(seg.address), seg.size));
    std::uintptr_t at = seg.address;
    for (const BlockSnapshot& b : seg.blocks) {
      EXPECT_EQ(b.address, at);
      at += b.size;
    }
    EXPECT_EQ(at, seg.address + seg.size);
    large_runs += seg.pool == Pool::large ? 1 : 0;
    total += seg.size;
  }
  EXPECT_EQ(large_runs, 2u);
  EXPECT_EQ(total, dev.mapped_bytes());
  EXPECT_EQ(snap.size(), 3u);
  const SegmentRange rx = segment(a, x), rz = segment(a, z);
  EXPECT_TRUE(rx.expandable);
  EXPECT_EQ(rx.base, rz.base);
  EXPECT_GE(addr(z) + 3 * MiB, addr(x));
  EXPECT_LE(addr(z) + 3 * MiB, addr(rx.base) + rx.size);
  EXPECT_TRUE(segment(a, s).expandable);
  for (void* p : {s, x, z}) EXPECT_EQ(a.free(p), FreeStatus::ok);
  LUMA_EXPECT_CLEAN(a);
  EXPECT_EQ(dev.violations(), 0u);
}

// ---- randomized model test ---------------------------------------------------------

struct ModelCase {
  unsigned seed;
  bool fences;
  std::size_t capacity;  // 0: none to speak of
  bool capturing;        // toggle refused unmaps now and then
};

void run_model(const ModelCase& mc) {
  SCOPED_TRACE(::testing::Message() << "seed " << mc.seed << " fences " << mc.fences << " capacity "
                                    << mc.capacity << " capturing " << mc.capturing);
  PagedDevice dev(kPage, mc.capacity != 0 ? mc.capacity : std::size_t{64} << 30, std::size_t{8} << 30);
  dev.set_fences(mc.fences);
  dev.set_report_headroom(mc.capacity != 0);
  CachingAllocator a(dev, 0, expandable());
  std::mt19937_64 rng(mc.seed);
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t live_bytes = 0;
  const std::size_t budget = mc.capacity != 0 ? mc.capacity : std::size_t{1} << 30;
  auto size = [&] {  // log-uniform, 256 B to 64 MiB
    const double e = std::uniform_real_distribution<double>(8.0, 26.0)(rng);
    return static_cast<std::size_t>(std::exp2(e));
  };
  for (int op = 0; op < 3000; ++op) {
    const unsigned r = static_cast<unsigned>(rng() % 100);
    if (r < 2) {
      a.empty_cache();
    } else if (r < 4 && mc.fences) {
      dev.complete_all_fences();
    } else if (r < 6 && mc.capturing) {
      dev.set_capturing(rng() % 2 == 0);
    } else if (r < 55 || live.empty()) {
      const std::size_t n = size();
      if (live_bytes + n > budget) continue;
      const AllocResult res = a.allocate(n);
      if (res.status == AllocStatus::ok) {
        live.emplace_back(res.ptr, n);
        live_bytes += n;
      } else {
        ASSERT_EQ(res.status, AllocStatus::out_of_memory) << "op " << op;
        ASSERT_NE(mc.capacity, 0u) << "op " << op;
      }
    } else {
      const std::size_t i = rng() % live.size();
      ASSERT_EQ(a.free(live[i].first), FreeStatus::ok) << "op " << op;
      live_bytes -= live[i].second;
      live[i] = live.back();
      live.pop_back();
    }
    LUMA_ASSERT_CLEAN(a);
    ASSERT_EQ(dev.violations(), 0u) << "op " << op;
    if (mc.capacity != 0) {
      ASSERT_LE(dev.held(), mc.capacity);
    }
    ASSERT_EQ(reserved_now(a) >= static_cast<std::int64_t>(dev.mapped_bytes()), true) << "op " << op;
    for (const auto& [p, n] : live) ASSERT_TRUE(dev.mapped(p, n)) << "op " << op;
  }
  // The paths the case is for were taken.
  const DeviceStats st = a.stats();
  EXPECT_GT(dev.unmaps(), 0u);
  EXPECT_GT(dev.releases(), 0u);
  if (mc.capturing) {
    EXPECT_GT(dev.refused_unmaps(), 0u);
  }
  if (mc.capacity != 0) {
    EXPECT_GT(st.num_alloc_retries, 0u);
  }
  if (mc.fences) {
    EXPECT_GT(st.num_fence_waits, 0u);
  }
  dev.set_capturing(false);
  dev.complete_all_fences();
  for (const auto& [p, n] : live) ASSERT_EQ(a.free(p), FreeStatus::ok);
  a.empty_cache();
  EXPECT_EQ(dev.held(), 0u);
  EXPECT_EQ(dev.mapped_bytes(), 0u);
  EXPECT_EQ(reserved(a), 0u);
  LUMA_EXPECT_CLEAN(a);
  a.release_all();
  EXPECT_EQ(dev.address_ranges(), 0u);
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(ExpandableSegmentsModel, RandomOperationsKeepEveryInvariant) {
  for (unsigned seed : {1u, 2u, 3u}) run_model({seed, false, 0, false});
}

TEST(ExpandableSegmentsModel, RandomOperationsWithFencesAndALimit) {
  for (unsigned seed : {4u, 5u}) run_model({seed, true, 0, false});
  for (unsigned seed : {6u, 7u}) run_model({seed, false, 256 * MiB, false});
  for (unsigned seed : {8u, 9u}) run_model({seed, true, 256 * MiB, false});
}

TEST(ExpandableSegmentsModel, RandomOperationsWhileUnmapsAreSometimesRefused) {
  for (unsigned seed : {10u, 11u}) run_model({seed, false, 0, true});
  for (unsigned seed : {12u, 13u}) run_model({seed, true, 256 * MiB, true});
}

}  // namespace
}  // namespace luma::core
