// limit_pressure.cpp - what growth gives back first. Near the device's memory limit
// (Device::headroom: less than limit / pressure_divisor left) placement turns tight: every
// wholly free segment is released before a new one, a large request gets a segment of its
// own size, and find_free (caching_allocator.cpp) takes no block much bigger than the
// request. Elsewhere, growth above the high-water mark of reserved bytes first releases
// enough free segments that it does not raise it. The policy and its measurements:
// docs/placement.md; the option: AllocatorOptions::pressure_divisor.
#include "allocator/allocator_impl.h"

namespace luma::core {

bool CachingAllocator::Impl::near_limit() const noexcept {
  if (opt.pressure_divisor == 0) return false;
  const Device::Headroom room = dev.headroom();
  return room.left < room.limit / opt.pressure_divisor;
}

// Before a new segment of `preferred` bytes for a request of `rounded` in pool p: near the
// limit, release every free segment, and ask for a segment of the request's own size;
// otherwise, above the high-water mark, release enough free segments (and all of this
// pool's) that the new one does not raise it. Returns the size to ask for.
std::size_t CachingAllocator::Impl::release_before_growth(Pool p, std::size_t rounded, std::size_t preferred,
                                                          bool own) noexcept {
  pressure = near_limit();
  if (pressure) {
    release_free_segments();
    if (p == Pool::large && !own) preferred = std::max(round_up(rounded, opt.large_round), opt.min_segment);
  } else if (opt.release_free_segments) {
    const auto reserved = static_cast<std::size_t>(stats.reserved_bytes.all_current());
    if (reserved + preferred > reserved_high_water) release_for_growth(p, reserved + preferred - reserved_high_water);
  }
  return preferred;
}

}  // namespace luma::core
