// planner_constants.h - every number the planner uses, with the reason for it, in one place.
#pragma once

#include <cstddef>
#include <cstdint>

namespace luma::core::planner {

// The TLSF replay matches tinygrad's memory planner (and the reference tlsf.rs): the
// smallest block is 256 B and each power-of-two range has 32 second-level buckets.
inline constexpr std::uint64_t kTlsfBlockSize = 256;
inline constexpr std::uint64_t kTlsfLevel2Count = 32;
// tinygrad rounds every buffer up to 256 B before replaying the schedule.
inline constexpr std::uint64_t kReplayRound = 256;
// ... and gives the TLSF an arena of twice the total rounded size, so it never runs out.
inline constexpr std::uint64_t kReplayArenaFactor = 2;

// cudaMalloc returns 256-byte aligned pointers, so buffers read from an RMM log keep it.
inline constexpr std::uint64_t kRmmAlignment = 256;

// Default wall-clock budget of the improvement search. Every MiniMalloc benchmark file
// (the hardest inputs we know) finishes within it; searches that reach the lower bound stop
// at once.
inline constexpr double kDefaultTimeLimitSeconds = 1.5;
// The branch and bound scans every section at each node: fine for thousands of buffers,
// too slow beyond; larger inputs get the local search over orders instead.
inline constexpr std::size_t kBranchAndBoundMaxBuffers = 20000;
// ... and keeps every overlapping pair in memory: more pairs than this (16 bytes each)
// would cost more memory than the input deserves, so the local search runs instead.
inline constexpr std::size_t kBranchAndBoundMaxOverlaps = std::size_t{1} << 22;
// Share of the time limit spent asking for a packing at the lower bound before minimising
// from the best arena known: inputs that pack perfectly are found fast by the decision
// search, and the rest still get the remaining time.
inline constexpr double kBranchAndBoundDecisionShare = 0.5;
// Then it bisects the capacity; each question gets this share of the time left, so a
// capacity too hard to decide costs a bounded part and the bisection moves on (upwards).
inline constexpr double kBranchAndBoundBisectShare = 0.34;
// Above this many buffers the greedy runs only by-size best fit instead of all eight
// ordering x fit variants (each is a full placement, seconds at 10^6 buffers).
inline constexpr std::size_t kGreedyAllOrdersMaxBuffers = 100000;
// The greedy's time buckets keep one entry per (buffer, bucket touched); with the bucket
// width at the median lifetime most buffers touch 2-3. Inputs that would need more entries
// than this per buffer (many long lifetimes) use the overlap tree instead.
inline constexpr std::uint64_t kBucketEntriesPerBuffer = 8;
// The search's pseudo-random generator is seeded with this so a run is reproducible.
inline constexpr std::uint64_t kSearchSeed = 0x6c756d61;  // "luma"

static_assert((kTlsfBlockSize & (kTlsfBlockSize - 1)) == 0, "block size: power of two");
static_assert(kReplayRound % kTlsfBlockSize == 0, "replay sizes are whole TLSF blocks");
static_assert((kRmmAlignment & (kRmmAlignment - 1)) == 0, "alignment: power of two");

}  // namespace luma::core::planner
