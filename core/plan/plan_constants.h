// plan_constants.h - the numbers of plan files, plan replay and periodic planning, each with
// its reason, in one place (docs/plan-replay.md describes the behaviour they bound).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/constants.h"

namespace luma::core::plan {

// The plan file format this luma writes and reads ("version" in the file). A reader
// refuses other versions by name rather than guessing at fields that may mean otherwise.
inline constexpr std::uint64_t kFormatVersion = 1;
inline constexpr const char* kFormatName = "luma-plan";

// Every block a replay hands out is a device pointer the program may use as cudaMalloc's
// result, which is 256-byte aligned; so a plan's offsets (and the arena base) must be too.
inline constexpr std::uint64_t kMinReplayAlignment = kCudaMallocAlignment;
// An alignment above this in a plan file is a typo, not a requirement (the largest page
// size of any GPU is 2 MiB; 1 GiB leaves room and keeps arithmetic far from overflow).
inline constexpr std::uint64_t kMaxPlanAlignment = std::uint64_t{1} << 30;

// The reader loads the whole file and parses it into a tree (about 10x the file in host
// memory): a plan of 10^6 allocations is ~150 MB of JSON, far below this; anything bigger
// is refused with a message instead of exhausting the host.
inline constexpr std::uint64_t kMaxPlanFileBytes = std::uint64_t{1} << 30;
// Device ordinals: the trace format carries 16-bit ones; more devices than this in one
// process does not exist.
inline constexpr std::int64_t kMaxPlanDevice = 65535;
// Offsets, sizes and arenas above 2^62 B cannot be device memory (no GPU has 4 EiB) and
// would let offset + size overflow; the caching allocator refuses such requests too.
inline constexpr std::uint64_t kMaxPlanBytes = std::uint64_t{1} << 62;

// Periodic planning: the period search compares (allocation, allocation + P) pairs from the
// end of the trace for each candidate P. Real loops stop at the first mismatch for every
// wrong P, so the search costs about N plus the period squared; the budget only bounds
// adversarial inputs (about a second of work), after which the search says so.
inline constexpr std::uint64_t kPeriodSearchBudget = std::uint64_t{1} << 28;
// A period must repeat at least this many times, to the end of the trace, to be trusted.
inline constexpr std::uint64_t kMinPeriodRepeats = 2;
// Iterations of the period unrolled beyond the warm-up when a periodic plan is checked:
// buffers live at most one period, so only neighbouring iterations interact, and three
// iterations contain every kind of pair (warm-up/first, first/second, second/third).
inline constexpr std::uint64_t kPeriodicCheckIterations = 3;

// Replay of a fence-aware plan records the fence of a burst of frees L allocations (the
// plan's slack) before their bytes are needed, so that it has that long to complete. While
// the GPU keeps up (the last fence was done at the next allocation), it records it this
// many allocations ahead instead, which lets one fence cover several bursts: on the
// two-stream loop, allocating only, one fence per step instead of three (docs/plan-replay.md).
inline constexpr std::uint64_t kKeptUpFenceLead = 1;

}  // namespace luma::core::plan
