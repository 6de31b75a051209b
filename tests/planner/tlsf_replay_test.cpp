// tlsf_replay_test.cpp - the fast replay (radix-sorted 4-byte events, block handles, the
// plan's entries reused as per-buffer state) against the plainest replay of the same rules
// written from the rules as docs/planner.md states them ("Strategies", tlsf): events as
// (time, free before alloc, input order) sorted by std::stable_sort, sizes rounded to 256,
// arena twice the total, Tlsf::alloc/free by offset. Both sort paths (32-bit times, and
// times spanning more than 2^32) and alignments are covered; the offsets must be identical.
// Plus the inputs the plain replay cannot do.
#include <gtest/gtest.h>

#include <algorithm>

#include "planner/plan_checker.h"
#include "planner/planner_constants.h"
#include "planner/tlsf.h"
#include "planner/tlsf_replay.h"
#include "random_lifetimes.h"

namespace luma::core {
namespace {

std::vector<std::uint64_t> plain_replay(const std::vector<Lifetime>& lts) {
  struct Event {
    std::uint64_t time;
    bool alloc;
    std::size_t buffer;
  };
  std::vector<Event> events;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < lts.size(); ++i) {
    if (lts[i].lower >= lts[i].upper) continue;
    events.push_back({lts[i].upper, false, i});
    events.push_back({lts[i].lower, true, i});
    total += (lts[i].size + 255) / 256 * 256;
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.alloc != b.alloc) return !a.alloc;  // frees first
    return a.buffer < b.buffer;               // input order
  });
  Tlsf tlsf(std::max<std::uint64_t>(2 * total, 256), 0, 256, 32);
  std::vector<std::uint64_t> offsets(lts.size(), 0);
  for (const Event& e : events) {
    if (e.alloc)
      offsets[e.buffer] = tlsf.alloc((lts[e.buffer].size + 255) / 256 * 256, lts[e.buffer].alignment);
    else
      tlsf.free(offsets[e.buffer]);
  }
  return offsets;
}

TEST(TlsfReplay, MatchesThePlainReplay) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    auto lts = testing::random_lifetimes(500 + 50 * seed, seed, 300 + 100 * seed, 80, 100000,
                                         /*aligned=*/seed % 2 == 0);
    lts[seed].upper = lts[seed].lower;  // a buffer never live
    const Plan plan = plan_tlsf_replay(lts);
    EXPECT_EQ(plan.offsets, plain_replay(lts)) << "seed " << seed;
    EXPECT_EQ(plan.offsets[seed], 0u);
    EXPECT_EQ(plan.arena, arena_of(lts, plan.offsets));
  }
}

TEST(TlsfReplay, TimesBeyond32BitsTakeTheWideSortAndAgree) {
  auto lts = testing::random_lifetimes(3000, 77, 5000, 100, 50000, true);
  const Plan narrow = plan_tlsf_replay(lts);
  for (Lifetime& lt : lts) {  // same order of events, times far apart
    lt.lower = (lt.lower << 34) + 12345;
    lt.upper = (lt.upper << 34) + 12345;
  }
  const Plan wide = plan_tlsf_replay(lts);
  EXPECT_EQ(wide.offsets, narrow.offsets);
  EXPECT_EQ(wide.offsets, plain_replay(lts));
}

TEST(TlsfReplay, ManyEventsAtOneTime) {
  // Every buffer starts at 0 and they end at two times: ties everywhere, input order decides.
  std::vector<Lifetime> lts;
  for (int i = 0; i < 400; ++i)
    lts.push_back({std::to_string(i), 0, static_cast<std::uint64_t>(1 + i % 2),
                   static_cast<std::uint64_t>(100 + 37 * i), 1, 0});
  EXPECT_EQ(plan_tlsf_replay(lts).offsets, plain_replay(lts));
}

TEST(TlsfReplay, AlignmentsBeyondTheSizeGetRoom) {
  // Twice the total (768 B) cannot hold three 256 B buffers at 1 MiB boundaries; the replay
  // adds room for such alignments instead of running out of memory.
  std::vector<Lifetime> lts;
  for (int i = 0; i < 3; ++i) lts.push_back({std::to_string(i), 0, 10, 256, 1 << 20, 0});
  const Plan plan = plan_tlsf_replay(lts);
  EXPECT_TRUE(check_plan(lts, plan).empty());
  EXPECT_EQ(plan.offsets, (std::vector<std::uint64_t>{0, 1 << 20, 2 << 20}));
}

TEST(TlsfReplay, RejectsWhatItCannotRepresent) {
  std::vector<Lifetime> lts = {{"a", 0, 2, 100, 3, 0}};
  EXPECT_THROW(plan_tlsf_replay(lts), std::invalid_argument);  // alignment 3
  lts[0].alignment = 1;
  lts[0].size = planner::kReplayMaxSize + 1;
  EXPECT_THROW(plan_tlsf_replay(lts), std::invalid_argument);
  EXPECT_TRUE(plan_tlsf_replay({}).offsets.empty());
}

}  // namespace
}  // namespace luma::core
