// free_blocks.cpp - FreeBlocks' invariant, checked (free_blocks.h); part of the
// allocator's invariant check (allocator_check.cpp), never on a hot path.
#include "allocator/free_blocks.h"

#include <fmt/format.h>

namespace luma::core {

void FreeBlocks::check(const std::array<std::int64_t, kPools>& free_in_segments, std::size_t max_blocks,
                       const std::function<void(std::string)>& fail) const {
  for (std::size_t p = 0; p < kPools; ++p) {
    const char* pool = p == pool_index(Pool::small) ? "small" : "large";
    std::int64_t indexed = 0;
    for (std::size_t o = 0; o < 2; ++o) {
      const FreeIndex& fi = index_[p][o];
      std::size_t listed = 0;
      fi.for_each_class([&](FreeIndex::Class c, const Block* head) {
        if ((head != nullptr) != fi.bitmap_says_nonempty(c))
          fail(fmt::format("{} pool index: bitmap disagrees with class ({}, {})", pool, c.fl, c.sl));
        const Block* lp = nullptr;
        std::size_t n = 0;
        for (const Block* b = head; b != nullptr; lp = b, b = b->list_next) {
          if (++n > max_blocks) {
            fail(fmt::format("free list ({}, {}) does not end", c.fl, c.sl));
            break;
          }
          ++listed;
          if (b->list_prev != lp) fail(fmt::format("free list entry {:#x}: back link is wrong", b->addr));
          if (b->state != BlockState::free) fail(fmt::format("free list holds block {:#x} that is in use", b->addr));
          if (pool_index(b->pool) != p) fail(fmt::format("block {:#x} is indexed in the wrong pool", b->addr));
          const FreeIndex::Class bc = fi.class_of(b->size);
          if (bc.fl != c.fl || bc.sl != c.sl)
            fail(fmt::format("block {:#x} of {} bytes is in class ({}, {}) instead of ({}, {})", b->addr, b->size, c.fl,
                             c.sl, bc.fl, bc.sl));
          if (oversize(b->size) != (o == 1))
            fail(fmt::format("block {:#x} is on the wrong side of max_split_size", b->addr));
        }
      });
      for (unsigned fl = 0; fl < FreeIndex::kFl; ++fl)
        if (!fi.fl_bit_matches(fl)) fail(fmt::format("first-level bitmap bit {} is wrong", fl));
      if (listed != fi.count()) fail(fmt::format("free index counts {} blocks, lists hold {}", fi.count(), listed));
      indexed += static_cast<std::int64_t>(listed);
    }
    if (indexed != free_in_segments[p])
      fail(fmt::format("{} pool: {} free blocks in segments, {} in the free index", pool, free_in_segments[p], indexed));
  }
}

}  // namespace luma::core
