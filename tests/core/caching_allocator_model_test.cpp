// caching_allocator_model_test.cpp - randomized model-based test: thousands of random
// allocate / free / empty_cache steps (several seeds, with and without pending fences,
// with a device small enough to run out) against a plain model of what must hold: every
// live block aligned, inside a segment the device gave, disjoint from all others, its
// bytes intact; the model's allocated / requested bytes and live count equal the stats;
// check() clean after every step. The seed is printed on failure.
#include "allocator/caching_allocator.h"

#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "allocator_test_util.h"
#include "host_device.h"

namespace luma::core {
namespace {

using testing::addr;

struct Live {
  std::size_t requested;
  std::size_t size;  // rounded size the allocator reports
  unsigned char tag;
};

struct Scenario {
  std::uint32_t seed;
  bool fences;
  std::size_t max_split_size;
};

class ModelTest : public ::testing::TestWithParam<Scenario> {};

std::size_t random_size(std::mt19937_64& rng) {
  const auto pick = rng() % 100;
  if (pick < 70) return 1 + rng() % (64 * KiB);
  if (pick < 97) return 64 * KiB + rng() % (4 * MiB);
  return 4 * MiB + rng() % (28 * MiB);
}

void stamp(void* p, std::size_t n, unsigned char tag) {
  // First and last bytes: enough to catch two live blocks that overlap.
  auto* c = static_cast<unsigned char*>(p);
  std::memset(c, tag, std::min<std::size_t>(n, 64));
  std::memset(c + n - std::min<std::size_t>(n, 64), tag, std::min<std::size_t>(n, 64));
}

bool stamped(const void* p, std::size_t n, unsigned char tag) {
  const auto* c = static_cast<const unsigned char*>(p);
  const std::size_t k = std::min<std::size_t>(n, 64);
  for (std::size_t i = 0; i < k; ++i)
    if (c[i] != tag || c[n - 1 - i] != tag) return false;
  return true;
}

TEST_P(ModelTest, RandomSequencesKeepEveryInvariant) {
  const Scenario sc = GetParam();
  SCOPED_TRACE(::testing::Message() << "seed " << sc.seed << " fences " << sc.fences << " max_split_size "
                                    << sc.max_split_size);
  std::mt19937_64 rng(sc.seed);
  HostDevice dev(160 * MiB);  // small enough that the OOM path runs now and then
  dev.set_fences(sc.fences);
  AllocatorOptions opt;
  opt.max_split_size = sc.max_split_size;
  CachingAllocator a(dev, 0, opt);

  std::map<std::uintptr_t, Live> live;  // by address: neighbours show overlaps
  std::size_t model_allocated = 0, model_requested = 0;
  std::size_t ooms = 0;
  std::uint64_t fence_cursor = 1;

  for (int step = 0; step < 3000; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const auto op = rng() % 100;
    if (op < 52 && live.size() < 96) {
      const std::size_t n = random_size(rng);
      const AllocResult r = a.allocate(n);
      if (r.status == AllocStatus::out_of_memory) {
        ++ooms;
      } else {
        ASSERT_EQ(r.status, AllocStatus::ok);
        const std::uintptr_t p = addr(r.ptr);
        ASSERT_EQ(p % opt.alignment, 0u);
        std::size_t size = 0;
        ASSERT_TRUE(a.owns(r.ptr, &size));
        ASSERT_GE(size, round_size(opt, n));
        if (round_size(opt, n) < opt.max_split_size) {
          ASSERT_LT(size, round_size(opt, n) + opt.min_split);
        }
        ASSERT_TRUE(dev.contains(r.ptr, size)) << "block outside every device segment";
        auto next = live.lower_bound(p);
        if (next != live.end()) {
          ASSERT_LE(p + size, next->first) << "overlaps the next live block";
        }
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second.size, p) << "overlaps the previous live block";
        }
        const auto tag = static_cast<unsigned char>(rng());
        stamp(r.ptr, size, tag);
        live[p] = Live{n, size, tag};
        model_allocated += size;
        model_requested += n;
      }
    } else if (op < 97 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      void* p = reinterpret_cast<void*>(it->first);
      ASSERT_TRUE(stamped(p, it->second.size, it->second.tag)) << "block contents were overwritten";
      ASSERT_EQ(a.free(p), FreeStatus::ok);
      model_allocated -= it->second.size;
      model_requested -= it->second.requested;
      live.erase(it);
    } else if (op < 98) {
      a.empty_cache();
    } else if (sc.fences) {
      // The "GPU" finishes some earlier work.
      const std::uint64_t upto = dev.fences_recorded();
      for (; fence_cursor <= upto; ++fence_cursor)
        if (rng() % 2 == 0) dev.complete_fence(fence_cursor);
    }
    const DeviceStats s = a.stats();
    ASSERT_EQ(static_cast<std::size_t>(s.allocated_bytes.all.current), model_allocated);
    // requested_bytes drops when a free completes (PyTorch's rule), so pending frees
    // still count, each with at most its block's bytes (check() counts them exactly).
    const auto requested = static_cast<std::size_t>(s.requested_bytes.all.current);
    const auto pending_bytes = static_cast<std::size_t>(s.active_bytes.all.current - s.allocated_bytes.all.current);
    ASSERT_GE(requested, model_requested);
    ASSERT_LE(requested, model_requested + pending_bytes);
    if (s.active.all.current == s.allocation.all.current) {
      ASSERT_EQ(requested, model_requested);
    }
    ASSERT_EQ(static_cast<std::size_t>(s.allocation.all.current), live.size());
    ASSERT_EQ(static_cast<std::size_t>(s.reserved_bytes.all.current), dev.in_use());
    ASSERT_EQ(s.num_device_alloc - s.num_device_free, dev.segments());
    LUMA_ASSERT_CLEAN(a);
  }
  for (auto& [p, l] : live) {
    ASSERT_TRUE(stamped(reinterpret_cast<void*>(p), l.size, l.tag));
    ASSERT_EQ(a.free(reinterpret_cast<void*>(p)), FreeStatus::ok);
  }
  a.empty_cache();
  LUMA_ASSERT_CLEAN(a);
  EXPECT_EQ(dev.in_use(), 0u);
  EXPECT_EQ(a.stats().num_ooms, ooms);
  EXPECT_EQ(dev.fences_released(), dev.fences_recorded());
  EXPECT_EQ(dev.contract_violations(), 0u);
}

constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();

INSTANTIATE_TEST_SUITE_P(Seeds, ModelTest,
                         ::testing::Values(Scenario{1, false, kNoLimit}, Scenario{2, false, kNoLimit},
                                           Scenario{3, false, 8 * MiB}, Scenario{4, true, kNoLimit},
                                           Scenario{5, true, 8 * MiB}, Scenario{6, true, kNoLimit}));

}  // namespace
}  // namespace luma::core
