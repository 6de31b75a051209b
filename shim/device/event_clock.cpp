// event_clock.cpp - see event_clock.h.
#include "device/event_clock.h"

#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace luma::shim {
namespace {

// 2 ms against clock_gettime's ~50 ns resolution in a VM: a rate error of ~1e-5 (36 ms
// over an hour), far below what the viewers show; paid once, only when tracing.
constexpr std::uint64_t kCalibrationNs = 2'000'000;
using u128 = __uint128_t;  // the 64x64 multiply's full product

#if defined(__x86_64__)
// CPUID 0x80000007 EDX bit 8: the TSC ticks at a constant rate in every P- and C-state and
// is synchronised across cores (what Linux calls constant_tsc + nonstop_tsc).
bool invariant_tsc() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000, nullptr) < 0x80000007) return false;
  __cpuid(0x80000007, a, b, c, d);
  return (d & (1u << 8)) != 0;
}
#endif

}  // namespace

std::uint64_t monotonic_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(t.tv_nsec);
}

void EventClock::start() noexcept {
  tsc_ = false;
#if defined(__x86_64__)
  if (!invariant_tsc()) return;
  const std::uint64_t n0 = monotonic_ns();
  const std::uint64_t t0 = __rdtsc();
  std::uint64_t n1 = n0, t1 = t0;
  while (n1 - n0 < kCalibrationNs) {
    n1 = monotonic_ns();
    t1 = __rdtsc();
  }
  if (t1 <= t0) return;
  const u128 m = (static_cast<u128>(n1 - n0) << kShift) / (t1 - t0);
  if (m == 0 || m > UINT64_MAX) return;
  mult_ = static_cast<std::uint64_t>(m);
  tsc0_ = t1;
  ns0_ = n1;
  tsc_ = true;
#endif
}

}  // namespace luma::shim
