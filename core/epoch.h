// epoch.h - pending frees, batched: an Epoch is a set of freed blocks that one fence
// covers (device.h), an EpochRing the closed epochs waiting for their fences, oldest
// first. An epoch lists its blocks in a fixed array, so joining one never touches the
// block record (with a million live blocks that record is a cache miss the free would
// wait for; the completion loads all of an epoch's records at once instead).
// Neither allocates on the hot path: the ring grows only through grow(), which the
// allocator calls where it can still handle a host allocation failure.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "block.h"
#include "device.h"

namespace luma::core {

struct Epoch {
  // Most blocks one epoch holds (AllocatorOptions::epoch_max_blocks is capped to it).
  static constexpr std::size_t kCapacity = 64;

  std::array<Block*, kCapacity> blocks;  // [0, count) are set
  std::uint32_t count = 0;
  std::array<std::uint32_t, kPools> per_pool{};
  std::size_t bytes = 0;
  Fence fence = kNoFence;  // kNoFence while open

  void push(Block* b, Pool p, std::size_t size) noexcept {  // !full()
    blocks[count++] = b;
    ++per_pool[pool_index(p)];
    bytes += size;
  }
  bool full() const noexcept { return count == kCapacity; }
  bool empty() const noexcept { return count == 0; }
};

// Closed epochs, oldest first: a ring that grows only by grow() (called where the caller
// can handle a host allocation failure), so push never allocates.
class EpochRing {
 public:
  // Asked at every allocation: a compare with a kept capacity (a power of two, so that
  // positions wrap with a mask, not a division).
  bool full() const noexcept { return count_ == capacity_; }
  void grow() {  // may throw std::bad_alloc; nothing changes then
    std::vector<Epoch> bigger(std::max<std::size_t>(16, capacity_ * 2));
    for (std::size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) & (capacity_ - 1)];
    ring_.swap(bigger);
    capacity_ = ring_.size();
    head_ = 0;
  }
  void push(const Epoch& e) noexcept { ring_[(head_ + count_++) & (capacity_ - 1)] = e; }  // !full()
  Epoch& oldest() noexcept { return ring_[head_]; }
  void pop() noexcept {
    head_ = (head_ + 1) & (capacity_ - 1);
    --count_;
  }
  std::size_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  const Epoch& at(std::size_t i) const noexcept { return ring_[(head_ + i) & (capacity_ - 1)]; }

 private:
  std::vector<Epoch> ring_;
  std::size_t capacity_ = 0;  // ring_.size(): 0 or a power of two
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

}  // namespace luma::core
