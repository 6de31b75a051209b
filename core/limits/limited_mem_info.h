// limited_mem_info.h - what cuMemGetInfo reports under a memory limit: the limit as the
// total and what is left under it as free. Pure arithmetic, so every edge is tested
// (tests/core/limited_mem_info_test.cpp): HAMi-core's issues list free going negative,
// wrapping around to a huge number, and exceeding what the device really has free; none
// of these can come out of this function.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>

namespace luma::core {

struct MemInfoInput {
  std::size_t real_free = 0;   // the driver's answer
  std::size_t real_total = 0;  // the driver's answer
  std::size_t cached = 0;      // bytes luma holds but the program does not (0: not reported)
  bool limited = false;        // a memory limit applies to this device
  std::size_t limit = 0;       // the limit (when limited)
  std::size_t used = 0;        // bytes held under the limit: the process's, or the group's
};

struct MemInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

namespace mem_info_detail {
inline std::size_t add_saturated(std::size_t a, std::size_t b) noexcept {
  return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max()
                                                         : a + b;
}
inline std::size_t sub_saturated(std::size_t a, std::size_t b) noexcept { return a > b ? a - b : 0; }
}  // namespace mem_info_detail

// total = min(limit, real total); free = min(real free + cached, limit - used + cached,
// total): never negative, never wrapped, never above total. The cached bytes count as
// free both ways because the program gets them from luma without a driver call and
// without a new reservation. Without a limit: today's answer (real free + cached, at most
// the real total).
inline MemInfo limited_mem_info(const MemInfoInput& in) noexcept {
  using namespace mem_info_detail;
  MemInfo out;
  out.total = in.limited ? std::min(in.limit, in.real_total) : in.real_total;
  // Real free + cached: never above the device's total (a driver answering free > total
  // is passed on as total, not trusted).
  std::size_t free = std::min(add_saturated(in.real_free, in.cached), in.real_total);
  if (in.limited) free = std::min(free, add_saturated(sub_saturated(in.limit, in.used), in.cached));
  out.free = std::min(free, out.total);
  return out;
}

}  // namespace luma::core
