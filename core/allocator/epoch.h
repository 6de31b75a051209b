// epoch.h - pending frees of the caching allocator, batched: an Epoch is a set of freed
// blocks that one fence covers (device.h); the closed ones wait for their fences in a
// FenceQueue<Epoch> (fence_queue.h), oldest first. An epoch lists its blocks in a fixed
// array, so joining one never touches the block record (with a million live blocks that
// record is a cache miss the free would wait for; the completion loads all of an epoch's
// records at once instead), and never allocates.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "allocator/block.h"
#include "base/device.h"

namespace luma::core {

struct Epoch {
  // Most blocks one epoch holds (AllocatorOptions::epoch_max_blocks and the device's
  // fence_batch_blocks() are capped to it). 1024: a context with hundreds of streams may
  // need epochs that large for its fences to cost little per free (docs/architecture.md,
  // "Fences with many streams"); the default epoch stays at 64 blocks.
  static constexpr std::size_t kCapacity = 1024;

  Epoch() = default;
  // Copies only the listed blocks: the fence queue copies an epoch at every close, and most
  // epochs list 64 blocks or fewer of the 1024 they could.
  Epoch(const Epoch& o) noexcept { *this = o; }
  Epoch& operator=(const Epoch& o) noexcept {
    if (this == &o) return *this;
    std::copy_n(o.blocks.begin(), o.count, blocks.begin());
    count = o.count;
    per_pool = o.per_pool;
    bytes = o.bytes;
    fence = o.fence;
    return *this;
  }

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
