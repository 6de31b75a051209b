// block.h - the caching allocator's two records: a Segment (one device reservation) and a
// Block (a piece of one). A segment's blocks form a doubly linked list in address order
// that tiles it exactly. A block is free (in the free index) or in use: allocated (held by
// the program: in the pointer map, with a LiveBlock that holds what free() needs) or
// pending (freed by the program, its fence not done yet: in an epoch). An in-use block is
// never reusable and never merged with; which of the two it is, is where it is listed,
// so a free changes nothing in the block record itself (see epoch.h).
// Plain data: the allocator (caching_allocator.cpp) keeps every invariant.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "stats/stats.h"

namespace luma::core {

// unmapped: address space of an expandable segment with no memory behind it (never in the
// free index, the pointer map or an epoch; merges only with an unmapped neighbour, and
// only it is listed through list_prev/list_next in its pool's list of unmapped ranges).
enum class BlockState : std::uint8_t { free, in_use, unmapped };

// One cache line per block: every field a hot-path step reads or writes is in it, so a
// block costs one miss, never two (a 64-byte record that straddles lines costs two).
struct alignas(64) Block {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  // While in use: the bytes asked for (requested_bytes). While free and its segment's only
  // block: that Segment's address, so that taking it finds the segment's place in the list
  // of wholly free segments without a lookup (CachingAllocator). Unused otherwise.
  std::size_t requested = 0;
  Block* prev = nullptr;      // address neighbours inside the segment
  Block* next = nullptr;
  Block* list_prev = nullptr;  // free-class list (free blocks only)
  Block* list_next = nullptr;
  BlockState state = BlockState::free;
  Pool pool = Pool::small;  // its segment's pool, kept here to spare a cache miss
  std::uint8_t fl = 0;      // free-index class while indexed (FreeIndex::insert)
  std::uint8_t sl = 0;
  std::uint32_t self = 0;   // this record's number (RecordPool::at)

  bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
};
static_assert(sizeof(Block) == 64, "a block record is one cache line");

struct Segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  Pool pool = Pool::small;
  // One block's own driver allocation (CachingAllocator::allocate_own_segment): given back
  // to the device when that block's free completes, never cached.
  bool own = false;
  // An expandable segment (AllocatorOptions::expandable_segments): `size` is its address
  // range, `mapped` the bytes of it with memory behind them (what counts as reserved).
  // Its last page is never mapped, so its blocks always end with an unmapped one and none
  // is ever its segment's only block: it is never wholly free, never idle, never released
  // whole while the allocator lives.
  bool expandable = false;
  std::size_t mapped = 0;
  std::uint32_t self = 0;  // this record's number (RecordPool::at)
  // While wholly free: listed in its pool's list of wholly free segments, in the order
  // they became so (SegmentTable's idle lists), so that a release before growth touches
  // only the segments it releases, least recently freed first.
  bool idle = false;
  Segment* idle_prev = nullptr;
  Segment* idle_next = nullptr;
  Block* first = nullptr;

  // The bytes with memory behind them: what the segment adds to reserved_bytes.
  std::size_t held() const noexcept { return expandable ? mapped : size; }

  bool wholly_free() const noexcept {
    return first != nullptr && first->next == nullptr && first->state == BlockState::free;
  }
};

constexpr std::size_t pool_index(Pool p) noexcept { return static_cast<std::size_t>(p); }

// An allocated block as the pointer map keeps it, in 8 bytes: the block record's number
// and, packed with the pool, its size in alignment units, so that a free needs nothing
// else to update the statistics and its epoch and never waits for the block record (with
// a million live blocks that record is a cache miss, and the lock's release after it
// would wait for it). A size too big for the field (2^31 units and more: 512 GiB at the
// minimum 256-byte alignment) is marked instead and read from the record.
struct LiveBlock {
  static constexpr std::uint32_t kSizeInRecord = ~std::uint32_t{0} >> 1;

  std::uint32_t block = 0;      // RecordPool number of the block record
  std::uint32_t units_pool = 0;  // size >> unit shift (or kSizeInRecord) << 1 | pool

  static LiveBlock make(const Block& b, unsigned unit_shift) noexcept {
    const auto field = static_cast<std::uint32_t>(std::min<std::size_t>(b.size >> unit_shift, kSizeInRecord));
    return {b.self, field << 1 | static_cast<std::uint32_t>(b.pool)};
  }
  Pool pool() const noexcept { return static_cast<Pool>(units_pool & 1u); }
  bool size_in_record() const noexcept { return (units_pool >> 1) == kSizeInRecord; }
  std::size_t size(unsigned unit_shift) const noexcept {  // !size_in_record()
    return static_cast<std::size_t>(units_pool >> 1) << unit_shift;
  }
};
static_assert(sizeof(LiveBlock) == 8, "a pointer-map bucket holds 4 keys and 4 of these in 64 bytes");

}  // namespace luma::core
