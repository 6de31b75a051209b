// free_index.h - the free blocks of one pool (and one side of max_split_size), TLSF-style:
// segregated lists found through a two-level bitmap, so best fit costs a few bit scans
// whatever the number of free blocks.
//
// Size classes: first level = the power of two of the size in alignment units, second
// level = 64 linear subdivisions of it. Fit policy, "good fit within 1/64": the head of the
// request's own class when it is big enough (exact reuse: a freed block goes to the head,
// so a program that frees and asks again for one size gets that very block back), else the
// head of the next non-empty class (every block there fits, and is at most 1/64 of its
// class width away from that class's smallest size). Only when that finds nothing either
// is the whole own class scanned, so a fitting block is never ignored in favour of a new
// segment; that rare scan precedes a device call, which costs far more.
// Lists are LIFO and doubly linked (removal from the middle is O(1) when blocks merge).
// Insert, remove and class_of have no data-dependent branch: whether a list was or
// becomes empty, or a size is below the first level, is as random as the program's sizes,
// and each mispredicted branch cost more than the selects that replace it (an empty
// list's missing neighbour is stood in for by `spare_`, a record nothing reads).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "allocator/block.h"

namespace luma::core {

class FreeIndex {
 public:
  static constexpr unsigned kSlBits = 6;
  static constexpr unsigned kSl = 1u << kSlBits;  // 64 subdivisions: good fit within 1/64
  static constexpr unsigned kFl = 64;

  struct Class {
    unsigned fl;
    unsigned sl;
  };

  void set_unit_shift(unsigned shift) noexcept { unit_shift_ = shift; }

  // Below kSl units: first level 0, linear; above: the power of two and 64 steps of it.
  Class class_of(std::size_t size) const noexcept {
    const std::uint64_t u = static_cast<std::uint64_t>(size) >> unit_shift_;
    const unsigned m = static_cast<unsigned>(std::bit_width(u | kSl)) - 1;  // >= kSlBits
    // 1 when u < kSl, by arithmetic (u < 2^62): a comparison here became a branch.
    const auto low = static_cast<unsigned>((u - kSl) >> 63);
    return {m - kSlBits + 1 - low, static_cast<unsigned>((u >> (m - kSlBits)) - (std::uint64_t{1 - low} << kSlBits))};
  }

  [[gnu::always_inline]] void insert(Block* b) noexcept {
    const Class c = class_of(b->size);
    b->fl = static_cast<std::uint8_t>(c.fl);
    b->sl = static_cast<std::uint8_t>(c.sl);
    Block*& head = heads_[c.fl][c.sl];
    Block* const old = head;
    b->list_prev = nullptr;
    b->list_next = old;
    (old != nullptr ? old : &spare_)->list_prev = b;
    head = b;
    sl_map_[c.fl] |= std::uint64_t{1} << c.sl;
    fl_map_ |= std::uint64_t{1} << c.fl;
    ++count_;
  }

  [[gnu::always_inline]] void remove(Block* b) noexcept {
    Block* const prev = b->list_prev;
    Block* const next = b->list_next;
    Block*& head = heads_[b->fl][b->sl];
    Block** const link = prev != nullptr ? &prev->list_next : &head;  // a select, not a branch
    *link = next;
    (next != nullptr ? next : &spare_)->list_prev = prev;
    // The class's bit goes when its list is now empty, the first level's with its last class.
    const std::uint64_t emptied = head == nullptr ? 1 : 0;
    std::uint64_t& sl_map = sl_map_[b->fl];
    sl_map &= ~(emptied << b->sl);
    fl_map_ &= ~(std::uint64_t{sl_map == 0 ? 1u : 0u} << b->fl);
    b->list_prev = b->list_next = nullptr;
    --count_;
  }

  [[gnu::always_inline]] Block* find(std::size_t size) const noexcept {
    const Class c = class_of(size);
    Block* own = heads_[c.fl][c.sl];
    if (own != nullptr && own->size >= size) return own;
    // The next non-empty class: every block in it is larger than any size of this class.
    std::uint64_t sl_map = c.sl + 1 < kSl ? sl_map_[c.fl] & (~std::uint64_t{0} << (c.sl + 1)) : 0;
    unsigned fl = c.fl;
    if (sl_map == 0) {
      const std::uint64_t fl_map = c.fl + 1 < kFl ? fl_map_ & (~std::uint64_t{0} << (c.fl + 1)) : 0;
      if (fl_map != 0) {
        fl = static_cast<unsigned>(std::countr_zero(fl_map));
        sl_map = sl_map_[fl];
      }
    }
    if (sl_map != 0) return heads_[fl][static_cast<unsigned>(std::countr_zero(sl_map))];
    Block* best = nullptr;  // rare: see the file comment
    for (Block* b = own; b != nullptr; b = b->list_next)
      if (b->size >= size && (best == nullptr || b->size < best->size)) best = b;
    return best;
  }

  std::size_t count() const noexcept { return count_; }

  // For check(): calls f(class, head) for every class; the bitmaps' view of each class.
  template <typename F>
  void for_each_class(F&& f) const {
    for (unsigned fl = 0; fl < kFl; ++fl)
      for (unsigned sl = 0; sl < kSl; ++sl) f(Class{fl, sl}, heads_[fl][sl]);
  }
  bool bitmap_says_nonempty(Class c) const noexcept {
    return ((sl_map_[c.fl] >> c.sl) & 1u) != 0 && ((fl_map_ >> c.fl) & 1u) != 0;
  }
  bool fl_bit_matches(unsigned fl) const noexcept {
    return (((fl_map_ >> fl) & 1u) != 0) == (sl_map_[fl] != 0);
  }

 private:
  unsigned unit_shift_ = 8;
  std::uint64_t fl_map_ = 0;
  std::array<std::uint64_t, kFl> sl_map_{};
  std::array<std::array<Block*, kSl>, kFl> heads_{};
  std::size_t count_ = 0;
  Block spare_;  // written in place of a missing list neighbour, never read

  // The constants tied, as TLSF ties its own: a class's bit must fit its bitmap word, its
  // numbers the block's uint8_t fields, and the largest 64-bit size (first level
  // 64 - kSlBits from class_of's shift) must still have a first level.
  static_assert(kSl == std::uint64_t{1} << kSlBits && kSlBits < 64);
  static_assert(kSl <= std::numeric_limits<decltype(sl_map_)::value_type>::digits);
  static_assert(kFl <= std::numeric_limits<decltype(fl_map_)>::digits);
  static_assert(kFl - 1 <= std::numeric_limits<decltype(Block::fl)>::max());
  static_assert(kSl - 1 <= std::numeric_limits<decltype(Block::sl)>::max());
  static_assert(kFl > std::numeric_limits<std::uint64_t>::digits - kSlBits);
};

}  // namespace luma::core
