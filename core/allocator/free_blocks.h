// free_blocks.h - every free block of one allocator, found by size: one free index
// (free_index.h) per pool and per side of the split limit. Its invariant: a free, mapped
// block is listed exactly once, in its own pool's index, on the oversize side exactly when
// its size is at least the split limit (max_split_size: such blocks are never split, and a
// normal request never sees them, so PyTorch's oversize rule costs nothing). The limit
// changes only while no block exists (expandable segments lift it: their free pages are
// unmapped instead). check() proves the invariant against the blocks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "allocator/block.h"
#include "allocator/free_index.h"

namespace luma::core {

class FreeBlocks {
 public:
  FreeBlocks(unsigned unit_shift, std::size_t split_limit) noexcept : split_limit_(split_limit) {
    for (auto& per_pool : index_)
      for (FreeIndex& fi : per_pool) fi.set_unit_shift(unit_shift);
  }

  bool oversize(std::size_t size) const noexcept { return size >= split_limit_; }

  // Blocks of any size are split from now on; only while none exists.
  void lift_split_limit() noexcept { split_limit_ = ~std::size_t{0}; }

  [[gnu::always_inline]] void insert(Block* b) noexcept { of(b->pool, b->size).insert(b); }
  [[gnu::always_inline]] void remove(Block* b) noexcept { of(b->pool, b->size).remove(b); }

  // A free block of pool p that fits `rounded`, good fit within 1/64 (free_index.h), on
  // the request's side of the split limit; nullptr if none.
  [[gnu::always_inline]] Block* find(Pool p, std::size_t rounded) noexcept { return of(p, rounded).find(rounded); }

  // The free blocks listed (a count the indexes keep, not a statistic of the hot path).
  std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (const auto& per_pool : index_)
      for (const FreeIndex& fi : per_pool) n += fi.count();
    return n;
  }

  // The invariant: every entry a free block of its pool, class and side, the bitmaps as
  // the lists are, and each pool's count equal to `free_in_segments` (the free blocks
  // found by walking the segments). Walks stop after max_blocks entries (a broken list).
  void check(const std::array<std::int64_t, kPools>& free_in_segments, std::size_t max_blocks,
             const std::function<void(std::string)>& fail) const;

 private:
  [[gnu::always_inline]] FreeIndex& of(Pool p, std::size_t size) noexcept {
    return index_[pool_index(p)][oversize(size) ? 1 : 0];
  }

  std::array<std::array<FreeIndex, 2>, kPools> index_;  // [pool][oversize]
  std::size_t split_limit_;
};

}  // namespace luma::core
