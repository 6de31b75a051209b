// planner_constants.h - every number the planner uses, with the reason for it, in one place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/constants.h"

namespace luma::core::planner {

// The TLSF replay matches tinygrad's memory planner (and the reference tlsf.rs): the
// smallest block is 256 B and each power-of-two range has 32 second-level buckets.
inline constexpr std::uint64_t kTlsfBlockSize = 256;
inline constexpr std::uint64_t kTlsfLevel2Count = 32;
// tinygrad rounds every buffer up to 256 B before replaying the schedule.
inline constexpr std::uint64_t kReplayRound = 256;
// ... and gives the TLSF an arena of twice the total rounded size, so it never runs out.
inline constexpr std::uint64_t kReplayArenaFactor = 2;

// How many events ahead the replay prefetches an alloc's plan entry: that read is a cache
// miss (a buffer's events are far apart in input order) and an event takes tens of ns.
inline constexpr std::size_t kReplayPrefetchDistance = 16;
// The largest buffer (and total) the replay accepts: the TLSF's arena (twice the total) must
// stay below 2^62, and rounding to 256 B must not overflow.
inline constexpr std::uint64_t kReplayMaxSize = std::uint64_t{1} << 60;

// cudaMalloc returns 256-byte aligned pointers, so buffers read from an RMM log keep it.
inline constexpr std::uint64_t kRmmAlignment = kCudaMallocAlignment;

// Default time limit of the improvement search (`luma plan --time-limit`). The exact search
// is bounded by work units, not time (so its answer does not depend on the machine or its
// load): the limit buys kBranchAndBoundWorkPerSecond units per second, and the wall clock
// only cuts in on a machine several times slower. With 1.5 s every MiniMalloc benchmark file
// (the hardest inputs we know) finishes well within 2 s even on a quarter of a core.
inline constexpr double kDefaultTimeLimitSeconds = 1.5;
// Work units (canonical_search.h: buffers and sections scanned, overlaps followed) granted
// per second of the time limit. This 2-core machine does about 400 million per second on a
// core (debugoptimized or release alike), so a quarter of that: the default budget (150 M,
// ~0.4 s of CPU for the hardest file) is spent before the 1.5 s deadline even on a quarter
// of a core, where the 2-core machine shared by several compiling engineers often leaves it.
inline constexpr std::uint64_t kBranchAndBoundWorkPerSecond = 100'000'000;
// The exact search scans the unplaced buffers at each node: fine for thousands of buffers,
// slow beyond; larger inputs get the local search over orders instead.
inline constexpr std::size_t kBranchAndBoundMaxBuffers = 20000;
// ... and keeps every overlapping pair in memory: more pairs than this (8 bytes each, and as
// many section entries at most) would cost more memory than the input deserves.
inline constexpr std::size_t kBranchAndBoundMaxOverlaps = std::size_t{1} << 22;
// Share of the work spent asking for a packing at the lower bound before minimising from the
// best arena known: inputs that pack perfectly are found by that question alone (B and E of
// the benchmark set need 55 M and 45 M units: this gives them 90 M at the default budget),
// the rest still get 40%.
inline constexpr double kBranchAndBoundDecisionShare = 0.6;
// ... but never more than this: the MiniMalloc inputs that pack at the lower bound do so
// within 55 M units (E: 45 M, B: 55 M), and a larger budget (`--time-limit 10`) is better spent on the
// capacities above it (D and J, which never pack at the lower bound).
inline constexpr std::uint64_t kBranchAndBoundDecisionMostWork = 90'000'000;
// Then it bisects the capacity; each question gets this share of the work left, so a
// capacity too hard to decide costs a bounded part and the bisection moves on (upwards).
inline constexpr double kBranchAndBoundBisectShare = 0.25;
// Once the bisection interval is this fraction of the arena it restarts from the largest
// capacity proven to fail, splitting at the next of these fractions: how hard a capacity is
// varies erratically, so fresh capacities are better chances than ever finer steps.
inline constexpr double kBisectRestartFraction = 0.002;
inline constexpr double kBisectSplits[] = {0.5, 0.3, 0.7, 0.15, 0.85};
// The first node limit of a restart round: twice the buffers (MiniMalloc's), at least this.
inline constexpr std::uint64_t kRestartMinNodes = 64;
// Above this many buffers the greedy runs only by-size best fit instead of all eight
// ordering x fit variants (each is a full placement, seconds at 10^6 buffers).
inline constexpr std::size_t kGreedyAllOrdersMaxBuffers = 100000;
// The greedy's time buckets keep one entry per (buffer, bucket touched); with the bucket
// width at the median lifetime most buffers touch 2-3. Inputs that would need more entries
// than this per buffer (many long lifetimes) use the overlap tree instead.
inline constexpr std::uint64_t kBucketEntriesPerBuffer = 8;
// Fence-aware plans (fence_slack.h, `luma plan --fence-slack auto`): a freed buffer's bytes
// stay out of reuse for L allocations of its device; replay records the fence of a burst of
// frees L allocations before its bytes are needed, so L is the time that fence has to
// complete. Auto takes the largest L up to kMaxAutoFenceSlack whose arena stays within
// kFenceSlackArenaBudget x the run's own lower bound (the trade chosen: a little arena for
// fewer waits), trying each L from the top (one planning per L). Measured on the sample loop
// in docs/planner.md ("Fence-aware plans"): L = 2 costs 1 % there, L = 3 14 %.
inline constexpr std::uint64_t kMaxAutoFenceSlack = 4;
inline constexpr double kFenceSlackArenaBudget = 1.10;
// Selective slack (with_selective_fence_slack), tried when no L fits for every free: the
// largest L tried (then halved down to 1). A kept free's window also ends at the first
// quiet point (a step's start), so a large L only lets a temporary keep its bytes to the
// end of its step: on the two-stream loop a temporary's bytes are otherwise taken 5
// allocations after its free, while its stream still writes it.
inline constexpr std::uint64_t kMaxSelectiveFenceSlack = 16;
// ... and the live bytes it may add above the run's peak, as a fraction of the peak
// (1/64, 1.6 %): a temporary freed where its step peaks can be kept only above the peak.
// On the two-stream loop: none allowed 1.2 fence waits per step (the second stream's
// temporary reused at once), 1/64 none at 1.0036 x the lower bound (docs/planner.md).
inline constexpr std::uint64_t kSelectivePeakAllowanceDivisor = 64;
// The search's pseudo-random generator is seeded with this so a run is reproducible.
inline constexpr std::uint64_t kSearchSeed = 0x6c756d61;  // "luma"

static_assert((kTlsfBlockSize & (kTlsfBlockSize - 1)) == 0, "block size: power of two");
static_assert(kReplayRound % kTlsfBlockSize == 0, "replay sizes are whole TLSF blocks");
static_assert((kRmmAlignment & (kRmmAlignment - 1)) == 0, "alignment: power of two");

}  // namespace luma::core::planner
