// allocator_stats.cpp - what the allocator reports: statistics (live_stats.h keeps them on
// the hot path; the derived fields are computed here, when read), the cache's size, the
// largest free block, and snapshots of every segment and block (allocator_snapshot.h).
#include "allocator/allocator_impl.h"

#include <mutex>  // std::lock_guard

namespace luma::core {

BlockSnapshot CachingAllocator::Impl::block_snapshot(const Block* b) const noexcept {
  // Allocated means in the pointer map; an in-use block that is not is a pending free.
  BlockSnapshotState state = BlockSnapshotState::inactive;
  if (b->state == BlockState::in_use)
    state = live.find(b->addr) != nullptr ? BlockSnapshotState::active_allocated
                                          : BlockSnapshotState::active_pending_free;
  return {b->addr, b->size, state == BlockSnapshotState::inactive ? 0 : b->requested, state};
}

DeviceStats CachingAllocator::stats() const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  return impl_->view();
}

bool CachingAllocator::try_stats(DeviceStats* out, std::chrono::steady_clock::time_point deadline) const noexcept {
  if (!lock_until(impl_->mu, deadline)) return false;
  std::lock_guard<AllocatorLock> lock(impl_->mu, std::adopt_lock);
  *out = impl_->view();
  return true;
}

std::size_t CachingAllocator::cached_bytes() const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  return static_cast<std::size_t>(impl_->stats.reserved_bytes.all_current() - impl_->stats.allocated_bytes.all_current());
}

bool CachingAllocator::try_host_bytes(std::size_t* out, std::chrono::steady_clock::time_point deadline) const noexcept {
  if (!lock_until(impl_->mu, deadline)) return false;
  std::lock_guard<AllocatorLock> lock(impl_->mu, std::adopt_lock);
  const Impl& m = *impl_;
  std::size_t bytes =
      sizeof(Impl) + m.blocks.host_bytes() + m.segments.host_bytes() + m.live.host_bytes() + m.pending.host_bytes();
  for (const auto& e : m.expanses) bytes += e.capacity() * sizeof(Segment*);
  *out = bytes;
  return true;
}

std::size_t CachingAllocator::largest_free_block() const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  std::size_t largest = 0;
  impl_->segments.for_each([&largest](const Segment* s) {
    for (const Block* b = s->first; b != nullptr; b = b->next)
      if (b->state == BlockState::free) largest = std::max(largest, b->size);
  });
  return largest;
}

AllocatorSnapshot CachingAllocator::snapshot() const {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  AllocatorSnapshot out;
  out.reserve(impl_->segments.size());
  impl_->segments.for_each([&](const Segment* s) {
    if (s->expandable) {  // each run of mapped pages, as a segment of its own
      SegmentSnapshot* run = nullptr;
      for (const Block* b = s->first; b != nullptr; b = b->next) {
        if (b->state == BlockState::unmapped) {
          run = nullptr;
          continue;
        }
        if (run == nullptr) {
          run = &out.emplace_back();
          run->address = b->addr;
          run->pool = s->pool;
          run->expandable = true;
        }
        run->size += b->size;
        run->blocks.push_back(impl_->block_snapshot(b));
      }
      return;
    }
    SegmentSnapshot& seg = out.emplace_back();
    seg.address = s->base;
    seg.size = s->size;
    seg.pool = s->pool;
    for (const Block* b = s->first; b != nullptr; b = b->next) seg.blocks.push_back(impl_->block_snapshot(b));
  });
  return out;
}

}  // namespace luma::core
