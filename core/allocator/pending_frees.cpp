// pending_frees.cpp - PendingFrees (pending_frees.h) off the hot path: pending frees made
// reusable before growth, drained, dropped. Pushing, closing and polling stay in the header.
#include "allocator/pending_frees.h"

#include "allocator/allocator_impl.h"

namespace luma::core {

template <class Owner>
bool PendingFrees::reclaim(Pool p, Owner& owner) noexcept {
  const std::size_t i = pool_index(p);
  if (closed_blocks_[i] == 0) {
    if (open_.per_pool[i] == 0) return false;
    close(owner);                      // only the open epoch can provide: fence it now ...
    closed_.poll(finished(owner));     // ... and take it at once if its work is already done
    return true;
  }
  // Polls first (the backoff may have skipped the fence since it completed), then waits
  // rather than grow.
  if (closed_.poll(finished(owner)) == 0) {
    if (!closed_.wait_oldest(finished(owner))) return false;  // cannot wait now: grow instead
    closed_.poll(finished(owner));
  }
  poll_gap_ = 0;
  polls_to_skip_ = 0;
  return true;
}

template <class Owner>
bool PendingFrees::drain(Owner& owner) noexcept {
  close(owner);
  return closed_.drain(finished(owner));
}

void PendingFrees::drop() noexcept {
  closed_.drop([](Epoch&) noexcept {});
  closed_blocks_ = {};
  reset_open();
}

// The one owner (explicit instantiation names a private type without access checks).
template bool PendingFrees::reclaim(Pool, CachingAllocator::Impl&) noexcept;
template bool PendingFrees::drain(CachingAllocator::Impl&) noexcept;

}  // namespace luma::core
