// caching_allocator_snapshot_test.cpp - CachingAllocator::snapshot (allocator_snapshot.h):
// every segment in address order, its blocks tiling it in address order, each block's
// state as PyTorch names it (allocated, pending free while its fence is not done,
// inactive when free), requested sizes only for blocks in use; the sizes add up to the
// statistics' reserved and allocated bytes.
#include "allocator/caching_allocator.h"

#include <gtest/gtest.h>

#include <vector>

#include "allocator_test_util.h"
#include "host_device.h"

namespace luma::core {
namespace {

using testing::addr;
using testing::must_alloc;

TEST(AllocatorSnapshot, EmptyAllocatorHasNoSegments) {
  HostDevice dev(64 * MiB);
  CachingAllocator a(dev, 0);
  EXPECT_TRUE(a.snapshot().empty());
}

TEST(AllocatorSnapshot, BlocksTileTheirSegmentWithStatesAndSizes) {
  HostDevice dev(64 * MiB);
  dev.set_fences(true);
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 1000);  // small pool: one 2 MiB segment
  void* q = must_alloc(a, 3000);
  void* r = must_alloc(a, 5 * MiB);  // large pool: its own segment
  ASSERT_EQ(a.free(q), FreeStatus::ok);  // pending: its fence is not done

  const AllocatorSnapshot snap = a.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  std::size_t reserved = 0, allocated = 0;
  for (std::size_t i = 0; i < snap.size(); ++i) {
    const SegmentSnapshot& s = snap[i];
    if (i > 0) {
      EXPECT_LT(snap[i - 1].address, s.address);
    }
    reserved += s.size;
    std::uintptr_t at = s.address;
    for (const BlockSnapshot& b : s.blocks) {
      EXPECT_EQ(b.address, at) << "blocks tile the segment";
      at += b.size;
      if (b.state == BlockSnapshotState::active_allocated) allocated += b.size;
      if (b.state == BlockSnapshotState::inactive) {
        EXPECT_EQ(b.requested, 0u);
      } else {
        EXPECT_LE(b.requested, b.size);
      }
    }
    EXPECT_EQ(at, s.address + s.size);
  }
  const DeviceStats st = a.stats();
  EXPECT_EQ(static_cast<std::int64_t>(reserved), st.reserved_bytes.all.current);
  EXPECT_EQ(static_cast<std::int64_t>(allocated), st.allocated_bytes.all.current);

  auto find = [&](const void* ptr) -> const BlockSnapshot* {
    for (const SegmentSnapshot& s : snap)
      for (const BlockSnapshot& b : s.blocks)
        if (b.address == addr(ptr)) return &b;
    return nullptr;
  };
  const BlockSnapshot* bp = find(p);
  const BlockSnapshot* bq = find(q);
  const BlockSnapshot* br = find(r);
  ASSERT_TRUE(bp && bq && br);
  EXPECT_EQ(bp->state, BlockSnapshotState::active_allocated);
  EXPECT_EQ(bp->requested, 1000u);
  EXPECT_EQ(bq->state, BlockSnapshotState::active_pending_free);
  EXPECT_EQ(bq->requested, 3000u);
  EXPECT_EQ(br->state, BlockSnapshotState::active_allocated);
  EXPECT_EQ(br->requested, 5 * MiB);
  EXPECT_EQ(snap[0].pool == Pool::small ? snap[0].blocks.back().state : snap[1].blocks.back().state,
            BlockSnapshotState::inactive) << "the small segment's tail is free";

  // Once its fence is done the pending block is free (inactive), merged with the free tail.
  dev.complete_all_fences();
  ASSERT_EQ(a.empty_cache(), 0u);  // completes the pending frees; no segment is wholly free
  bool seen = false;
  for (const SegmentSnapshot& s : a.snapshot())
    for (const BlockSnapshot& b : s.blocks)
      if (b.address == addr(q)) {  // (braces: gtest's macros hold an if)
        seen = true;
        EXPECT_EQ(b.state, BlockSnapshotState::inactive);
        EXPECT_EQ(b.address + b.size, s.address + s.size) << "merged with the free tail";
      }
  EXPECT_TRUE(seen);
  EXPECT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(a.free(r), FreeStatus::ok);
}

}  // namespace
}  // namespace luma::core
