// simulation.h - `luma simulate`: a recorded allocation sequence replayed through luma's
// own CachingAllocator over a SimulatedDevice, with the settings a user gives, to see what
// luma would reserve without running the program again (docs/simulate.md).
//
// What it measures: the peak of reserved bytes (what the device would have had to hold),
// the driver calls, and where the excess over the bytes the program held is at that peak
// (PeakAttribution). find_min_limit bisects the smallest memory_limit under which the
// whole sequence is served.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "settings/config.h"
#include "simulate/sim_sequence.h"

namespace luma::core {

// Where every reserved byte is at the peak of reserved: the first moment reserved reached
// its maximum, right after the allocation that made the device grow the last time. The
// fields from live_requested to free_fitting add up to `reserved`.
struct PeakAttribution {
  std::uint64_t op = 0;          // the allocation's position in the sequence's ops
  std::uint64_t allocation = 0;  // its number among allocations
  std::uint64_t request = 0;     // the bytes it asked for
  std::uint64_t rounded = 0;     // its rounded size
  std::uint64_t reserved = 0;
  // Held by the program: the bytes it asked for.
  std::uint64_t live_requested = 0;
  // Live blocks: rounded size - requested (the rounding rule).
  std::uint64_t rounding = 0;
  // Live blocks: block - rounded size, a rest too small to split off (min_split) or a block
  // a rule kept whole (an oversize block, max_split_size).
  std::uint64_t unsplit = 0;
  // Freed by the program, waiting for their fence.
  std::uint64_t pending = 0;
  // Free: the rest of the segment just reserved for this allocation (segment sizing).
  std::uint64_t new_segment_rest = 0;
  // Free, in the request's pool, smaller than it: pieces of segments that hold live or
  // pending blocks (split remainders), and wholly free segments.
  std::uint64_t free_pieces_too_small = 0;
  std::uint64_t free_segments_too_small = 0;
  // Free in the other pool (requests never cross pools).
  std::uint64_t free_other_pool = 0;
  // Free, in the request's pool and large enough, yet not taken (max_split_size's rules).
  std::uint64_t free_fitting = 0;
  // The run's peak live bytes minus live_requested: the program held less at this moment
  // than at its own peak (reserved - peak live = the categories above minus this).
  std::uint64_t live_below_peak = 0;
};

struct SimOptions {
  Settings settings;                  // allocator options, free_sync, memory_limit (0: none)
  std::uint64_t fence_latency_ns = 0; // SimulatedDevice: when a recorded fence is done
  bool attribute = true;              // fill SimResult::at_peak (one snapshot per new peak)
};

struct SimResult {
  bool completed = true;          // every allocation was served
  std::uint64_t failed_op = 0;    // !completed: the refused allocation's position in ops
  std::uint64_t failed_bytes = 0; //   and its bytes
  std::uint64_t allocations = 0;  // allocations served
  std::uint64_t peak_reserved = 0;
  std::uint64_t reserves = 0;     // driver allocations (segments reserved)
  std::uint64_t releases = 0;     // driver frees
  std::uint64_t fences = 0;       // fences recorded (0 with latency 0: done at once)
  std::uint64_t fence_waits = 0;  // waits for a fence not done yet, and the stall
  std::uint64_t fence_wait_ns = 0;
  std::uint64_t alloc_retries = 0;  // cache released and the reservation retried
  bool attributed = false;
  PeakAttribution at_peak;
  // !completed: the same view of the moment the allocation was refused (its request is
  // the refused one; nothing was reserved for it, so new_segment_rest is 0).
  PeakAttribution at_failure;
  std::vector<std::string> check_errors;  // the allocator's invariant check at the end
};

// Replays `sequence` (a free of an allocation that was refused is skipped; the replay
// stops at the first refusal). Throws std::invalid_argument for settings a simulation
// cannot honour (memory_fraction: no device size; caching off: no allocator).
SimResult simulate(const SimSequence& sequence, const SimOptions& options);

struct MinLimit {
  std::uint64_t completes = 0;  // the smallest memory_limit found under which it completes
  std::uint64_t fails = 0;      // the largest found under which it does not (0: none tried)
  unsigned runs = 0;            // simulations made
};

// Bisection between the sequence's peak live bytes (no limit below can complete) and the
// peak reserved without a limit (which completes), until the two are within
// `precision` x peak live of each other. A limit is "completing" when every allocation is
// served; the allocator is not monotone in the limit in general, so this is the boundary
// the bisection finds, not a proof that no smaller limit completes.
MinLimit find_min_limit(const SimSequence& sequence, const SimOptions& options, double precision = 0.001);

}  // namespace luma::core
