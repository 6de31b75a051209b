// pending_frees.cpp - frees that wait on fences (epoch.h, fence_queue.h), made reusable
// on demand: before the allocator grows, and all of them for empty_cache, the
// out-of-memory path and release_all. Polling at each allocation is the hot path's
// (caching_allocator.cpp, poll_fences).
#include "allocator/allocator_impl.h"

namespace luma::core {

// Pending blocks of pool p exist: make some reusable, cheapest way first. Returns false
// when there are none left to wait for.
bool CachingAllocator::Impl::reclaim_pending(Pool p) noexcept {
  const std::size_t i = pool_index(p);
  if (closed_blocks[i] == 0) {
    if (open_epoch.per_pool[i] == 0) return false;
    close_epoch();     // only the open epoch can provide: fence it now ...
    process_events();  // ... and take it at once if its work is already done
    return true;
  }
  // Polls first (the backoff may have skipped the fence since it completed), then waits
  // rather than grow.
  if (closed.poll(finished()) == 0) {
    if (!closed.wait_oldest(finished())) return false;  // cannot wait now: grow instead
    process_events();
  }
  poll_gap = 0;
  polls_to_skip = 0;
  return true;
}

// Every pending free made reusable: for empty_cache, the OOM path and release_all. False
// when the device cannot wait now: some stay pending.
bool CachingAllocator::Impl::drain_pending() noexcept {
  close_epoch();
  return closed.drain(finished());
}

}  // namespace luma::core
