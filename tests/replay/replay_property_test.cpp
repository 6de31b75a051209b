// replay_property_test.cpp - random programs against their plans. For each seed: random
// sizes and lifetimes (in allocation order), planned by a real strategy, then replayed
// through ContextAllocator with the frees that fall due before each allocation issued in a
// random order, fences completed at random, and (in the "late" variant) some frees held back
// past their planned time. Properties: a program that follows its plan is served entirely
// from it with one reservation; nothing handed out ever overlaps a live block (checked by an
// independent oracle) or a freed block whose fence has not completed; every block keeps its
// tag; check() is clean after every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "replay/context_allocator.h"
#include "host_device.h"
#include "replay_test_util.h"

namespace luma::core {
namespace {

using testing::addr;
using testing::has_tag;
using testing::LiveRanges;
using testing::planned;
using testing::sequence_lifetimes;
using testing::write_tag;

struct Program {
  std::vector<std::uint64_t> requested, size, free_at;  // free_at == n: never freed
};

Program random_program(std::mt19937_64& rng, std::size_t n) {
  Program p;
  std::uniform_int_distribution<std::uint64_t> bytes(1, 64 * 1024);
  std::uniform_int_distribution<std::uint64_t> life(1, 12);
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint64_t r = bytes(rng);
    p.requested.push_back(r);
    p.size.push_back((r + 255) / 256 * 256);
    p.free_at.push_back(rng() % 16 == 0 ? n : std::min<std::uint64_t>(n, k + life(rng)));
  }
  return p;
}

struct Pending {
  std::uintptr_t begin, end;
  Fence fence;
};

// Runs `prog` on `a`; late_percent of the frees are held back by a few allocations.
void run(const Program& prog, ContextAllocator& a, HostDevice& dev, std::mt19937_64& rng, int late_percent,
         bool expect_all_served) {
  const std::size_t n = prog.requested.size();
  std::vector<void*> ptr(n, nullptr);
  std::vector<std::uint64_t> due = prog.free_at;  // when the program actually frees it
  for (std::size_t k = 0; k < n; ++k)
    if (due[k] < n && static_cast<int>(rng() % 100) < late_percent) due[k] = std::min<std::uint64_t>(n, due[k] + 1 + rng() % 4);
  LiveRanges live;
  // per_free devices record one fence per free: the freed range may be handed out again
  // only once that fence is done, because the test completed it or the allocator waited.
  std::vector<Pending> pending;
  std::set<Fence> safe;
  auto free_block = [&](std::size_t j) {
    const std::uint64_t fences_before = dev.fences_recorded();
    ASSERT_EQ(a.free(ptr[j]), FreeStatus::ok) << "free of allocation " << j;
    live.remove(ptr[j]);
    if (dev.fences_recorded() > fences_before)
      pending.push_back({addr(ptr[j]), addr(ptr[j]) + prog.size[j], dev.fences_recorded()});
    ptr[j] = nullptr;
  };
  for (std::size_t k = 0; k <= n; ++k) {
    std::vector<std::size_t> now;
    for (std::size_t j = 0; j < k; ++j)
      if (ptr[j] != nullptr && due[j] == k) now.push_back(j);
    std::shuffle(now.begin(), now.end(), rng);
    for (std::size_t j : now) free_block(j);
    if (k == n) break;
    for (Fence f = 1; f <= dev.fences_recorded(); ++f)
      if (rng() % 2 == 0) {
        dev.complete_fence(f);
        safe.insert(f);
      }
    const AllocResult r = a.allocate(prog.requested[k]);
    ASSERT_EQ(r.status, AllocStatus::ok) << "allocation " << k;
    ptr[k] = r.ptr;
    live.add(r.ptr, prog.size[k]);  // no overlap with a live block ...
    for (Fence f : dev.fences_waited()) safe.insert(f);
    for (const Pending& p : pending) {  // ... nor with a free whose fence is not done
      const bool overlaps = addr(r.ptr) < p.end && p.begin < addr(r.ptr) + prog.size[k];
      EXPECT_FALSE(overlaps && safe.count(p.fence) == 0)
          << "allocation " << k << " reuses bytes of a free whose fence " << p.fence << " is pending";
    }
    std::erase_if(pending, [&](const Pending& p) { return safe.count(p.fence) != 0; });
    write_tag(r.ptr, prog.size[k], 0xC0FFEE00 + k);
    for (std::size_t j = 0; j <= k; ++j) {
      if (ptr[j] != nullptr) {
        ASSERT_TRUE(has_tag(ptr[j], prog.size[j], 0xC0FFEE00 + j)) << "block " << j;
      }
    }
    const std::vector<std::string> bad = a.check();
    ASSERT_TRUE(bad.empty()) << "after allocation " << k << testing::joined(bad);
  }
  if (expect_all_served) {
    const ReplayStats s = a.replay_stats();
    EXPECT_EQ(s.served, n);
    EXPECT_EQ(s.divergences, 0u);
    EXPECT_EQ(s.real_allocations, 1u);
  }
  for (std::size_t j = 0; j < n; ++j)
    if (ptr[j] != nullptr) free_block(j);
  const std::vector<std::string> bad = a.check();
  EXPECT_TRUE(bad.empty()) << testing::joined(bad);
}

class ReplayProperty : public ::testing::TestWithParam<int> {};

TEST_P(ReplayProperty, AProgramThatFollowsItsPlanIsServedFromItWithoutOverlap) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(GetParam()));
  const Program prog = random_program(rng, 120);
  const Strategy strategy = GetParam() % 2 == 0 ? Strategy::greedy : Strategy::tlsf;
  PlanFile plan;
  plan.devices.push_back(planned(sequence_lifetimes(prog.size, prog.free_at), prog.requested, strategy));
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(GetParam() % 3 == 0 ? FenceMode::batched : FenceMode::per_free);
  ContextAllocator a(dev, 0, {}, &plan);
  run(prog, a, dev, rng, 0, true);
  EXPECT_EQ(dev.contract_violations(), 0u);
}

TEST_P(ReplayProperty, LateFreesDivergeButNeverOverlap) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(GetParam()) + 1000);
  const Program prog = random_program(rng, 120);
  PlanFile plan;
  plan.devices.push_back(planned(sequence_lifetimes(prog.size, prog.free_at), prog.requested));
  HostDevice dev;
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::per_free);
  ContextAllocator a(dev, 0, {}, &plan);
  run(prog, a, dev, rng, 25, false);
  EXPECT_EQ(dev.contract_violations(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, ReplayProperty, ::testing::Range(1, 41));

}  // namespace
}  // namespace luma::core
