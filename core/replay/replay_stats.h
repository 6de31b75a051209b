// replay_stats.h - what plan replay did on one device, for the statistics at exit: whether
// the device was served from its plan, how far it got, why it stopped (the first
// divergence), and the real allocations made (1 per device when the run follows its plan).
// Plain data; replay_stats_format.* renders it as text and JSON.
#pragma once

#include <cstdint>
#include <string>

namespace luma::core {

enum class DivergenceReason : std::uint8_t {
  none = 0,
  size_mismatch,      // the program asked for other bytes than the plan has at that number
  beyond_plan,        // more allocations than a non-periodic plan holds
  live_conflict,      // the planned bytes are still held by an earlier block (a late free)
  arena_unavailable,  // the device refused the arena (or returned a misaligned one)
  incompatible_plan,  // the plan cannot be served as it is (alignment below the allocator's,
                      // an allocation outside the arena, a periodic layout that does not fit)
  context_lost,       // the device's context was destroyed, the arena with it
};

// The allocation at which a device stopped following its plan, and the facts of why.
struct Divergence {
  DivergenceReason reason = DivergenceReason::none;
  std::uint64_t sequence = 0;              // the allocation that did not follow (0-based)
  std::uint64_t requested = 0;             // bytes the program asked for there
  std::uint64_t planned_requested = 0;     // size_mismatch: bytes the plan has there
  std::uint64_t conflicting_sequence = 0;  // live_conflict: the allocation still holding them
  std::uint64_t planned_allocations = 0;   // beyond_plan: allocations the plan holds
  std::uint64_t arena_bytes = 0;           // arena_unavailable: the reservation refused ...
  int device_error = 0;                    // ... with the device's error (0: out of memory)
  std::uint64_t plan_alignment = 0;        // incompatible_plan: the plan's alignment ...
  std::uint64_t allocator_alignment = 0;   // ... and the one the allocator promises
};

struct ReplayStats {
  int device = 0;
  std::uint64_t planned_allocations = 0;  // entries in the device's plan
  std::uint64_t warmup = 0;               // periodic plans: W ...
  std::uint64_t period = 0;               // ... and P (0: not periodic)
  std::uint64_t arena_bytes = 0;          // the arena the plan asks for
  bool arena_held = false;                // the arena is reserved now
  std::uint64_t served = 0;               // allocations served from the plan (in order, so
                                          // also the sequence number it got to)
  std::uint64_t iterations = 0;           // periodic: full periods served after the warm-up
  std::uint64_t divergences = 0;          // 0 or 1: after one the cache serves the device
  Divergence first_divergence;
  std::uint64_t arena_reservations = 0;   // real allocations made for the arena
  std::uint64_t real_allocations = 0;     // arena + the caching allocator's segments
  std::uint64_t cache_allocations = 0;    // allocations the caching allocator served
  std::uint64_t fence_waits = 0;          // planned reuses that waited for a pending free

  bool followed() const noexcept { return divergences == 0; }
};

// The process-level outcome of LUMA_PLAN: which plan, and whether it was taken at all.
struct ReplaySummary {
  std::string plan;     // the plan file
  bool accepted = false;
  std::string refused;  // one line, when not accepted (fingerprint, unreadable file)
};

// "size_mismatch", ...: the JSON name of a reason.
const char* divergence_reason_name(DivergenceReason reason) noexcept;

}  // namespace luma::core
