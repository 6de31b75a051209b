// caching_allocator_fence_test.cpp - the caching allocator's policies around the fence
// protocol (the protocol itself, shared with plan replay, is tested once, for both users, in
// fence_queue_test.cpp): frees collect into an epoch that one fence covers, closed when an
// allocation needs it, at its block and byte bounds, or by empty_cache / the OOM path;
// polls back off while the oldest fence is not done; a pool waits only for its own blocks;
// pending blocks are active, not live, and requested bytes drop at completion; and the
// hazard rule itself on random traffic.
#include "allocator/caching_allocator.h"

#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "allocator_test_util.h"
#include "allocator/epoch.h"
#include "host_device.h"

namespace luma::core {
namespace {

using testing::must_alloc;
using testing::RecordingSink;

class FenceTest : public ::testing::Test {
 protected:
  void SetUp() override { dev.set_fences(true); }
  HostDevice dev;
};

AllocatorOptions epoch_of(std::size_t blocks) {
  AllocatorOptions o;
  o.epoch_max_blocks = blocks;
  return o;
}

TEST_F(FenceTest, AFreeCallsNoDeviceAndItsBlockIsNotReusedWhileTheEpochIsOpen) {
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 1024);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(dev.record_calls(), 0u);  // batched: the free only joins the open epoch
  LUMA_ASSERT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(s.allocation.all.current, 0);  // the program no longer holds it ...
  EXPECT_EQ(s.active.all.current, 1);      // ... but it is still active
  EXPECT_FALSE(a.owns(p));
  void* q = must_alloc(a, 1024);  // the segment's tail fits: no fence, and never p
  EXPECT_NE(q, p);
  EXPECT_EQ(dev.record_calls(), 0u);
  LUMA_EXPECT_CLEAN(a);
}

// PyTorch's accounting: allocated_bytes drops at the free, requested_bytes (like
// active_bytes) when the free completes.
TEST_F(FenceTest, RequestedBytesDropWhenTheFreeCompletes) {
  CachingAllocator a(dev, 0, epoch_of(1));
  void* p = must_alloc(a, 1000);
  void* keep = must_alloc(a, 300);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  DeviceStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 512);
  EXPECT_EQ(s.active_bytes.all.current, 1024 + 512);
  EXPECT_EQ(s.requested_bytes.all.current, 1000 + 300);  // pending: still counted
  LUMA_ASSERT_CLEAN(a);
  dev.complete_fence(1);
  a.empty_cache();  // completes every done fence
  s = a.stats();
  EXPECT_EQ(s.active_bytes.all.current, 512);
  EXPECT_EQ(s.requested_bytes.all.current, 300);
  EXPECT_EQ(s.requested_bytes.all.freed, 1000u);
  EXPECT_EQ(s.requested_bytes.all.peak, 1300);
  LUMA_EXPECT_CLEAN(a);
  (void)keep;
}

// While the oldest fence is not done, the poll at each allocation backs off (1, 2, 4, ...
// allocations skipped, at most fence_poll_max_gap): a program allocating between fences
// does not pay a device query per allocation. Once the fence is done, the block comes
// back within fence_poll_max_gap + 1 allocations, with no wait and no growth.
TEST_F(FenceTest, PollingBacksOffWhileTheOldestFenceIsNotDone) {
  AllocatorOptions o = epoch_of(1);
  ASSERT_EQ(o.fence_poll_max_gap, 32u);  // the default this test describes
  CachingAllocator a(dev, 0, o);
  void* p = must_alloc(a, 1024);
  void* sep = must_alloc(a, 1024);  // keeps p from merging with the segment's tail
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  ASSERT_EQ(dev.fences_recorded(), 1u);
  const std::uint64_t polls_before = dev.poll_calls();
  constexpr int kAllocs = 200;  // all from the 2 MiB segment's tail: 1 KiB each
  std::vector<void*> held;
  for (int i = 0; i < kAllocs; ++i) {
    held.push_back(must_alloc(a, 1024));
    ASSERT_NE(held.back(), p) << "allocation " << i << " reused a block whose fence is not done";
  }
  LUMA_ASSERT_CLEAN(a);
  const std::uint64_t polls = dev.poll_calls() - polls_before;
  // Polls at allocations 0, 2, 5, 10, 19, 36, then every 33rd: 10 of 200.
  EXPECT_EQ(polls, 10u);
  EXPECT_TRUE(dev.fences_waited().empty());
  EXPECT_EQ(dev.reserve_calls(), 1u);

  dev.complete_fence(1);
  int until_reused = 0;
  void* q = nullptr;
  while (q != p && until_reused <= 40) {
    q = must_alloc(a, 1024);
    held.push_back(q);
    ++until_reused;
  }
  EXPECT_EQ(q, p);
  EXPECT_LE(until_reused, 33);  // fence_poll_max_gap + 1
  EXPECT_EQ(a.stats().num_fence_waits, 0u);
  EXPECT_EQ(dev.fences_released(), 1u);
  LUMA_EXPECT_CLEAN(a);
  (void)sep;
}

// An allocation that finds nothing else that fits polls the oldest fence even while the
// backoff skips polls, and takes its blocks without waiting when it is done already.
TEST_F(FenceTest, AnAllocationThatFindsNothingPollsBeforeItWaits) {
  CachingAllocator a(dev, 0, epoch_of(1));
  void* p = must_alloc(a, 512 * KiB);  // four blocks fill one 2 MiB small segment
  for (int i = 0; i < 3; ++i) must_alloc(a, 512 * KiB);
  ASSERT_EQ(a.free(p), FreeStatus::ok);  // fence 1, not done
  for (int i = 0; i < 4; ++i) must_alloc(a, 4 * MiB);  // large pool: polls back off
  const std::uint64_t reserves = dev.reserve_calls();
  dev.complete_fence(1);
  void* q = must_alloc(a, 512 * KiB);  // nothing free in the small pool but p
  EXPECT_EQ(q, p);
  EXPECT_EQ(dev.reserve_calls(), reserves);  // no growth
  EXPECT_TRUE(dev.fences_waited().empty());  // and no wait: the poll found it done
  EXPECT_EQ(a.stats().num_fence_waits, 0u);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, FreeOfAPendingBlockIsInvalid) {
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 1024);
  ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(a.free(p), FreeStatus::invalid);
  EXPECT_EQ(a.stats().invalid_frees, 1u);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, OneFenceCoversAWholeEpoch) {
  CachingAllocator a(dev, 0);
  RecordingSink sink;
  a.set_event_sink(&sink);
  void* p = must_alloc(a, 512 * KiB);  // four blocks fill one 2 MiB small segment
  void* q = must_alloc(a, 512 * KiB);
  void* r = must_alloc(a, 512 * KiB);
  void* keep = must_alloc(a, 512 * KiB);
  for (void* x : {p, q, r}) ASSERT_EQ(a.free(x), FreeStatus::ok);
  EXPECT_EQ(dev.record_calls(), 0u);
  void* big = must_alloc(a, 1 * MiB);  // only the epoch can provide: close, wait, reuse
  EXPECT_EQ(big, p);                        // p, q and r merged back into one block
  EXPECT_EQ(dev.fences_recorded(), 1u);
  EXPECT_EQ(dev.fences_waited(), (std::vector<Fence>{1}));
  EXPECT_EQ(dev.fences_released(), 1u);
  EXPECT_EQ(dev.reserve_calls(), 1u);
  EXPECT_EQ(sink.count(EventKind::free_completed), 3u);
  LUMA_EXPECT_CLEAN(a);
  (void)keep;
}

TEST_F(FenceTest, TheEpochClosesAtItsBlockAndByteBounds) {
  {
    CachingAllocator a(dev, 0, epoch_of(4));
    std::vector<void*> v;
    for (int i = 0; i < 7; ++i) v.push_back(must_alloc(a, 4096));
    for (void* x : v) ASSERT_EQ(a.free(x), FreeStatus::ok);
    EXPECT_EQ(dev.fences_recorded(), 1u);  // 4 closed it; 3 wait in the next
    LUMA_EXPECT_CLEAN(a);
  }
  AllocatorOptions o;
  o.epoch_max_bytes = 1 * MiB;
  CachingAllocator b(dev, 0, o);
  void* small = must_alloc(b, 4096);
  ASSERT_EQ(b.free(small), FreeStatus::ok);
  EXPECT_EQ(dev.fences_recorded(), 1u);  // still open
  void* big = must_alloc(b, 1 * MiB);
  ASSERT_EQ(b.free(big), FreeStatus::ok);  // 1 MiB + 4 KiB >= the bound
  EXPECT_EQ(dev.fences_recorded(), 2u);
  LUMA_EXPECT_CLEAN(b);
}

TEST_F(FenceTest, AnEpochNeverHoldsMoreThanItsCapacity) {
  // A bound above what an epoch can list is capped: the epoch closes when it is full.
  CachingAllocator a(dev, 0, epoch_of(100'000));
  std::vector<void*> v;
  for (std::size_t i = 0; i < Epoch::kCapacity + 1; ++i) v.push_back(must_alloc(a, 4096));
  for (std::size_t i = 0; i < Epoch::kCapacity; ++i) ASSERT_EQ(a.free(v[i]), FreeStatus::ok);
  EXPECT_EQ(dev.fences_recorded(), 1u);
  ASSERT_EQ(a.free(v.back()), FreeStatus::ok);  // opens the next epoch
  EXPECT_EQ(dev.fences_recorded(), 1u);
  LUMA_EXPECT_CLEAN(a);
}

// Fences with many streams (docs/architecture.md): a device whose fences cost a driver call
// per stream asks for larger epochs; from the first fence on, one fence covers that many
// frees (up to an epoch's capacity), and the byte bound still closes an epoch early.
TEST_F(FenceTest, EpochsFollowTheDevicesWishAfterTheFirstFence) {
  dev.set_fence_batch_blocks(300);
  CachingAllocator a(dev, 0);  // the default: 64 blocks, 256 MiB
  std::vector<void*> v;
  for (std::size_t i = 0; i < 64 + 300 + 1; ++i) v.push_back(must_alloc(a, 4096));
  for (std::size_t i = 0; i < 64; ++i) ASSERT_EQ(a.free(v[i]), FreeStatus::ok);
  EXPECT_EQ(dev.fences_recorded(), 1u);  // the first epoch: the default 64
  for (std::size_t i = 64; i < 64 + 299; ++i) ASSERT_EQ(a.free(v[i]), FreeStatus::ok);
  EXPECT_EQ(dev.fences_recorded(), 1u);  // 299 of the 300 the device asked for
  ASSERT_EQ(a.free(v[64 + 299]), FreeStatus::ok);
  EXPECT_EQ(dev.fences_recorded(), 2u);
  void* big = must_alloc(a, 256 * MiB);
  ASSERT_EQ(a.free(v.back()), FreeStatus::ok);
  ASSERT_EQ(a.free(big), FreeStatus::ok);  // 2 blocks, but 256 MiB: closed at once
  EXPECT_EQ(dev.fences_recorded(), 3u);
  dev.set_fence_batch_blocks(100'000);  // more than an epoch lists: capped
  std::vector<void*> w;
  for (std::size_t i = 0; i < Epoch::kCapacity; ++i) w.push_back(must_alloc(a, 4096));
  for (void* p : w) ASSERT_EQ(a.free(p), FreeStatus::ok);
  EXPECT_EQ(dev.fences_recorded(), 4u);  // asked after fence 3: full at kCapacity
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, APendingBlockIsNoLiveBlockForAddressQueries) {
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 4096);
  void* keep = must_alloc(a, 4096);
  SegmentRange r;
  ASSERT_TRUE(a.block_of(static_cast<char*>(p) + 100, &r));
  ASSERT_EQ(a.free(p), FreeStatus::ok);  // pending: its fence is open
  EXPECT_FALSE(a.block_of(static_cast<char*>(p) + 100, &r));
  EXPECT_FALSE(a.block_of(p, &r));
  EXPECT_FALSE(a.owns(p));
  EXPECT_TRUE(a.block_of(static_cast<char*>(keep) + 100, &r));
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, DroppingTheDeviceMemoryForgetsEverythingWithoutADeviceCall) {
  CachingAllocator a(dev, 0, epoch_of(2));
  RecordingSink sink;
  a.set_event_sink(&sink);
  void* held = must_alloc(a, 4096);
  void* big = must_alloc(a, 12 * MiB);
  std::vector<void*> freed;
  for (int i = 0; i < 5; ++i) freed.push_back(must_alloc(a, 8192));
  for (void* p : freed) ASSERT_EQ(a.free(p), FreeStatus::ok);  // two closed epochs, one open
  ASSERT_GE(dev.fences_recorded(), 2u);
  const std::uint64_t releases = dev.release_calls();
  a.drop_device_memory();
  LUMA_ASSERT_CLEAN(a);
  const DeviceStats s = a.stats();
  EXPECT_EQ(dev.release_calls(), releases) << "the memory is gone: nothing to release";
  EXPECT_EQ(dev.fences_released(), dev.fences_recorded()) << "every fence given back";
  EXPECT_EQ(dev.contract_violations(), 0u);
  EXPECT_EQ(s.num_context_resets, 1u);
  EXPECT_EQ(s.segment.all.current, 0);
  EXPECT_EQ(s.reserved_bytes.all.current, 0);
  EXPECT_EQ(s.allocation.all.current, 0);
  EXPECT_EQ(s.active.all.current, 0);
  EXPECT_EQ(s.free_blocks, 0u);
  EXPECT_GT(s.reserved_bytes.all.peak, 0) << "history stays";
  EXPECT_FALSE(a.owns(held));
  EXPECT_EQ(a.free(big), FreeStatus::not_owned) << "its memory went with the context";
  EXPECT_EQ(sink.count(EventKind::segment_release), 2u);
  // Usable again: a new segment from the (new) context.
  void* again = must_alloc(a, 4096);
  EXPECT_NE(again, nullptr);
  EXPECT_EQ(a.stats().segment.all.current, 1);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, PerFreeDevicesGetAFenceAtEveryFree) {
  dev.set_fence_mode(FenceMode::per_free);
  CachingAllocator a(dev, 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(a.free(must_alloc(a, 4096)), FreeStatus::ok);
  EXPECT_EQ(dev.fences_recorded(), 3u);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, WaitsOnlyForItsOwnPool) {
  CachingAllocator a(dev, 0);
  void* large = must_alloc(a, 20 * MiB);
  ASSERT_EQ(a.free(large), FreeStatus::ok);  // pending in the large pool
  must_alloc(a, 1 * MiB);                    // small pool: nothing of its own to wait for
  must_alloc(a, 1 * MiB);
  must_alloc(a, 1 * MiB);
  EXPECT_EQ(dev.record_calls(), 0u);  // the epoch is not even closed for them
  EXPECT_TRUE(dev.fences_waited().empty());
  EXPECT_EQ(dev.reserve_calls(), 3u);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, EmptyCacheClosesAndWaitsTheEpochFirst) {
  CachingAllocator a(dev, 0);
  void* p = must_alloc(a, 4096);
  ASSERT_EQ(a.free(p), FreeStatus::ok);  // open epoch, no fence yet
  EXPECT_EQ(a.empty_cache(), 2 * MiB);
  EXPECT_EQ(dev.fences_recorded(), 1u);
  EXPECT_EQ(dev.fences_waited(), (std::vector<Fence>{1}));
  EXPECT_EQ(dev.fences_released(), 1u);
  EXPECT_EQ(dev.in_use(), 0u);
  EXPECT_EQ(a.stats().active.all.current, 0);
  LUMA_EXPECT_CLEAN(a);
}

TEST_F(FenceTest, EveryFenceIsReleasedExactlyOnce) {
  {
    CachingAllocator a(dev, 0, epoch_of(2));
    std::vector<void*> live;
    for (int round = 0; round < 50; ++round) {
      for (int i = 0; i < 8; ++i) live.push_back(must_alloc(a, static_cast<std::size_t>(512 + 1000 * i)));
      for (std::size_t i = 0; i < live.size(); i += 2) ASSERT_EQ(a.free(live[i]), FreeStatus::ok);
      std::vector<void*> rest;
      for (std::size_t i = 1; i < live.size(); i += 2) rest.push_back(live[i]);
      live.swap(rest);
      if (round % 3 == 0) dev.complete_all_fences();
      if (round % 10 == 9) a.empty_cache();
      LUMA_ASSERT_CLEAN(a);
    }
    for (void* p : live) ASSERT_EQ(a.free(p), FreeStatus::ok);
    LUMA_ASSERT_CLEAN(a);
    EXPECT_LT(dev.fences_released(), dev.fences_recorded());  // some are still pending
  }  // the destructor gives back those still pending
  EXPECT_EQ(dev.fences_released(), dev.fences_recorded());
  EXPECT_GT(dev.fences_recorded(), 100u);
  EXPECT_EQ(dev.contract_violations(), 0u);
}

TEST_F(FenceTest, TightLoopCostsAtMostOneFencePerPair) {
  CachingAllocator a(dev, 0);
  constexpr int kPairs = 2000;
  for (int i = 0; i < kPairs; ++i) ASSERT_EQ(a.free(must_alloc(a, 64 * KiB)), FreeStatus::ok);
  EXPECT_LE(dev.record_calls(), static_cast<std::uint64_t>(kPairs));
  EXPECT_GT(dev.fences_recorded(), 0u);   // the device is busy: real fences ...
  EXPECT_EQ(dev.reserve_calls(), 1u);     // ... waited on rather than grow
  LUMA_EXPECT_CLEAN(a);
}

// The protocol on an idle device is tested in fence_queue_test.cpp; here, the cache's
// default epoch bound in a tight loop: still no fence at all.
TEST_F(FenceTest, ATightLoopOnAnIdleDeviceRecordsNoFence) {
  dev.set_idle(true);
  CachingAllocator b(dev, 0);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(b.free(must_alloc(b, 64 * KiB)), FreeStatus::ok);
  EXPECT_EQ(dev.fences_recorded(), 0u);
  EXPECT_EQ(dev.contract_violations(), 0u);
  LUMA_EXPECT_CLEAN(b);
}

// The hazard rule itself, on random traffic: a device that keeps a clock, and a sink that
// checks every allocation against every earlier free of overlapping bytes: some fence
// recorded after that free (or a kNoFence answer after it) must be done by then.
class ClockDevice final : public Device {
 public:
  explicit ClockDevice(std::mt19937_64& rng) : rng_(rng) {}
  Reservation reserve(std::size_t bytes) noexcept override { return host_.reserve(bytes); }
  bool release(void* base, std::size_t bytes) noexcept override { return host_.release(base, bytes); }
  FenceMode fence_mode() const noexcept override { return FenceMode::batched; }
  Fence record_fence() noexcept override {
    const std::uint64_t now = ++clock;
    if (rng_() % 4 == 0) {  // sometimes idle
      safe_before = now;
      return kNoFence;
    }
    recorded_at[next_] = now;
    return next_++;
  }
  bool fence_done(Fence f) noexcept override {
    if (rng_() % 3 != 0) return false;  // completes at random times, possibly out of order
    done(f);
    return true;
  }
  bool fence_wait(Fence f) noexcept override {
    if (refuse_percent != 0 && static_cast<int>(rng_() % 100) < refuse_percent) return false;  // capturing
    done(f);
    return true;
  }
  void fence_release(Fence f) noexcept override { released += recorded_at.erase(f); }

  std::uint64_t clock = 0;
  std::uint64_t safe_before = 0;  // every free before this clock value is covered by done work
  std::map<Fence, std::uint64_t> recorded_at;
  std::uint64_t released = 0;
  int refuse_percent = 0;  // fence_wait() refuses this often (device.h: cannot wait now)

 private:
  void done(Fence f) {
    auto it = recorded_at.find(f);
    if (it != recorded_at.end()) safe_before = std::max(safe_before, it->second);
  }
  std::mt19937_64& rng_;
  HostDevice host_;
  Fence next_ = 1;
};

class HazardSink final : public EventSink {
 public:
  explicit HazardSink(ClockDevice& d) : dev_(d) {}
  void on_event(const Event& e) noexcept override {
    if (e.kind == EventKind::free_requested) freed_[e.address] = {e.size, ++dev_.clock};
    if (e.kind != EventKind::alloc) return;
    // Every earlier free overlapping [address, address + size) must be covered.
    auto it = freed_.upper_bound(e.address);
    if (it != freed_.begin()) --it;
    while (it != freed_.end() && it->first < e.address + e.size) {
      if (it->first + it->second.size > e.address) {
        if (it->second.at >= dev_.safe_before) ++violations;
        it = freed_.erase(it);
      } else {
        ++it;
      }
    }
  }
  int violations = 0;

 private:
  struct Freed {
    std::uint64_t size;
    std::uint64_t at;
  };
  ClockDevice& dev_;
  std::map<std::uint64_t, Freed> freed_;
};

void expect_no_hazard(int refuse_percent) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    ClockDevice dev(rng);
    dev.refuse_percent = refuse_percent;
    HazardSink sink(dev);
    {
      AllocatorOptions o;
      o.epoch_max_blocks = 1 + seed * 3;
      CachingAllocator a(dev, 0, o);
      a.set_event_sink(&sink);
      std::vector<void*> live;
      for (int step = 0; step < 3000; ++step) {
        if (live.size() < 40 && rng() % 2 == 0) {
          const std::size_t n = rng() % 8 == 0 ? 1 + rng() % (3 * MiB) : 1 + rng() % (64 * KiB);
          live.push_back(must_alloc(a, n));
        } else if (!live.empty()) {
          const std::size_t i = rng() % live.size();
          ASSERT_EQ(a.free(live[i]), FreeStatus::ok);
          live[i] = live.back();
          live.pop_back();
        }
        if (step % 500 == 499) a.empty_cache();
      }
      LUMA_EXPECT_CLEAN(a);
      a.set_event_sink(nullptr);
    }
    EXPECT_EQ(sink.violations, 0);
    EXPECT_TRUE(dev.recorded_at.empty()) << "every fence released";
  }
}

TEST(FenceHazard, NoBlockIsHandedOutBeforeAFenceAfterItsFreeIsDone) { expect_no_hazard(0); }

// A device that often cannot wait now (a stream capture, device.h): the allocator grows
// instead, and still never hands out a block before a fence after its free is done.
TEST(FenceHazard, NoBlockIsHandedOutEarlyWhenTheDeviceCannotWait) { expect_no_hazard(50); }

}  // namespace
}  // namespace luma::core
