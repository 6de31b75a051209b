// segment_growth.cpp - a new segment: its size by the pool rules (segment_size_for), the
// device call, and the out-of-memory retry (drain the pending frees, release the cache, ask
// again). What is released before it: limit_pressure.cpp; expandable segments grow in
// expandable_growth.cpp instead.
#include "allocator/allocator_impl.h"

namespace luma::core {

std::size_t segment_size_for(const AllocatorOptions& options, std::size_t rounded) noexcept {
  std::size_t s = 0;
  if (pool_for(options, rounded) == Pool::small) {
    s = std::max(options.small_segment, rounded);
  } else if (rounded < options.min_large_alloc) {
    s = std::max(options.large_segment, rounded);
  } else {
    s = round_up(rounded, std::max<std::size_t>(options.large_round, 1));
  }
  s = std::max(s, options.min_segment);
  return round_up(s, std::bit_ceil(std::max<std::size_t>(options.alignment, 1)));
}

// Reserves a new segment for `rounded`, through the OOM retry; the segment's single
// free block is in the index on return. nullptr with *error = 0: out of memory (host
// or device); with *error != 0: the device's own error, which no retry can mend.
// own: a segment of exactly `rounded` for one block (allocate_own_segment).
Block* CachingAllocator::Impl::grow(Pool p, std::size_t rounded, int* error, bool own) noexcept {
  *error = 0;
  if (!own && expandable()) {
    bool refused = false;
    Block* b = grow_expandable(p, rounded, error, &refused);
    if (!refused) return b;
    *error = 0;  // no address space for an expanse: an ordinary segment instead
  }
  std::size_t preferred = own ? rounded : segment_size_for(opt, rounded);
  try {  // before the device call, so a host allocation failure changes nothing
    // The new first block's number is at most blocks.made() (a number not given out yet).
    segments.reserve_one(blocks.made());
  } catch (...) {
    return nullptr;
  }
  // The segment the pool rules ask for, else one of just the request's size: a 1 MiB+
  // request wants a 20 MiB segment, which a nearly full device may refuse where the
  // driver alone would still have served the request itself (min_segment still holds).
  // Only then is the cache released (it would have to be rebuilt), and both tried again.
  const std::size_t exact = own ? rounded : std::max(rounded, opt.min_segment);
  std::size_t size = preferred;
  auto reserve = [&]() {
    size = preferred;
    Reservation got = reserve_aligned(size);
    if (got.base == nullptr && got.error == 0 && exact < preferred) {
      size = exact;
      got = reserve_aligned(size);
    }
    return got;
  };
  preferred = release_before_growth(p, rounded, preferred, own);  // limit_pressure.cpp
  Reservation r = reserve();
  if (r.base == nullptr && r.error == 0 && opt.release_on_oom) {
    pending.drain(*this);
    release_free_segments();
    ++stats.num_alloc_retries;
    r = reserve();
  }
  if (r.base == nullptr) {
    *error = r.error;
    return nullptr;
  }
  Block* b = blocks.get();
  b->addr = reinterpret_cast<std::uintptr_t>(r.base);
  b->size = size;
  b->pool = p;
  Segment* s = segments.add(b->addr, size, p, b);
  s->own = own;
  own_segments += own ? 1 : 0;
  stats.segment.add(p, 1);
  stats.reserved_bytes.add(p, size);
  reserved_high_water = std::max(reserved_high_water, static_cast<std::size_t>(stats.reserved_bytes.all_current()));
  ++stats.num_device_alloc;
  emit(EventKind::segment_reserve, s->base, size, 0);
  b->requested = reinterpret_cast<std::uintptr_t>(s);  // see became_whole
  segments.became_idle(s);  // wholly free until take() cuts it
  free_blocks.insert(b);
  return b;
}

Reservation CachingAllocator::Impl::reserve_aligned(std::size_t size) noexcept {
  Reservation r = dev.reserve(size);
  if (r.base != nullptr && reinterpret_cast<std::uintptr_t>(r.base) % opt.alignment != 0) {
    // Breaks the device contract; treat as a refusal rather than hand out misaligned blocks.
    dev.release(r.base, size);
    return Reservation::out_of_memory();
  }
  return r;
}

void CachingAllocator::Impl::record_oom(std::size_t requested) noexcept {
  ++stats.num_ooms;
  emit(EventKind::oom, 0, 0, requested);
}

}  // namespace luma::core
