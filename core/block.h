// block.h - the caching allocator's two records: a Segment (one device reservation) and a
// Block (a piece of one). A segment's blocks form a doubly linked list in address order
// that tiles it exactly. A block is free (in the free index) or in use: allocated (held by
// the program: in the pointer map, with a LiveBlock that holds what free() needs) or
// pending (freed by the program, its fence not done yet: in an epoch). An in-use block is
// never reusable and never merged with; which of the two it is, is where it is listed,
// so a free changes nothing in the block record itself (see epoch.h).
// Plain data: the allocator (caching_allocator.cpp) keeps every invariant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stats.h"

namespace luma::core {

enum class BlockState : std::uint8_t { free, in_use };

// One cache line per block: every field a hot-path step reads or writes is in it, so a
// block costs one miss, never two (a 64-byte record that straddles lines costs two).
struct alignas(64) Block {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  Block* prev = nullptr;      // address neighbours inside the segment
  Block* next = nullptr;
  Block* list_prev = nullptr;  // free-class list (free blocks only)
  Block* list_next = nullptr;
  BlockState state = BlockState::free;
  Pool pool = Pool::small;  // its segment's pool, kept here to spare a cache miss
  std::uint8_t fl = 0;      // free-index class while indexed (FreeIndex::insert)
  std::uint8_t sl = 0;

  bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
};
static_assert(sizeof(Block) == 64, "a block record is one cache line");

struct Segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  Pool pool = Pool::small;
  Block* first = nullptr;

  bool wholly_free() const noexcept {
    return first != nullptr && first->next == nullptr && first->state == BlockState::free;
  }
};

constexpr std::size_t pool_index(Pool p) noexcept { return static_cast<std::size_t>(p); }

// An allocated block as the pointer map keeps it: everything free() needs, so a free
// reads one map slot and never the block record.
struct LiveBlock {
  Block* block = nullptr;
  std::size_t size = 0;               // rounded bytes (block->size)
  std::uint64_t requested_pool = 0;   // bytes asked for | pool << 63

  static LiveBlock make(Block* b, std::size_t requested) noexcept {
    return {b, b->size, requested | (static_cast<std::uint64_t>(b->pool) << 63)};
  }
  std::size_t requested() const noexcept { return requested_pool & ~(std::uint64_t{1} << 63); }
  Pool pool() const noexcept { return static_cast<Pool>(requested_pool >> 63); }
};

}  // namespace luma::core
