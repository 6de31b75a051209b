// tlsf.h - a Two-Level Segregated Fit allocator over offsets, for offline planning: it hands
// out offsets inside an arena of a fixed size and owns no memory. Behaviour follows the
// reference TLSF (its semantics: docs/planner.md) exactly - bucket indices, the search size, the
// upward search, FIFO buckets, head split for alignment, remainder split, merging on free,
// the three errors, peak_used - so a replay gives the reference's offsets. Unlike the
// reference, removal from a bucket is O(1): buckets are intrusive doubly-linked FIFO lists
// and two bitmaps say which buckets are non-empty. FIFO order is the reference's.
// Blocks are records in one array, found by index (a Handle): splitting and merging touch no
// map. Only the offset interface (alloc/free) keeps an offset -> block map, of the blocks
// it handed out; a free of an offset not in it walks the blocks once to tell a double free
// from an unknown offset (errors are rare; the common path stays O(1)). The replay uses
// handles and no map at all.
// It must never throw anything but TlsfError, std::invalid_argument (bad handle or
// arguments) and std::bad_alloc, and never read outside its tables whatever the calls.
#pragma once

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/offset_map.h"

namespace luma::core {

class TlsfError : public std::runtime_error {
 public:
  enum class Kind { out_of_memory, unknown_offset, double_free };
  TlsfError(Kind kind, std::uint64_t value, const std::string& message)
      : std::runtime_error(message), kind_(kind), value_(value) {}
  Kind kind() const noexcept { return kind_; }
  // The request (out_of_memory) or the offset (unknown_offset, double_free).
  std::uint64_t value() const noexcept { return value_; }

 private:
  Kind kind_;
  std::uint64_t value_;
};

class Tlsf {
 public:
  // An allocator for `size` bytes whose offsets start at `base`. `block_size` is the
  // smallest block; `level2_count` (1..63) second-level buckets per power of two.
  // Throws std::invalid_argument for a size of 2^62 or more or a bad level2_count.
  Tlsf(std::uint64_t size, std::uint64_t base, std::uint64_t block_size,
       std::uint64_t level2_count);

  // An offset (base-relative plus base) of `size` bytes aligned to `align`. Throws
  // TlsfError(out_of_memory) when no block fits.
  std::uint64_t alloc(std::uint64_t size, std::uint64_t align = 1);
  // Frees an offset returned by alloc. Throws TlsfError(unknown_offset) for an offset that
  // is not the start of a block, TlsfError(double_free) for one already free.
  void free(std::uint64_t offset);

  // The same without the offset map: alloc_block returns the block's handle, valid until
  // free_block(handle). Blocks handed out one way must be freed the same way.
  using Handle = std::uint32_t;
  Handle alloc_block(std::uint64_t size, std::uint64_t align = 1);
  void free_block(Handle block);  // std::invalid_argument for a handle not in use
  std::uint64_t offset_of(Handle block) const {  // std::invalid_argument for no block
    if (block >= blocks_.size()) throw std::invalid_argument("TLSF: no such block");
    return blocks_[block].offset + base_;
  }

  // The largest start + request ever handed out (base-relative).
  std::uint64_t peak_used() const noexcept { return peak_used_; }

  // Bucket indices: first level = bit length of the size; second level = its subdivision.
  std::uint32_t level1(std::uint64_t size) const noexcept {
    return static_cast<std::uint32_t>(64 - std::countl_zero(size));
  }
  std::uint32_t level2(std::uint64_t size) const noexcept {
    const std::uint32_t msb = level1(size);
    if (msb == 0) return 0;
    const std::uint32_t shift = msb > l2_bits_ ? msb - l2_bits_ : 0;
    return static_cast<std::uint32_t>((size - (std::uint64_t{1} << (msb - 1))) >> shift);
  }
  // The size the search looks for: the request (at least block_size) plus align - 1,
  // rounded up to its bucket's granularity so any block of that bucket fits.
  std::uint64_t search_size(std::uint64_t size, std::uint64_t align) const noexcept;

  // The base-relative start offsets in bucket (l1, l2), front (next to be taken) first.
  std::vector<std::uint64_t> bucket(std::uint32_t l1, std::uint32_t l2) const;
  std::uint32_t level1_count() const noexcept { return levels_; }
  std::uint32_t level2_slots() const noexcept { return slots_; }

  // Every invariant that does not hold, one message each; empty when all is well.
  std::vector<std::string> check() const;

 private:
  static constexpr std::uint32_t kNil = 0xffffffffu;
  struct Block {
    std::uint64_t offset;  // base-relative
    std::uint64_t size;
    std::uint32_t phys_prev, phys_next;  // address neighbours
    std::uint32_t free_prev, free_next;  // bucket FIFO links (free blocks only)
    std::uint32_t bucket;                // while in a bucket: which (unlink needs no size math)
    bool is_free;
  };

  std::uint32_t new_block(std::uint64_t offset, std::uint64_t size);
  void drop_block(std::uint32_t b);
  std::uint32_t find_block(std::uint64_t offset) const;  // kNil if no block starts there
  std::uint32_t slot_of(std::uint64_t size) const noexcept {
    return level1(size) * slots_ + level2(size);
  }
  void push_back(std::uint32_t b);
  void unlink(std::uint32_t b);
  // Splits `size` bytes off the front of block b; the rest becomes a new free block put in
  // its bucket. Returns the new block.
  std::uint32_t split(std::uint32_t b, std::uint64_t size);

  std::uint64_t size_, base_, block_size_;
  std::uint32_t l2_bits_, levels_, slots_;
  std::vector<Block> blocks_;
  std::vector<std::uint32_t> spare_;  // indices of dropped blocks, reused first
  std::vector<std::uint32_t> head_, tail_;  // per bucket: [l1 * slots_ + l2]
  std::vector<std::uint64_t> l2_bitmap_;    // per l1: which l2 buckets are non-empty
  std::uint64_t l1_bitmap_ = 0;             // which l1 rows have a non-empty bucket
  OffsetMap handed_out_;  // start of each block alloc() returned and free() has not taken
  std::uint64_t peak_used_ = 0;
};

}  // namespace luma::core
