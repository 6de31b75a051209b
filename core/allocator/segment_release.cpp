// segment_release.cpp - segments given back to the device or forgotten: the wholly free
// ones before growth (least recently freed first, idle_segments.h), every free one at
// empty_cache and out of memory, all of them at release_all, and everything, without a
// device call, when the context is lost (drop_device_memory).
#include "allocator/allocator_impl.h"

namespace luma::core {

// Gives the wholly free segment s back to the device and forgets it; false when the
// device keeps it (it stays listed, as free as before).
bool CachingAllocator::Impl::release_idle(Segment* s) noexcept {
  if (!dev.release(reinterpret_cast<void*>(s->base), s->size)) return false;
  free_blocks.remove(s->first);
  blocks.put(s->first);
  drop_segment_stats(s);
  segments.remove(s);
  return true;
}

// Releases every wholly free segment, and every whole free page of the expandable
// segments; returns the bytes released.
std::size_t CachingAllocator::Impl::release_free_segments() noexcept {
  std::size_t released = 0;
  for (std::size_t p = 0; p < kPools; ++p) unmap_free(static_cast<Pool>(p), kAll, 0, 0);
  released += trim_pages();
  for (Pool p : {Pool::small, Pool::large}) {
    for (Segment* s = segments.idle(p).front(); s != nullptr;) {
      Segment* next = s->idle_next;
      const std::size_t size = s->size;
      if (release_idle(s)) released += size;
      s = next;
    }
  }
  return released;
}

// Releases every wholly free segment of pool p, then the other pool's, least recently
// freed first, until `want` bytes are released in all (AllocatorOptions::
// release_free_segments). Touches only the segments it releases (idle_segments.h).
void CachingAllocator::Impl::release_for_growth(Pool p, std::size_t want) noexcept {
  std::size_t released = 0;
  for (Segment* s = segments.idle(p).front(); s != nullptr;) {
    Segment* next = s->idle_next;
    const std::size_t size = s->size;
    if (release_idle(s)) released += size;
    s = next;
  }
  for (Segment* s = segments.idle(other(p)).front(); s != nullptr && released < want;) {
    Segment* next = s->idle_next;
    const std::size_t size = s->size;
    if (release_idle(s)) released += size;
    s = next;
  }
}

void CachingAllocator::Impl::drop_segment_stats(Segment* s) noexcept {
  stats.segment.sub(s->pool, 1);
  stats.reserved_bytes.sub(s->pool, s->size);
  ++stats.num_device_free;
  emit(EventKind::segment_release, s->base, s->size, 0);
}

std::size_t CachingAllocator::Impl::empty_cache() noexcept {
  pending.drain(*this);
  const std::size_t released = release_free_segments();
  ++stats.num_empty_cache;
  emit(EventKind::empty_cache, 0, released, 0);
  return released;
}

void CachingAllocator::Impl::release_all() noexcept {
  if (!pending.drain(*this)) return;  // work may still use pending blocks: release nothing
  segments.remove_if([this](Segment* s) {
    if (s->expandable) {
      if (!release_expanse(s)) return false;
    } else if (!dev.release(reinterpret_cast<void*>(s->base), s->size)) {
      return false;  // the device kept it, so do we
    }
    if (!s->expandable) ++stats.num_device_free;
    forget_segment(s);
    return true;
  });
}

// The device's memory is gone with its context: every segment and block is forgotten,
// no device call made, pending fences given back unchecked (their events went too).
void CachingAllocator::Impl::drop_device_memory() noexcept {
  pending.drop();
  segments.clear([this](Segment* s) {
    if (!s->expandable) ++segments_dropped;
    forget_segment(s);
  });
  for (std::size_t q = 0; q < kPools; ++q) stats.reserved_bytes.sub(static_cast<Pool>(q), pages.spare(static_cast<Pool>(q)));
  segments_dropped += pages.forget();
  ++stats.num_context_resets;
}

// Drops one segment and its blocks from every structure and statistic, as if each live
// block had been freed and the segment released (the caller counts the release; the
// segment table's remove_if or clear, which calls this, unlists it).
// Pending blocks must no longer be listed in an epoch that will complete them.
void CachingAllocator::Impl::forget_segment(Segment* s) noexcept {
  const Pool p = s->pool;
  if (s->own) --own_segments;
  if (s->expandable && s->mapped != 0) emit_mapped_pages_released(s);  // (release_expanse did)
  for (Block* b = s->first; b != nullptr;) {
    Block* next = b->next;
    if (b->state == BlockState::unmapped) unmapped_remove(b);
    if (b->state == BlockState::in_use) {
      LiveBlock lb;
      if (live.take(b->addr, &lb)) {  // allocated (else pending: its free was counted)
        stats.allocation.sub(p, 1);
        stats.allocated_bytes.sub(p, b->size);
        emit(EventKind::free_requested, b->addr, b->size, 0);
      }
      stats.active.sub(p, 1);
      stats.active_bytes.sub(p, b->size);
      stats.requested_bytes.sub(p, b->requested);
      emit(EventKind::free_completed, b->addr, b->size, 0);
    } else if (b->state == BlockState::free) {
      free_blocks.remove(b);
      if (b->is_split()) {
        stats.inactive_split.sub(p, 1);
        stats.inactive_split_bytes.sub(p, b->size);
      }
    }
    blocks.put(b);
    b = next;
  }
  stats.segment.sub(p, 1);
  stats.reserved_bytes.sub(p, s->held());
  if (!s->expandable) emit(EventKind::segment_release, s->base, s->size, 0);
  if (s->expandable) std::erase(expanses[pool_index(p)], s);
}

}  // namespace luma::core
