// stats_test.cpp - accumulate_context (core/stats.h): the statistics of several CUDA
// contexts of one device added up for the per-device report.
#include "stats.h"

#include <gtest/gtest.h>

namespace luma::core {
namespace {

Counter counter(std::int64_t current, std::int64_t peak, std::uint64_t allocated, std::uint64_t freed) {
  Counter c;
  c.current = current;
  c.peak = peak;
  c.allocated = allocated;
  c.freed = freed;
  return c;
}

// Contexts that followed one another (a reset): the retired one's current is 0, and the
// device's peak is the larger of the two peaks, not their sum.
// Regression: a program that freed everything read "Active allocs 17" at exit (its frees
// were in an epoch whose fence was still pending). At exit they are reported as freed.
TEST(ReportPendingAsFreed, FreedBlocksWithAPendingFenceAreNotActive) {
  DeviceStats s;
  s.allocation.add(Pool::small, 3);
  s.allocation.sub(Pool::small, 3);  // the program freed its 3 blocks ...
  s.allocated_bytes.add(Pool::small, 3 * 512);
  s.allocated_bytes.sub(Pool::small, 3 * 512);
  s.active.add(Pool::small, 3);  // ... whose fences are still pending
  s.active_bytes.add(Pool::small, 3 * 512);
  s.allocation.add(Pool::large, 1);  // and holds one large block
  s.allocated_bytes.add(Pool::large, 4 << 20);
  s.active.add(Pool::large, 1);
  s.active_bytes.add(Pool::large, 4 << 20);
  report_pending_as_freed(s);
  EXPECT_EQ(s.active.all.current, 1);
  EXPECT_EQ(s.active_bytes.all.current, 4 << 20);
  EXPECT_EQ(s.active.pool[static_cast<std::size_t>(Pool::small)].current, 0);
  EXPECT_EQ(s.pending_free_blocks, 3u);
  EXPECT_EQ(s.pending_free_bytes, 3u * 512);
  EXPECT_EQ(s.active.all.peak, 4);  // peaks and totals are history: unchanged
  EXPECT_EQ(s.active.all.allocated, 4u);
}

TEST(AccumulateContext, SuccessiveContextsKeepTheLargerPeak) {
  Counter before = counter(0, 900, 1000, 1000);
  const Counter after = counter(300, 500, 700, 400);
  accumulate_context(before, after);
  EXPECT_EQ(before.current, 300);
  EXPECT_EQ(before.peak, 900);
  EXPECT_EQ(before.allocated, 1700u);
  EXPECT_EQ(before.freed, 1400u);
}

// Two contexts alive together: the peak is at least their summed current.
TEST(AccumulateContext, ThePeakIsNeverBelowTheSummedCurrent) {
  Counter a = counter(400, 450, 400, 0);
  accumulate_context(a, counter(300, 320, 300, 0));
  EXPECT_EQ(a.current, 700);
  EXPECT_EQ(a.peak, 700);
}

TEST(AccumulateContext, EveryFieldOfADeviceIsAddedAndTheDeviceKept) {
  DeviceStats a;
  a.device = 1;
  a.allocated_bytes.add(Pool::small, 512);
  a.segment.add(Pool::large, 1);
  a.alloc_calls = 3;
  a.num_context_resets = 1;
  a.free_blocks = 2;
  DeviceStats b;
  b.device = 1;
  b.allocated_bytes.add(Pool::small, 256);
  b.segment.add(Pool::large, 2);
  b.alloc_calls = 4;
  b.invalid_frees = 5;
  b.free_blocks = 1;
  accumulate_context(a, b);
  EXPECT_EQ(a.device, 1);
  EXPECT_EQ(a.allocated_bytes.all.current, 768);
  EXPECT_EQ(a.allocated_bytes.pool[0].current, 768);
  EXPECT_EQ(a.segment.pool[1].current, 3);
  EXPECT_EQ(a.segment.all.allocated, 3u);
  EXPECT_EQ(a.alloc_calls, 7u);
  EXPECT_EQ(a.num_context_resets, 1u);
  EXPECT_EQ(a.invalid_frees, 5u);
  EXPECT_EQ(a.free_blocks, 3u);
}

}  // namespace
}  // namespace luma::core
