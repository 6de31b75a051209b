// event_clock.h - the time stamp of each recorded event: CLOCK_MONOTONIC nanoseconds,
// read through the TSC where the CPU's TSC is invariant (one rdtsc and a multiply, against
// a vDSO clock_gettime that costs several times that inside a VM), else clock_gettime.
// The TSC rate is calibrated against CLOCK_MONOTONIC once, when recording starts.
// Must be cheap and never block, allocate or make a system call on the hot path.
#pragma once

#include <cstdint>

namespace luma::shim {

class EventClock {
 public:
  // Chooses the source and calibrates (about kCalibrationNs of spinning, at most once).
  void start() noexcept;
  // CLOCK_MONOTONIC in ns (its TSC estimate when the TSC is used).
  std::uint64_t now() const noexcept;
  bool uses_tsc() const noexcept { return tsc_; }

 private:
  bool tsc_ = false;
  std::uint64_t tsc0_ = 0;
  std::uint64_t ns0_ = 0;
  // ns = ns0 + ((tsc - tsc0) * mult) >> kShift
  std::uint64_t mult_ = 0;
};

// Monotonic clock in ns through clock_gettime (the calibration's reference).
std::uint64_t monotonic_ns() noexcept;

}  // namespace luma::shim
