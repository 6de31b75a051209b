// event_clock.h - the time stamp of each recorded event: CLOCK_MONOTONIC nanoseconds,
// read through the TSC where the CPU's TSC is invariant (one rdtsc and a multiply, against
// a vDSO clock_gettime that costs several times that inside a VM), else clock_gettime.
// The TSC rate is calibrated against CLOCK_MONOTONIC once, when recording starts.
// Must be cheap and never block, allocate or make a system call on the hot path: now() is
// inline so that the trace sink compiles it into its own on_event.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace luma::shim {

// Monotonic clock in ns through clock_gettime (the calibration's reference).
std::uint64_t monotonic_ns() noexcept;

class EventClock {
 public:
  // Chooses the source and calibrates (about kCalibrationNs of spinning, at most once).
  void start() noexcept;
  // CLOCK_MONOTONIC in ns (its TSC estimate when the TSC is used).
  std::uint64_t now() const noexcept {
#if defined(__x86_64__)
    if (tsc_) [[likely]] {
      std::uint64_t dt = __rdtsc() - tsc0_;
      if (static_cast<std::int64_t>(dt) < 0) dt = 0;  // another core's TSC a few cycles behind
      return ns0_ + static_cast<std::uint64_t>((static_cast<u128>(dt) * mult_) >> kShift);
    }
#endif
    return monotonic_ns();
  }
  bool uses_tsc() const noexcept { return tsc_; }

 private:
  using u128 = __uint128_t;  // the 64x64 multiply's full product
  static constexpr unsigned kShift = 24;
  bool tsc_ = false;
  std::uint64_t tsc0_ = 0;
  std::uint64_t ns0_ = 0;
  // ns = ns0 + ((tsc - tsc0) * mult) >> kShift
  std::uint64_t mult_ = 0;
};

}  // namespace luma::shim
