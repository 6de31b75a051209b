// fence_queue.h - the fence protocol of core/base/device.h, written once for both allocators
// that reuse freed device memory (the caching allocator: batches are epochs, epoch.h; plan
// replay: batches are chains of planned slots): a batch of frees is closed with one fence
// recorded after all of them, queued oldest first, polled (PyTorch's process_events),
// waited for oldest first when its memory is needed, drained, or dropped with its context.
//
// A batch is "completed" (its blocks become reusable) only through the caller's callback,
// and only after its fence is done: the device answered kNoFence, fence_done() said so,
// or fence_wait() returned true. A device may refuse to wait (fence_wait() returns false:
// a stream capture is underway on the calling thread, where a blocking wait would
// invalidate the capture or deadlock): the batch then stays queued, not done, and the
// caller must find other memory (the caching allocator grows, replay diverges).
//
// Storage is a ring of batches that grows only through grow() (or inside close(), where a
// host allocation failure is handled), so polling and waiting never allocate. Every fence
// token the queue holds is given back exactly once: when its batch completes, by drop(),
// or by the destructor. Not thread-safe: the owner's lock is held around every call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/device.h"

namespace luma::core {

// Batch: copyable, with a member `Fence fence` (kNoFence while the batch is open).
template <class Batch>
class FenceQueue {
 public:
  // `waits` counts every fence wait the queue makes (a statistic of the owner's).
  FenceQueue(Device& device, std::uint64_t& waits) noexcept : dev_(device), waits_(waits) {}
  ~FenceQueue() { drop([](Batch&) noexcept {}); }
  FenceQueue(const FenceQueue&) = delete;
  FenceQueue& operator=(const FenceQueue&) = delete;

  // How close() disposed of a batch.
  enum class Closed : std::uint8_t {
    completed,  // kNoFence, or no room to queue it and the wait succeeded: completed now
    queued,     // fenced and queued: completed later by poll / wait_oldest / drain
    stranded,   // no host memory to queue it and the device cannot wait now: its fence is
                // given back and its blocks must never be reused (the only safe choice)
  };

  // Closes `batch` with one fence recorded now, after every free in it. Recording later
  // than a free is safe: the fence covers at least the work issued before the free.
  // (always_inline, like poll: the caching allocator closes epochs on its hot path, where
  // a call measured as more instructions per alloc+free pair than the code it replaced.)
  template <class Complete>
  [[gnu::always_inline]] Closed close(Batch& batch, Complete&& complete) noexcept {
    batch.fence = dev_.record_fence();
    if (batch.fence == kNoFence) {
      complete(batch);
      return Closed::completed;
    }
    if (full()) {
      try {
        grow();
      } catch (...) {  // no host memory to queue it: wait now, which is always safe
        if (!dev_.fence_wait(batch.fence)) {
          dev_.fence_release(batch.fence);
          batch.fence = kNoFence;
          return Closed::stranded;
        }
        ++waits_;
        dev_.fence_release(batch.fence);
        batch.fence = kNoFence;
        complete(batch);
        return Closed::completed;
      }
    }
    ring_[(head_ + count_++) & (capacity_ - 1)] = batch;
    return Closed::queued;
  }

  // PyTorch's process_events: completes the oldest batches whose fences are done, stopping
  // at the first that is not (later ones are later in time too). Returns how many.
  template <class Complete>
  [[gnu::always_inline]] std::size_t poll(Complete&& complete) noexcept {
    std::size_t n = 0;
    while (count_ != 0 && dev_.fence_done(oldest().fence)) {
      finish_oldest(complete);
      ++n;
    }
    return n;
  }

  // Waits for the oldest fence and completes its batch. False, and nothing changed, when
  // the queue is empty or the device cannot wait now.
  template <class Complete>
  bool wait_oldest(Complete&& complete) noexcept {
    if (count_ == 0 || !dev_.fence_wait(oldest().fence)) return false;
    ++waits_;
    finish_oldest(complete);
    return true;
  }

  // Every queued batch completed: polls, then waits oldest first. False when the device
  // refused a wait (the rest stays queued, not done).
  template <class Complete>
  bool drain(Complete&& complete) noexcept {
    poll(complete);
    while (count_ != 0)
      if (!wait_oldest(complete)) return false;
    return true;
  }

  // The memory went with its context: every token given back unchecked (its events went
  // too), each batch handed to `forget`, oldest first; the queue is empty after.
  template <class Forget>
  void drop(Forget&& forget) noexcept {
    while (count_ != 0) {
      Batch& b = oldest();
      dev_.fence_release(b.fence);
      forget(b);
      pop();
    }
  }

  // Asked at every allocation of the caching allocator: a compare with a kept capacity (a
  // power of two, so that positions wrap with a mask, not a division).
  bool full() const noexcept { return count_ == capacity_; }
  std::size_t host_bytes() const noexcept { return ring_.capacity() * sizeof(Batch); }  // the ring
  void grow() {  // may throw std::bad_alloc; nothing changes then
    std::vector<Batch> bigger(std::max<std::size_t>(16, capacity_ * 2));
    for (std::size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) & (capacity_ - 1)];
    ring_.swap(bigger);
    capacity_ = ring_.size();
    head_ = 0;
  }
  std::size_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  const Batch& at(std::size_t i) const noexcept { return ring_[(head_ + i) & (capacity_ - 1)]; }  // 0: oldest

 private:
  Batch& oldest() noexcept { return ring_[head_]; }
  void pop() noexcept {
    head_ = (head_ + 1) & (capacity_ - 1);
    --count_;
  }
  template <class Complete>
  void finish_oldest(Complete& complete) noexcept {
    Batch& b = oldest();
    dev_.fence_release(b.fence);
    complete(b);  // before pop: b stays in the ring's storage until then
    pop();
  }

  Device& dev_;
  std::uint64_t& waits_;
  std::vector<Batch> ring_;
  std::size_t capacity_ = 0;  // ring_.size(): 0 or a power of two
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

}  // namespace luma::core
