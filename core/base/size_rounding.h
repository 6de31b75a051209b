// size_rounding.h - what a request occupies and which pool it goes to, as the caching
// allocator decides (and the out-of-memory report and `luma simulate` explain): the
// request rounded up to the alignment, saturating instead of wrapping; up to small_size
// the small pool, above it the large one.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <limits>

#include "base/constants.h"
#include "base/pool.h"

namespace luma::core {

// The rounded size a request of `bytes` occupies (0 -> 0).
inline std::size_t round_size(const AllocatorOptions& options, std::size_t bytes) noexcept {
  const std::size_t a = std::bit_ceil(std::max<std::size_t>(options.alignment, 1));
  if (bytes > std::numeric_limits<std::size_t>::max() - (a - 1)) return ~(a - 1);  // saturate
  return (bytes + a - 1) & ~(a - 1);
}

// Which pool a rounded size goes to.
inline Pool pool_for(const AllocatorOptions& options, std::size_t rounded) noexcept {
  return rounded <= options.small_size ? Pool::small : Pool::large;
}

}  // namespace luma::core
