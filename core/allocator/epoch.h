// epoch.h - pending frees of the caching allocator, batched: an Epoch is a set of freed
// blocks that one fence covers (device.h); the closed ones wait for their fences in a
// FenceQueue<Epoch> (fence_queue.h), oldest first. An epoch lists its blocks in a fixed
// array, so joining one never touches the block record (with a million live blocks that
// record is a cache miss the free would wait for; the completion loads all of an epoch's
// records at once instead), and never allocates.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "allocator/block.h"
#include "allocator/device.h"

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

}  // namespace luma::core
