// own_segments.cpp - the program's own segments (CachingAllocator::allocate_own_segment):
// a segment of exactly one block, given back to the device at that block's free, with no
// fence, as the program's own cudaFree would.
#include "allocator/allocator_impl.h"

namespace luma::core {

// The own segment (allocate_own_segment) that starts at addr, or nullptr.
[[gnu::noinline, gnu::cold]] Segment* CachingAllocator::Impl::own_segment_at(std::uintptr_t addr) const noexcept {
  Segment* s = segments.at(addr);
  return s != nullptr && s->own ? s : nullptr;
}

// The segment s, whose one block b is free and in no index, went back to the device:
// forget both.
[[gnu::noinline, gnu::cold]] void CachingAllocator::Impl::forget_released_own(Segment* s, Block* b) noexcept {
  blocks.put(b);
  drop_segment_stats(s);
  --own_segments;
  segments.remove(s);
}

// free() of an own segment's block: the driver's free is the program's own, and
// synchronizes as cudaFree does, so the segment goes back at once, with no fence. False
// when the device keeps it (a capture underway): from then on it is an ordinary segment,
// its block fenced like any free, and released by empty_cache.
[[gnu::noinline, gnu::cold]] bool CachingAllocator::Impl::free_own_now(Block* b, Pool p) noexcept {
  Segment* s = own_segment_at(b->addr);
  if (s == nullptr) return false;
  if (!dev.release(reinterpret_cast<void*>(s->base), s->size)) {
    s->own = false;
    --own_segments;
    return false;
  }
  stats.active.sub(p, 1);
  stats.active_bytes.sub(p, b->size);
  stats.requested_bytes.sub(p, b->requested);
  emit(EventKind::free_completed, b->addr, b->size, 0);
  forget_released_own(s, b);
  return true;
}

}  // namespace luma::core
