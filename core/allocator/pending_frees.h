// pending_frees.h - the caching allocator's frees that wait on fences (epoch.h,
// fence_queue.h), and the one invariant it owns: every pending block is listed in exactly
// one epoch, the open one unfenced and the closed ones fenced, oldest first, and
// closed_blocks() is the closed epochs' per-pool sum.
//
// With a batched-fence device a free only appends the block to the open epoch (no device
// call). The epoch is closed with one record_fence() when an allocation finds nothing else
// that fits, when it reaches epoch_max_blocks / _bytes, or by empty_cache / the OOM path /
// release_all. Closed epochs wait in the fence queue, polled oldest first at each allocate
// (PyTorch's process_events, backing off while the oldest fence stays not done:
// fence_poll_max_gap) and waited on, oldest first, before the allocator grows; when the
// device cannot wait now (device.h) the allocator grows instead. A fence recorded after a
// free covers at least the work issued before it, so reuse stays safe; kNoFence frees the
// epoch at once. per_free devices are the same with a one-block epoch; none devices skip it.
//
// A done epoch's blocks are the owner's to free: calls that may complete one take the
// owner (CachingAllocator::Impl) and call its complete_epoch directly (no indirect call).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "allocator/epoch.h"
#include "allocator/fence_queue.h"
#include "base/constants.h"
#include "base/device.h"

namespace luma::core {

class PendingFrees {
 public:
  // `waits` counts every fence wait (the owner's statistic).
  PendingFrees(Device& dev, FenceMode mode, const AllocatorOptions& opt, std::uint64_t& waits) noexcept
      : dev_(dev), mode_(mode), opt_max_blocks_(opt.epoch_max_blocks), max_bytes_(opt.epoch_max_bytes),
        poll_max_gap_(opt.fence_poll_max_gap), closed_(dev, waits) {}

  // A freed block joins the open epoch; true when that epoch is now due to close (a
  // per_free device, or epoch_max_blocks / _bytes reached): the caller calls close().
  [[gnu::always_inline]] bool push(Block* b, Pool p, std::size_t size) noexcept {
    open_.push(b, p, size);
    return mode_ == FenceMode::per_free || open_.count >= max_blocks_ || open_.bytes >= max_bytes_;
  }

  // Closes the open epoch with one fence recorded now, after every free in it. kNoFence:
  // its blocks are free at once. Needs room in the queue (reserve, or the queue's own
  // grow); without it, waits for the fence instead of queueing it (fence_queue.h).
  template <class Owner>
  [[gnu::always_inline]] void close(Owner& owner) noexcept {
    if (open_.empty()) return;
    using Closed = FenceQueue<Epoch>::Closed;
    if (closed_.close(open_, [&owner](Epoch& e) noexcept { owner.complete_epoch(e); }) == Closed::queued)
      for (std::size_t p = 0; p < kPools; ++p) closed_blocks_[p] += open_.per_pool[p];
    // (Closed::stranded: its blocks stay pending for good, never reused: fence_queue.h.)
    reset_open();
    if (mode_ == FenceMode::batched) max_blocks_ = epoch_blocks(dev_.fence_batch_blocks());
  }

  bool any_closed() const noexcept { return !closed_.empty(); }

  // process_events at the start of an allocation, with backoff (constants.h,
  // fence_poll_max_gap): after a not-done answer the next poll_gap allocations skip it.
  // Out of line, as it was before this type: inlined, it grew allocate by a third of a KiB.
  template <class Owner>
  [[gnu::noinline]] void poll(Owner& owner) noexcept {
    if (polls_to_skip_ != 0) {
      --polls_to_skip_;
      return;
    }
    if (closed_.poll(finished(owner)) != 0) {
      poll_gap_ = 0;
      return;
    }
    poll_gap_ = std::min<std::size_t>(poll_gap_ == 0 ? 1 : poll_gap_ * 2, poll_max_gap_);
    polls_to_skip_ = poll_gap_;
  }

  // Off the hot path (pending_frees.cpp). reclaim: some pending blocks of pool p made
  // reusable, cheapest way first (false: none left to wait for). drain: all of them, for
  // empty_cache, the OOM path and release_all (false: the device cannot wait now). drop:
  // the context is gone, every fence given back unchecked, every block forgotten.
  template <class Owner>
  bool reclaim(Pool p, Owner& owner) noexcept;
  template <class Owner>
  bool drain(Owner& owner) noexcept;
  void drop() noexcept;

  // Room to close the open epoch, reserved before an allocation changes anything (reserve
  // may throw std::bad_alloc; nothing changes then).
  bool has_room() const noexcept { return !closed_.full(); }
  void reserve() { if (closed_.full()) closed_.grow(); }

  // For check() and host_bytes().
  const Epoch& open() const noexcept { return open_; }
  const FenceQueue<Epoch>& closed() const noexcept { return closed_; }
  const std::array<std::size_t, kPools>& closed_blocks() const noexcept { return closed_blocks_; }
  std::size_t host_bytes() const noexcept { return closed_.host_bytes(); }

 private:
  // The queue's callback for a closed epoch whose fence is done.
  template <class Owner>
  auto finished(Owner& owner) noexcept {
    return [this, &owner](Epoch& e) noexcept {
      for (std::size_t p = 0; p < kPools; ++p) closed_blocks_[p] -= e.per_pool[p];
      owner.complete_epoch(e);
    };
  }

  // How many blocks the next epoch may list, given the device's wish (device.h).
  std::size_t epoch_blocks(std::size_t device_wish) const noexcept {
    return std::clamp<std::size_t>(std::max(opt_max_blocks_, device_wish), 1, Epoch::kCapacity);
  }

  void reset_open() noexcept {
    open_.count = 0;
    open_.per_pool = {};
    open_.bytes = 0;
    open_.fence = kNoFence;
  }

  Device& dev_;
  const FenceMode mode_;
  // AllocatorOptions' epoch_max_blocks, epoch_max_bytes and fence_poll_max_gap, copied:
  // read on the hot path, one load each.
  const std::size_t opt_max_blocks_, max_bytes_, poll_max_gap_;
  // epoch_max_blocks, raised to the device's fence_batch_blocks() (asked after each
  // fence: a context's streams come and go), capped by Epoch::kCapacity.
  std::size_t max_blocks_ = epoch_blocks(0);
  // Polling backoff (poll): the current gap, and the allocations left to skip.
  std::size_t poll_gap_ = 0;
  std::size_t polls_to_skip_ = 0;
  Epoch open_;
  FenceQueue<Epoch> closed_;
  std::array<std::size_t, kPools> closed_blocks_{};
};

}  // namespace luma::core
