// caching_allocator_oom_test.cpp - the out-of-memory path: when the device refuses a
// segment, one of just the request's size is tried; if that is refused too, the cache is
// released (pending frees waited for first) and both are tried once more; a refusal then
// is a clean out_of_memory that changes nothing else, and
// the allocator works again once memory comes back. A device error other than
// out-of-memory (a lost device, a sticky error) is no reason to release the cache: it is
// handed to the caller unchanged, counted apart, and nothing else changes.
#include "allocator/caching_allocator.h"

#include <gtest/gtest.h>

#include "allocator_test_util.h"
#include "host_device.h"

namespace luma::core {
namespace {

using testing::must_alloc;
using testing::RecordingSink;

TEST(OutOfMemory, ReleasesTheCacheAndRetries) {
  HostDevice dev(20 * MiB);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  ASSERT_EQ(a.free(must_alloc(a, 1024)), FreeStatus::ok);  // 2 MiB cached in the small pool
  void* p = must_alloc(a, 19 * MiB);                       // needs 20 MiB: only after release
  EXPECT_NE(p, nullptr);
  LUMA_ASSERT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1u);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(s.num_device_free, 1u);
  EXPECT_EQ(s.segment.pool[static_cast<std::size_t>(Pool::small)].current, 0);
}

TEST(OutOfMemory, FailsCleanlyThenRecoversWhenMemoryComesBack) {
  HostDevice dev(20 * MiB);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  RecordingSink sink;
  a.set_event_sink(&sink);
  void* held = must_alloc(a, 1024);
  const DeviceStats before = a.stats();
  const AllocResult r = a.allocate(19 * MiB);
  EXPECT_EQ(r.status, AllocStatus::out_of_memory);
  EXPECT_EQ(r.ptr, nullptr);
  LUMA_ASSERT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1u);
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.alloc_calls, before.alloc_calls);
  EXPECT_EQ(s.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(s.segment.all.current, 1);  // the held block's segment stays
  ASSERT_EQ(sink.events.back().kind, EventKind::oom);
  EXPECT_EQ(sink.events.back().requested, 19 * MiB);
  EXPECT_TRUE(a.owns(held));

  dev.set_capacity(64 * MiB);
  void* p = must_alloc(a, 19 * MiB);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(a.stats().num_ooms, 1u);
  LUMA_EXPECT_CLEAN(a);
}

TEST(OutOfMemory, WithoutReleaseOnOomTheCacheStays) {
  HostDevice dev(20 * MiB);
  AllocatorOptions o = testing::pytorch_placement();
  o.release_on_oom = false;
  CachingAllocator a(dev, 0, o);
  ASSERT_EQ(a.free(must_alloc(a, 1024)), FreeStatus::ok);
  EXPECT_EQ(a.allocate(19 * MiB).status, AllocStatus::out_of_memory);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 0u);
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.segment.all.current, 1);
  LUMA_EXPECT_CLEAN(a);
}

TEST(OutOfMemory, ATransientRefusalIsRetried) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  dev.fail_next_reserves(2);  // the pool's 2 MiB segment, then the request-sized one
  void* p = must_alloc(a, 4096);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  EXPECT_EQ(a.stats().num_ooms, 0u);
  dev.fail_next_reserves(4);  // both sizes, before and after the release
  EXPECT_EQ(a.allocate(4 * MiB).status, AllocStatus::out_of_memory);
  EXPECT_EQ(a.stats().num_ooms, 1u);
  LUMA_EXPECT_CLEAN(a);
}

// A request the device could still serve by itself is not refused because the pool's
// segment would not fit: a segment of just the request's size is tried first, and the
// cache is kept (releasing it is the last resort).
TEST(OutOfMemory, ARequestSizedSegmentIsTriedBeforeTheCacheIsReleased) {
  HostDevice dev(8 * MiB);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  ASSERT_EQ(a.free(must_alloc(a, 1024)), FreeStatus::ok);  // 2 MiB cached in the small pool
  void* p = must_alloc(a, 5 * MiB);  // the large pool's segment is 20 MiB: 6 MiB are left
  EXPECT_NE(p, nullptr);
  LUMA_ASSERT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 0u);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(s.num_device_free, 0u);
  EXPECT_EQ(s.segment.all.current, 2);
  EXPECT_EQ(s.reserved_bytes.pool[static_cast<std::size_t>(Pool::large)].current, 5 * MiB);
  SegmentRange seg{};
  ASSERT_TRUE(a.segment_of(p, &seg));
  EXPECT_EQ(seg.size, 5 * MiB);
}

// The case a user met: 60 requests of 1 MiB + 1 on a 64 MiB device all succeed without
// luma; with 20 MiB segments only 57 fit, unless the last ones get segments of their size.
TEST(OutOfMemory, RequestsThatFitTheDeviceAreServedWhenItsSegmentsDoNot) {
  HostDevice dev(64 * MiB);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  for (int i = 0; i < 60; ++i) {
    const AllocResult r = a.allocate(MiB + 1);
    ASSERT_EQ(r.status, AllocStatus::ok) << "request " << i;
    LUMA_ASSERT_CLEAN(a);
  }
  EXPECT_EQ(a.stats().num_ooms, 0u);
}

TEST(OutOfMemory, PendingFreesAreWaitedForAndReleased) {
  HostDevice dev(20 * MiB);
  dev.set_fences(true);
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  ASSERT_EQ(a.free(must_alloc(a, 1024)), FreeStatus::ok);  // pending in the small pool
  void* p = must_alloc(a, 19 * MiB);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(dev.fences_waited(), (std::vector<Fence>{1}));
  EXPECT_EQ(dev.fences_released(), 1u);
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  LUMA_EXPECT_CLEAN(a);
}

TEST(DeviceError, IsReturnedWithItsCodeWithoutReleasingTheCacheOrRetrying) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  RecordingSink sink;
  a.set_event_sink(&sink);
  ASSERT_EQ(a.free(must_alloc(a, 1024)), FreeStatus::ok);  // a cached small segment
  void* held = must_alloc(a, 2048);
  const DeviceStats before = a.stats();
  const std::size_t events_before = sink.events.size();
  dev.fail_next_reserves(1, 46);  // CUDA_ERROR_DEVICE_UNAVAILABLE, say
  const AllocResult r = a.allocate(8 * MiB);  // needs a new (large) segment
  EXPECT_EQ(r.status, AllocStatus::device_error);
  EXPECT_EQ(r.device_error, 46);
  EXPECT_EQ(r.ptr, nullptr);
  LUMA_ASSERT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.num_device_errors, 1u);
  EXPECT_EQ(s.num_ooms, 0u) << "not an out-of-memory";
  EXPECT_EQ(s.num_alloc_retries, 0u) << "no retry: releasing the cache cannot mend it";
  EXPECT_EQ(s.num_device_free, before.num_device_free) << "the cache was not released";
  EXPECT_EQ(s.segment.all.current, before.segment.all.current);
  EXPECT_EQ(dev.reserve_calls(), 1u + 1u);  // one small segment made, then the failed call
  EXPECT_EQ(sink.events.size(), events_before) << "no oom event";
  EXPECT_TRUE(a.owns(held));
  // The device is back: the same request succeeds.
  void* p = must_alloc(a, 8 * MiB);
  EXPECT_NE(p, nullptr);
  LUMA_EXPECT_CLEAN(a);
}

TEST(DeviceError, ServedFromTheCacheNeedsNoDevice) {
  HostDevice dev;
  CachingAllocator a(dev, 0, testing::pytorch_placement());
  ASSERT_EQ(a.free(must_alloc(a, 4096)), FreeStatus::ok);
  dev.fail_next_reserves(5, 46);
  void* p = must_alloc(a, 4096);  // the cached block: the failing device is never asked
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(a.stats().num_device_errors, 0u);
  LUMA_EXPECT_CLEAN(a);
}

}  // namespace
}  // namespace luma::core
