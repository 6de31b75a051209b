// lifetime.h - the planner's neutral input: one buffer that lives over [lower, upper).
// Every input format (planner CSV, RMM log, luma trace) is turned into these by a reader,
// so the strategies never know where their input came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace luma::core {

struct Lifetime {
  std::string id;              // the input's name for the buffer (CSV id, or a sequence number)
  std::uint64_t lower = 0;     // first time the buffer is live
  std::uint64_t upper = 0;     // first time it is no longer live: the interval is half-open
  std::uint64_t size = 0;      // bytes
  std::uint64_t alignment = 1; // its offset must be a multiple of this (a power of two)
  int device = 0;              // plans are made per device
};

// Two buffers conflict when some time is inside both half-open intervals.
inline bool lifetimes_overlap(const Lifetime& a, const Lifetime& b) noexcept {
  return a.lower < b.upper && b.lower < a.upper;
}

}  // namespace luma::core
