// simulation.h - `luma simulate`: a recorded allocation sequence replayed through luma's
// own CachingAllocator over a SimulatedDevice, with the settings a user gives, to see what
// luma would reserve without running the program again (docs/simulate.md).
//
// The free path (core/free_path) is the one libluma.so would have taken for the program
// the recording shows, decided by the same rule from the recording's facts, and changed at
// the op where a fact showed, as the library changes it at the call that showed it.
//
// What it measures: the peak of reserved bytes (what the device would have had to hold),
// the driver calls, and where the excess over the bytes the program held is at that peak
// (PeakAttribution). scan_limits tries memory limits on a grid: from which one up every
// limit serves the whole sequence (LimitScan).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "free_path/free_path.h"
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
  std::uint64_t fence_latency_ns = 0; // SimulatedDevice: when a recorded fence is done (fenced path)
  bool attribute = true;              // fill SimResult::at_peak (one snapshot per new peak)
  // The free path for the whole run (`--free-path`); none: the rule decides from the
  // sequence's facts as libluma.so would have (core/free_path).
  std::optional<FreePath> free_path;
  // --repeat: the recorded window replayed this many times in a row, as a step repeats
  // (SimResult::first and warm). Blocks live before the window began (the sequence's
  // window_start ops) stay live; each copy's blocks still live at its end are freed, in
  // allocation order, before the next copy starts. At least 1.
  unsigned repeat = 1;
  // If set, called after each op of the first copy is replayed (served, refused or
  // skipped), with its position in the sequence's ops and the bytes reserved then: a
  // timeline of reserved (`--svg`). It only observes; the replay is the same without it.
  std::function<void(std::size_t op, std::uint64_t reserved)> on_op;
};

// What one or more copies of the window cost (--repeat): its allocations, the driver
// calls of the allocator's memory (cuMemAlloc + cuMemCreate, cuMemFree + cuMemRelease,
// maps, unmaps), their estimated time (driver_costs.h) and the most reserved in them.
struct CopyFigures {
  unsigned copies = 0;
  std::uint64_t allocations = 0;
  std::uint64_t driver_allocations = 0;
  std::uint64_t driver_frees = 0;
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t driver_ns = 0;
  std::uint64_t peak_reserved = 0;
};

// One stretch of the replay on one free path: from op `from_op` on, and why.
struct PathSpan {
  std::uint64_t from_op = 0;
  FreePath path = FreePath::fenced;
  std::string why;  // the rule's reason, and where the recording showed it
};

// The free paths a replay of `sequence` takes under `options`, in op order (at least one).
// With free_sync other than event the rule does not apply: free_sync:none never fences,
// free_sync:device synchronizes at each free, so a freed block is reusable at once.
std::vector<PathSpan> free_paths(const SimSequence& sequence, const SimOptions& options);

struct SimResult {
  bool completed = true;          // every allocation was served
  std::uint64_t failed_op = 0;    // !completed: the refused allocation's position in ops
  std::uint64_t failed_bytes = 0; //   and its bytes
  std::uint64_t allocations = 0;  // allocations served
  std::uint64_t peak_reserved = 0;  // also counts a growth an allocation made before it was refused
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
  std::vector<PathSpan> paths;            // free_paths(): the free path of each stretch
  std::uint64_t driver_ns = 0;            // the estimated time of every driver call (driver_costs.h)
  // The first copy of the window, and the warm ones (2..repeat; copies 0 with repeat 1).
  CopyFigures first;
  CopyFigures warm;
};

// Replays `sequence` (a free of an allocation that was refused is skipped; the replay
// stops at the first refusal). Throws std::invalid_argument for settings a simulation
// cannot honour (memory_fraction: no device size; caching off: no allocator).
SimResult simulate(const SimSequence& sequence, const SimOptions& options);

// What memory limits a run completes under, found by trying each limit of a grid rather
// than by bisection: completing is not monotone in the limit (a larger limit places
// differently, and its fragmentation can end the run where a smaller one's did not), so a
// bisection's answer can be followed by a failure at a larger limit.
struct LimitScan {
  struct Point {
    std::uint64_t limit = 0;
    bool completes = false;
    CopyFigures warm;  // with SimOptions::repeat > 1: the warm copies under this limit
  };
  std::vector<Point> points;  // every limit tried, ascending: peak live, then `step` apart, then `top`
  std::uint64_t step = 0;
  // X, the bound a user can plan with: the least limit tried from which every larger limit
  // tried completes, and every limit above `top` too when top_is_unlimited. 0: none (the
  // run fails at top).
  std::uint64_t bound = 0;
  std::uint64_t least = 0;           // the least limit tried that completes (<= bound); 0: none
  std::uint64_t unlimited_peak = 0;  // peak reserved without a limit
  // The largest limit tried. When top_is_unlimited, every limit from it up gives the very
  // run without a limit, which completes: with pressure_divisor d >= 2, tight placement
  // starts when less than limit / d is left, which never happens while reserved stays
  // below limit x (d - 1) / d, so from unlimited_peak x d / (d - 1) up nothing differs
  // (with d = 0, from unlimited_peak up). With d = 1 (tight from the start) no such limit
  // is known: top is 2 x unlimited_peak and nothing is claimed above it.
  std::uint64_t top = 0;
  bool top_is_unlimited = false;
  unsigned runs = 0;  // simulations made
};

// Tries peak live, every `step` x peak live above it, and `top` (LimitScan). A sequence
// with no live bytes has nothing to scan (bound = least = 0, no points). `on_simulation`,
// if set, is called after each simulation (a progress bar's count).
LimitScan scan_limits(const SimSequence& sequence, const SimOptions& options, double step = 0.005,
                      const std::function<void()>& on_simulation = {});

}  // namespace luma::core
