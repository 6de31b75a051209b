// simulation_test.cpp - core/simulate: sequences made by hand replayed through the caching
// allocator: the peak reserved and driver calls the allocator's rules give, each category
// of the attribution at the peak (and that they add up to the reserved bytes on a random
// run), fences completing on the recorded clock plus the latency, memory_limit refusals,
// and the bisection for the smallest memory_limit; reading the three input formats.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

#include "base/constants.h"
#include "planner/input/lifetime_reader.h"
#include "simulate/driver_costs.h"
#include "simulate/sim_sequence.h"
#include "simulate/simulation.h"

namespace luma::core {
namespace {

// Builds a sequence op by op; the clock is what the test gives.
struct Builder {
  SimSequence s;
  Builder() { s.has_times = true; }
  std::uint32_t alloc(std::uint64_t t, std::uint64_t bytes) {
    const auto id = static_cast<std::uint32_t>(s.allocations);
    s.ops.push_back({t, bytes, id, false});
    finish_sim_sequence(s);
    return id;
  }
  void free(std::uint64_t t, std::uint32_t id) {
    s.ops.push_back({t, 0, id, true});
    finish_sim_sequence(s);
  }
};

SimOptions with(const std::string& conf, std::uint64_t latency = 0) {
  SimOptions o;
  const ParseResult p = parse_settings(conf);
  EXPECT_TRUE(p.errors.empty()) << conf;
  o.settings = p.settings;
  o.fence_latency_ns = latency;
  // A latency applies where fences exist: a latency asks for the fenced path (a Builder's
  // sequence shows no fact, which the rule answers with reuse at once).
  if (latency != 0) o.free_path = FreePath::fenced;
  return o;
}

// The attribution tests place as 99a7bb6 did (20 MiB shared segments, no release before
// growth), so that each category appears where the test builds it; the policy itself is
// tested below (Growth...) and in placement_test.cpp.
constexpr const char* kKeep = "large_segment:20M,max_split_size:1024G,release_free_segments:false";

std::uint64_t attributed_sum(const PeakAttribution& a) {
  return a.live_requested + a.rounding + a.unsplit + a.pending + a.new_segment_rest + a.free_pieces_too_small +
         a.free_segments_too_small + a.free_other_pool + a.free_fitting;
}

TEST(Simulation, PeakLiveIsTheLowerBoundOfTheRequestedBytes) {
  Builder b;
  const auto x = b.alloc(0, 1000);
  const auto y = b.alloc(1, 3000);
  b.free(2, x);
  b.alloc(3, 500);
  b.free(4, y);
  EXPECT_EQ(b.s.peak_live, 4000u);
  EXPECT_EQ(b.s.allocations, 3u);
  EXPECT_EQ(b.s.frees, 2u);
}

TEST(Simulation, AnOwnSegmentRequestReservesItsRoundedSizeAndReusesIt) {
  Builder b;
  const auto a = b.alloc(0, 12 * MiB);  // >= min_large_alloc: a segment of its own
  b.free(1, a);
  b.alloc(2, 12 * MiB);  // the same block again: no second reservation
  const SimResult r = simulate(b.s, with(""));
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.reserves, 1u);
  EXPECT_EQ(r.releases, 0u);
  EXPECT_EQ(r.peak_reserved, 12 * MiB);
  EXPECT_TRUE(r.check_errors.empty());
}

TEST(Simulation, TheRestOfANewSharedSegmentIsAttributedToSegmentSizing) {
  Builder b;
  b.alloc(0, 1536 * KiB);  // large pool, below min_large_alloc: a 20 MiB shared segment
  const SimResult r = simulate(b.s, with(kKeep));
  ASSERT_TRUE(r.attributed);
  EXPECT_EQ(r.peak_reserved, 20 * MiB);
  EXPECT_EQ(r.at_peak.live_requested, 1536 * KiB);
  EXPECT_EQ(r.at_peak.new_segment_rest, 20 * MiB - 1536 * KiB);
  EXPECT_EQ(attributed_sum(r.at_peak), r.peak_reserved);
}

TEST(Simulation, AWhollyFreeSegmentTooSmallForTheRequestIsNamed) {
  Builder b;
  const auto a = b.alloc(0, 12 * MiB);
  b.free(1, a);
  b.alloc(2, 16 * MiB);  // the free 12 MiB segment cannot serve it
  const SimResult r = simulate(b.s, with(kKeep));
  ASSERT_TRUE(r.attributed);
  EXPECT_EQ(r.at_peak.allocation, 1u);
  EXPECT_EQ(r.at_peak.request, 16 * MiB);
  EXPECT_EQ(r.at_peak.free_segments_too_small, 12 * MiB);
  EXPECT_EQ(r.at_peak.live_requested, 16 * MiB);
  EXPECT_EQ(r.at_peak.live_below_peak, 0u);
  EXPECT_EQ(attributed_sum(r.at_peak), r.peak_reserved);
}

TEST(Simulation, GrowthReleasesTheFreeSegmentsTooSmallForIt) {
  Builder b;
  const auto a = b.alloc(0, 12 * MiB);
  b.free(1, a);
  b.alloc(2, 16 * MiB);  // above the high-water mark of 12 MiB: the free 12 MiB goes first
  const SimResult r = simulate(b.s, with(""));
  EXPECT_EQ(r.reserves, 2u);
  EXPECT_EQ(r.releases, 1u);
  EXPECT_EQ(r.peak_reserved, 16 * MiB);
  const SimResult kept = simulate(b.s, with("release_free_segments:false"));
  EXPECT_EQ(kept.releases, 0u);
  EXPECT_EQ(kept.peak_reserved, 28 * MiB);
}

TEST(Simulation, GrowthReleasesTheOtherPoolOnlyAsFarAsItNeeds) {
  Builder b;
  const auto x = b.alloc(0, 30 * MiB), y = b.alloc(1, 30 * MiB);
  const auto small = b.alloc(2, 4096);  // a 2 MiB small-pool segment: 62 MiB, the mark
  b.free(3, x), b.free(4, y), b.free(5, small);
  b.alloc(6, 40 * MiB);  // needs 40 MiB under the mark: both 30 MiB segments, not the small one
  const SimResult r = simulate(b.s, with(""));
  EXPECT_EQ(r.releases, 2u);
  EXPECT_EQ(r.peak_reserved, 62 * MiB);
  EXPECT_TRUE(r.check_errors.empty());
}

TEST(Simulation, NearAMemoryLimitALargeRequestGetsASegmentOfItsOwnSize) {
  Builder b;
  const auto a = b.alloc(0, 40 * MiB);
  b.alloc(1, 30 * MiB);
  b.alloc(2, 20 * MiB);  // 70 of 100 MiB held: under pressure from here (less than half left)
  b.free(3, a);
  b.alloc(4, 8 * MiB);   // tight: not a piece of the free 40 MiB; it is released, 8 MiB reserved
  const SimResult tight = simulate(b.s, with("memory_limit:100M"));
  ASSERT_TRUE(tight.completed);
  EXPECT_EQ(tight.reserves, 4u);
  EXPECT_EQ(tight.releases, 1u);
  const SimResult free_run = simulate(b.s, with(""));
  EXPECT_EQ(free_run.reserves, 3u);  // no limit: the 8 MiB block is cut from the free 40 MiB
  EXPECT_EQ(free_run.releases, 0u);
}

TEST(Simulation, RoundingPiecesAndTheOtherPoolAreSeparated) {
  Builder b;
  b.alloc(0, 100);                        // small pool: rounded to 256 B
  const auto big = b.alloc(1, 3 * MiB);   // large pool, a 20 MiB segment
  b.alloc(2, 2 * MiB);                    // the same segment: 15 MiB left in it
  b.free(3, big);                         // a 3 MiB piece between live blocks
  b.alloc(4, 16 * MiB);                   // fits neither piece: a new segment
  const SimResult r = simulate(b.s, with(kKeep));
  ASSERT_TRUE(r.attributed);
  const PeakAttribution& a = r.at_peak;
  EXPECT_EQ(a.rounding, 156u);
  EXPECT_EQ(a.free_other_pool, 2 * MiB - 256);
  EXPECT_EQ(a.free_pieces_too_small, 3 * MiB + 15 * MiB);
  EXPECT_EQ(a.new_segment_rest, 0u);  // 16 MiB: a segment of its own
  EXPECT_EQ(attributed_sum(a), r.peak_reserved);
}

TEST(Simulation, ARestBelowMinSplitStaysInTheBlock) {
  Builder c;
  const auto x = c.alloc(0, 2 * MiB);  // small_size raised: fills a 2 MiB small segment
  c.free(1, x);
  c.alloc(2, 2 * MiB - 2048);  // the 2 KiB rest is below min_split: not split off
  c.alloc(3, 2 * MiB);         // grows: the peak
  const SimResult q = simulate(c.s, with("min_split:4K,small_size:2M,small_segment:2M,min_segment:2M"));
  ASSERT_TRUE(q.attributed);
  EXPECT_EQ(q.at_peak.allocation, 2u);
  EXPECT_EQ(q.at_peak.unsplit, 2048u);
  EXPECT_EQ(q.at_peak.rounding, 0u);
  EXPECT_EQ(attributed_sum(q.at_peak), q.peak_reserved);
}

TEST(Simulation, AttributionAddsUpOnARandomRunUnderEverySetting) {
  std::mt19937_64 rng(7);
  Builder b;
  std::vector<std::uint32_t> live;
  std::uint64_t t = 0;
  for (int i = 0; i < 3000; ++i) {
    t += 1 + rng() % 1000;
    if (!live.empty() && rng() % 2 == 0) {
      const std::size_t k = rng() % live.size();
      b.s.ops.push_back({t, 0, live[k], true});
      live[k] = live.back();
      live.pop_back();
    } else {
      const std::uint64_t bytes = rng() % 4 == 0 ? 1 + rng() % (40 * MiB) : 1 + rng() % (2 * MiB);
      live.push_back(static_cast<std::uint32_t>(b.s.allocations));
      b.s.ops.push_back({t, bytes, static_cast<std::uint32_t>(b.s.allocations), false});
      ++b.s.allocations;
    }
  }
  finish_sim_sequence(b.s);
  for (const char* conf : {"", kKeep, "large_segment:64M", "max_split_size:64M", "min_split:1M", "memory_limit:1G",
                           "expandable_segments:1", "expandable_segments:1,memory_limit:1G"}) {
    for (std::uint64_t latency : {std::uint64_t{0}, std::uint64_t{5000}}) {
      const SimResult r = simulate(b.s, with(conf, latency));
      ASSERT_TRUE(r.completed) << conf;
      ASSERT_TRUE(r.attributed) << conf;
      EXPECT_EQ(attributed_sum(r.at_peak), r.peak_reserved) << conf << " latency " << latency;
      EXPECT_EQ(r.at_peak.reserved, r.peak_reserved) << conf;
      EXPECT_GE(r.peak_reserved, b.s.peak_live) << conf;
      EXPECT_TRUE(r.check_errors.empty()) << conf;
    }
  }
}

TEST(Simulation, AFreedBlockWaitsForItsFenceOnTheRecordedClock) {
  Builder b;
  const auto a = b.alloc(0, 12 * MiB);
  b.free(100, a);
  b.alloc(200, 12 * MiB);  // the fence is recorded now (the epoch closes for this request)
  b.alloc(10'000, 12 * MiB);
  // Latency 0: reused at once, no fence at all.
  const SimResult now = simulate(b.s, with(""));
  EXPECT_EQ(now.fences, 0u);
  EXPECT_EQ(now.fence_waits, 0u);
  EXPECT_EQ(now.reserves, 2u);
  // 1 us: the fence recorded at 200 is done at 1200; the allocation waits (cheaper than a
  // segment) and the stall is counted.
  const SimResult late = simulate(b.s, with("", 1000));
  EXPECT_EQ(late.fences, 1u);
  EXPECT_EQ(late.fence_waits, 1u);
  EXPECT_EQ(late.fence_wait_ns, 1000u);
  EXPECT_EQ(late.reserves, 2u);
  // free_sync:none: no fence, never a wait.
  const SimResult none = simulate(b.s, with("free_sync:none", 1000));
  EXPECT_EQ(none.fences, 0u);
  EXPECT_EQ(none.fence_waits, 0u);
}

// The free path: the library's rule over the sequence's facts, changed at the op where a
// fact shows; and what each path does to a freed block.
TEST(Simulation, TheFreePathChangesWhereTheRecordingShowsAFact) {
  Builder b;
  const auto a = b.alloc(0, 4096);
  b.free(10, a);
  b.alloc(20, 4096);
  b.s.facts.push_back({2, FreePathFact::second_thread, "thread 2"});
  b.s.facts.push_back({3, FreePathFact::unordered_stream, "stream 0x99"});
  b.alloc(30, 4096);
  b.alloc(40, 4096);
  std::vector<PathSpan> spans = free_paths(b.s, with(""));
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].path, FreePath::at_once);
  EXPECT_EQ(spans[0].from_op, 0u);
  EXPECT_EQ(spans[1].path, FreePath::legacy);
  EXPECT_EQ(spans[1].from_op, 2u);
  EXPECT_NE(spans[1].why.find("thread 2"), std::string::npos) << spans[1].why;
  EXPECT_EQ(spans[2].path, FreePath::fenced);
  EXPECT_EQ(spans[2].from_op, 3u);
  // Reuse off: fenced throughout. An override: that path throughout. free_sync:none: at once.
  spans = free_paths(b.s, with("stream_ordered_reuse:false"));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].path, FreePath::fenced);
  SimOptions legacy = with("");
  legacy.free_path = FreePath::legacy;
  spans = free_paths(b.s, legacy);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].path, FreePath::legacy);
  spans = free_paths(b.s, with("free_sync:none"));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].path, FreePath::at_once);
  EXPECT_EQ(simulate(b.s, with("")).paths.size(), 3u);
}

TEST(Simulation, AtOnceAFreedBlockIsNeverPendingOnTheLegacyPathItWaitsForItsEpoch) {
  Builder b;
  const auto small = b.alloc(0, 4096);  // small pool
  b.free(10, small);                    // at once: free now; legacy: pending in the open epoch
  b.alloc(20, 12 * MiB);                // large pool: grows while the small block is pending
  SimOptions o = with("");
  o.free_path = FreePath::at_once;
  SimResult r = simulate(b.s, o);
  ASSERT_TRUE(r.attributed);
  EXPECT_EQ(r.at_peak.pending, 0u);
  o.free_path = FreePath::legacy;
  r = simulate(b.s, o);
  ASSERT_TRUE(r.attributed);
  EXPECT_EQ(r.at_peak.pending, 4096u);
  EXPECT_EQ(r.fences, 0u);  // barriers, no fence to wait for
}

TEST(Simulation, ABlockWaitingForItsFenceIsCountedAtThePeak) {
  Builder b;
  const auto small = b.alloc(0, 4096);  // small pool
  b.free(10, small);                    // pending: its epoch is fenced only when needed
  b.alloc(20, 12 * MiB);                // large pool: grows while the small block is pending
  const SimResult r = simulate(b.s, with("", 1'000'000));
  ASSERT_TRUE(r.attributed);
  EXPECT_EQ(r.at_peak.pending, 4096u);
  EXPECT_EQ(attributed_sum(r.at_peak), r.peak_reserved);
}

TEST(Simulation, AMemoryLimitRefusesAndTheReplayStops) {
  Builder b;
  b.alloc(0, 12 * MiB);
  b.alloc(1, 12 * MiB);
  const SimResult r = simulate(b.s, with("memory_limit:20M"));
  EXPECT_FALSE(r.completed);
  EXPECT_EQ(r.failed_op, 1u);
  EXPECT_EQ(r.failed_bytes, 12 * MiB);
  EXPECT_EQ(r.allocations, 1u);
  EXPECT_TRUE(simulate(b.s, with("memory_limit:24M")).completed);
}

TEST(Simulation, SettingsASimulationCannotHonourAreRefused) {
  Builder b;
  b.alloc(0, 1);
  EXPECT_THROW(simulate(b.s, with("caching:false")), std::invalid_argument);
  EXPECT_THROW(simulate(b.s, with("memory_fraction:0.5")), std::invalid_argument);
}

// A growing chain: each new buffer overlaps the last one.
Builder growing_chain() {
  Builder b;
  std::uint32_t prev = b.alloc(0, 3 * MiB);
  for (int i = 1; i < 40; ++i) {
    const auto next = b.alloc(2 * i, (3 + i % 7) * MiB);
    b.free(2 * i + 1, prev);
    prev = next;
  }
  return b;
}

TEST(Simulation, TheLimitScanSaysOfEachLimitTriedWhetherItCompletes) {
  const Builder b = growing_chain();
  const SimOptions o = with("");
  const LimitScan m = scan_limits(b.s, o, 0.01);
  ASSERT_GE(m.points.size(), 2u);
  EXPECT_EQ(m.points.front().limit, b.s.peak_live);
  EXPECT_EQ(m.points.back().limit, m.top);
  EXPECT_EQ(m.step, b.s.peak_live / 100);
  EXPECT_EQ(m.runs, m.points.size() + 1);  // and the run without a limit
  for (std::size_t i = 1; i < m.points.size(); ++i) {  // step apart; the last, top, may be closer
    const std::uint64_t gap = m.points[i].limit - m.points[i - 1].limit;
    if (i + 1 < m.points.size()) {
      EXPECT_EQ(gap, m.step) << i;
    }
    EXPECT_GT(gap, 0u) << i;
    EXPECT_LE(gap, m.step) << i;
  }
  for (const LimitScan::Point& p : m.points) {
    SimOptions at = o;
    at.settings.memory_limit = p.limit;
    EXPECT_EQ(simulate(b.s, at).completed, p.completes) << p.limit;
  }
  ASSERT_NE(m.bound, 0u);
  EXPECT_LE(m.least, m.bound);
  bool above = false;
  for (const LimitScan::Point& p : m.points) {
    above |= p.limit == m.bound;
    if (above) {
      EXPECT_TRUE(p.completes) << p.limit;
    }
    if (p.limit < m.least) {
      EXPECT_FALSE(p.completes) << p.limit;
    }
  }
  EXPECT_TRUE(above);
}

// LimitScan::top: from it up (pressure_divisor 2: twice the peak without a limit) the run
// is the unlimited one, byte for byte and call for call; just below the tight placement
// starts and changes what is reserved.
TEST(Simulation, FromTheScansTopUpTheRunIsTheOneWithoutALimit) {
  const Builder b = growing_chain();
  const SimOptions o = with("");
  const SimResult free_run = simulate(b.s, o);
  const LimitScan m = scan_limits(b.s, o, 0.05);
  ASSERT_TRUE(m.top_is_unlimited);
  EXPECT_EQ(m.unlimited_peak, free_run.peak_reserved);
  EXPECT_GE(m.top, 2 * free_run.peak_reserved);
  EXPECT_LE(m.top, 2 * free_run.peak_reserved + 2);
  for (const std::uint64_t limit : {m.top, m.top + 1, m.top + 7 * MiB, 5 * m.top}) {
    SimOptions at = o;
    at.settings.memory_limit = limit;
    const SimResult r = simulate(b.s, at);
    EXPECT_TRUE(r.completed) << limit;
    EXPECT_EQ(r.peak_reserved, free_run.peak_reserved) << limit;
    EXPECT_EQ(r.reserves, free_run.reserves) << limit;
    EXPECT_EQ(r.releases, free_run.releases) << limit;
  }
  SimOptions never = o;
  never.settings.allocator.pressure_divisor = 0;
  const LimitScan never_tight = scan_limits(b.s, never, 0.05);
  EXPECT_EQ(never_tight.top, std::max(never_tight.unlimited_peak, b.s.peak_live));
  SimOptions always = o;
  always.settings.allocator.pressure_divisor = 1;
  const LimitScan always_tight = scan_limits(b.s, always, 0.05);
  EXPECT_FALSE(always_tight.top_is_unlimited);
  EXPECT_EQ(always_tight.top, 2 * std::max(always_tight.unlimited_peak, b.s.peak_live));
}

// ---- reading -----------------------------------------------------------------------

std::filesystem::path write(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("luma-sim-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir / name;
}

// --repeat, spelled out: the window's ops once more per copy (the blocks allocated before
// the window not again), each copy's blocks still live at its end freed in allocation
// order first; the times moved on so they never go back. Ids of copy k are new ids.
SimSequence repeated_by_hand(const SimSequence& s, unsigned copies) {
  SimSequence out = s;
  out.window_start = 0;
  std::uint64_t shift = 0;
  const std::uint64_t span = s.ops.back().time_ns - s.ops[s.window_start].time_ns + 1;
  std::vector<std::int64_t> id_of(s.allocations, -1);  // this copy's id of each allocation
  std::vector<bool> live(s.allocations, false);
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    if (!s.ops[i].is_free) id_of[s.ops[i].id] = s.ops[i].id, live[s.ops[i].id] = true;
    else live[s.ops[i].id] = false;
  }
  std::uint32_t next = static_cast<std::uint32_t>(s.allocations);
  for (unsigned c = 1; c < copies; ++c) {
    for (std::uint32_t id = 0; id < s.allocations; ++id) {  // the previous copy's survivors
      bool before = false;
      for (std::size_t i = 0; i < s.window_start; ++i) before |= s.ops[i].id == id;
      if (live[id] && !before) {
        out.ops.push_back({s.ops.back().time_ns + shift, 0, static_cast<std::uint32_t>(id_of[id]), true});
        live[id] = false;
      }
    }
    shift += span;
    for (std::size_t i = s.window_start; i < s.ops.size(); ++i) {
      SimOp op = s.ops[i];
      op.time_ns += shift;
      if (!op.is_free) {
        id_of[op.id] = next;
        live[op.id] = true;
        op.id = next++;
      } else {
        if (!live[op.id]) continue;  // freed already (a block from before the window)
        live[op.id] = false;
        op.id = static_cast<std::uint32_t>(id_of[op.id]);
      }
      out.ops.push_back(op);
    }
  }
  finish_sim_sequence(out);
  return out;
}

// A window with a block from before it (freed in it), one that stays live through it,
// and blocks still live at its end, in sizes that make the default release rule churn.
SimSequence window_with_history() {
  Builder b;
  const auto before_freed = b.alloc(0, 8 * MiB);
  const auto before_kept = b.alloc(0, 3 * MiB);
  (void)before_kept;
  b.s.window_start = b.s.ops.size();
  std::uint64_t t = 1;
  b.free(t++, before_freed);
  for (int step = 0; step < 4; ++step) {
    const auto a = b.alloc(t++, 40 * MiB);
    const auto c = b.alloc(t++, 6 * MiB);
    b.free(t++, a);
    const auto d = b.alloc(t++, 70 * MiB);
    b.free(t++, c);
    b.free(t++, d);
  }
  b.alloc(t++, 5 * MiB);  // live at the window's end
  b.alloc(t++, 300 * KiB);
  return b.s;
}

TEST(Simulation, ARepeatedWindowIsTheWindowReplayedAgainAfterItsLiveBlocksAreFreed) {
  const SimSequence s = window_with_history();
  for (const char* conf : {"", "release_free_segments:false", "expandable_segments:1", "max_split_size:64M"}) {
    SimOptions o = with(conf);
    o.repeat = 3;
    const SimResult r = simulate(s, o);
    const SimResult whole = simulate(repeated_by_hand(s, 3), with(conf));
    EXPECT_TRUE(r.completed) << conf;
    EXPECT_EQ(r.peak_reserved, whole.peak_reserved) << conf;
    EXPECT_EQ(r.reserves, whole.reserves) << conf;
    EXPECT_EQ(r.releases, whole.releases) << conf;
    EXPECT_EQ(r.driver_ns, whole.driver_ns) << conf;
    EXPECT_EQ(r.allocations, whole.allocations) << conf;
    // The copies add up to the whole run; the first copy is the run without --repeat.
    const SimResult once = simulate(s, with(conf));
    EXPECT_EQ(r.first.driver_allocations, once.reserves) << conf;
    EXPECT_EQ(r.first.driver_frees, once.releases) << conf;
    EXPECT_EQ(r.first.peak_reserved, once.peak_reserved) << conf;
    EXPECT_EQ(r.first.allocations, s.allocations) << conf;
    EXPECT_EQ(r.warm.copies, 2U) << conf;
    EXPECT_EQ(r.warm.allocations, 2 * (s.allocations - s.window_start)) << conf;
    EXPECT_EQ(r.first.driver_allocations + r.warm.driver_allocations, r.reserves) << conf;
    EXPECT_EQ(r.first.driver_frees + r.warm.driver_frees, r.releases) << conf;
    EXPECT_EQ(r.first.driver_ns + r.warm.driver_ns, r.driver_ns) << conf;
    EXPECT_EQ(std::max(r.first.peak_reserved, r.warm.peak_reserved), r.peak_reserved) << conf;
  }
}

TEST(Simulation, WithoutReleasesTheWarmCopiesOfAWindowMakeNoDriverCall) {
  SimOptions o = with("release_free_segments:false");
  o.repeat = 4;
  const SimResult r = simulate(window_with_history(), o);
  EXPECT_GT(r.first.driver_allocations, 0U);
  EXPECT_EQ(r.warm.driver_allocations, 0U);
  EXPECT_EQ(r.warm.driver_frees, 0U);
  EXPECT_EQ(r.warm.driver_ns, 0U);
  EXPECT_EQ(r.warm.peak_reserved, r.first.peak_reserved);
}

TEST(Simulation, DriverTimeIsTheTableCostOfEachCall) {
  Builder b;
  b.alloc(0, 64 * MiB);  // a segment of its own: one cuMemAlloc of 64 MiB
  const SimResult r = simulate(b.s, with("release_free_segments:false"));
  EXPECT_EQ(r.reserves, 1U);
  EXPECT_EQ(r.driver_ns, driver_call_ns(DriverCall::mem_alloc, 64 * MiB));
  // Between two rows the cost is interpolated, and it grows with the size.
  EXPECT_LT(driver_call_ns(DriverCall::mem_alloc, 16 * MiB), driver_call_ns(DriverCall::mem_alloc, 40 * MiB));
  EXPECT_LT(driver_call_ns(DriverCall::mem_alloc, 40 * MiB), driver_call_ns(DriverCall::mem_alloc, 64 * MiB));
  // Every call has a row, and the virtual-memory calls say they are not measured.
  for (std::size_t c = 0; c < kDriverCalls; ++c) EXPECT_GT(driver_call_ns(static_cast<DriverCall>(c), 2 * MiB), 0U);
  EXPECT_FALSE(driver_cost_measured(DriverCall::mem_map));
  for (const DriverCost& row : driver_costs()) EXPECT_FALSE(row.source.empty());
}

TEST(Simulation, RepeatZeroIsRefused) {
  SimOptions o = with("");
  o.repeat = 0;
  EXPECT_THROW(simulate(window_with_history(), o), std::invalid_argument);
}

TEST(SimSequence, AnRmmLogKeepsItsClockAndRowOrder) {
  const auto path = write("log.csv",
                          "Thread,Time,Action,Pointer,Size,Stream\n"
                          "1,23:59:59.999000,allocate,0x1000,4096,0x0\n"
                          "1,23:59:59.999500,allocate,0x2000,1024,0x0\n"
                          "1,00:00:00.000250,free,0x1000,4096,0x0\n");
  const SimInput in = read_sim_input(path.string());
  EXPECT_EQ(in.format, "RMM log");
  ASSERT_EQ(in.devices.size(), 1u);
  const SimSequence& s = in.devices[0];
  EXPECT_TRUE(s.has_times);
  ASSERT_EQ(s.ops.size(), 3u);
  EXPECT_EQ(s.ops[1].time_ns, 500'000u);
  EXPECT_EQ(s.ops[2].time_ns, 1'250'000u);  // past midnight
  EXPECT_TRUE(s.ops[2].is_free);
  EXPECT_EQ(s.ops[2].id, 0u);
  EXPECT_EQ(s.peak_live, 5120u);
}

TEST(SimSequence, AnRmmLogWithoutAClockIsReplayedInRowOrder) {
  const auto path = write("noclock.csv",
                          "Thread,Time,Action,Pointer,Size,Stream\n"
                          "1,12,allocate,0x1000,4096,0x0\n"
                          "1,13,free,0x1000,4096,0x0\n");
  const SimInput in = read_sim_input(path.string());
  ASSERT_EQ(in.devices.size(), 1u);
  EXPECT_FALSE(in.devices[0].has_times);
  EXPECT_EQ(in.devices[0].ops[1].time_ns, 1u);
}

TEST(SimSequence, APlannerCsvFreesBeforeItAllocatesAtTheSameTime) {
  const auto path = write("plan.csv", "id,lower,upper,size\na,0,5,100\nb,5,9,200\nc,2,9,50\n");
  const SimInput in = read_sim_input(path.string());
  EXPECT_EQ(in.format, "planner CSV");
  ASSERT_EQ(in.devices.size(), 1u);
  const SimSequence& s = in.devices[0];
  EXPECT_FALSE(s.has_times);
  ASSERT_EQ(s.ops.size(), 6u);
  EXPECT_TRUE(s.ops[2].is_free);  // a freed at 5 before b allocated at 5
  EXPECT_EQ(s.ops[3].bytes, 200u);
  EXPECT_EQ(s.peak_live, 250u);
}

TEST(SimSequence, InputThatIsNoneOfTheFormatsIsNamed) {
  const auto path = write("junk.txt", "hello\n");
  try {
    read_sim_input(path.string());
    FAIL() << "no error";
  } catch (const PlanInputError& e) {
    EXPECT_NE(std::string(e.what()).find("junk.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("RMM log"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_sim_input((path.parent_path() / "missing.csv").string()), PlanInputError);
}

}  // namespace
}  // namespace luma::core
