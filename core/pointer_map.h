// pointer_map.h - address -> what the allocator keeps of an allocated block (its record),
// for free() and owns(): open addressing with linear probing and backward-shift deletion,
// keyed by block address. No node per entry, no tombstones (lookups stay short however
// long the program runs). Keys are never 0 (0 marks an empty slot).
//
// At most a quarter full (kLoadDenominator): a free is one lookup and one deletion at a
// random address, and at half load their probe loops ran 1.5-2.5 slots on average with a
// trip count no branch predictor can learn; at a quarter they run about 1.2, which
// measured 8 ns faster per alloc+free pair at 10^4 live blocks and 25 ns at 10^6
// (docs/performance.md). With 16-byte slots (a pointer as the value) that costs the memory
// the half-full map of 32-byte slots did: 64 bytes per live block.
// reserve_for() is the only call that allocates (and may throw std::bad_alloc, before the
// caller changed anything).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "large_pages.h"

namespace luma::core {

template <typename V>
class PointerMap {
 public:
  PointerMap() = default;
  PointerMap(const PointerMap&) = delete;
  PointerMap& operator=(const PointerMap&) = delete;
  ~PointerMap() { free_index_memory(slots_, capacity_ * sizeof(Slot)); }

  // The table is at most 1/kLoadDenominator full (see the file comment).
  static constexpr std::size_t kLoadDenominator = 4;

  // Room for n entries without growing.
  void reserve_for(std::size_t n) {
    if ((n + 1) * kLoadDenominator > capacity_) grow(n);
  }
  // Whether one more insert fits without growing.
  bool has_room() const noexcept { return (size_ + 2) * kLoadDenominator <= capacity_; }

  void insert(std::uintptr_t key, const V& value) noexcept {  // caller reserved; key absent
    std::size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++size_;
  }

  // The value stored for key, or nullptr; valid until the map next changes.
  const V* find(std::uintptr_t key) const noexcept {
    if (capacity_ == 0 || key == 0) return nullptr;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }

  // Starts loading the slot `key` hashes to, so a find or insert soon after does not wait
  // for memory (with a million entries the table is far bigger than any cache).
  void prefetch(std::uintptr_t key) const noexcept {
    if (capacity_ != 0) __builtin_prefetch(&slots_[home(key)]);
  }

  // Removes key and gives its value: one probe for find + erase.
  bool take(std::uintptr_t key, V* out) noexcept {
    if (capacity_ == 0 || key == 0) return false;
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) break;
      if (slots_[i].key == 0) return false;
    }
    *out = slots_[i].value;
    // Backward-shift deletion: pull later entries of the probe run into the hole.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const bool stays = (hole <= j) ? (hole < h && h <= j) : (hole < h || h <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = {};
    --size_;
    return true;
  }

  std::size_t size() const noexcept { return size_; }

  template <typename F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < capacity_; ++i)
      if (slots_[i].key != 0) f(slots_[i].key, slots_[i].value);
  }

  void clear() noexcept {
    std::fill(slots_, slots_ + capacity_, Slot{});
    size_ = 0;
  }

 private:
  struct Slot {
    std::uintptr_t key = 0;
    V value{};
  };

  std::size_t home(std::uintptr_t key) const noexcept {
    // Fibonacci hashing: the low bits of block addresses are all zero (alignment), the
    // multiply spreads the rest over the top bits.
    return static_cast<std::size_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void grow(std::size_t n) {
    std::size_t cap = std::max<std::size_t>(capacity_, 1024);
    while ((n + 1) * kLoadDenominator > cap) cap *= 2;
    auto* fresh = static_cast<Slot*>(allocate_index_memory(cap * sizeof(Slot)));  // zeroed: all empty
    Slot* old = slots_;
    const std::size_t old_capacity = capacity_;
    slots_ = fresh;
    capacity_ = cap;
    mask_ = cap - 1;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(cap));
    size_ = 0;
    for (std::size_t i = 0; i < old_capacity; ++i)
      if (old[i].key != 0) insert(old[i].key, old[i].value);
    free_index_memory(old, old_capacity * sizeof(Slot));
  }

  Slot* slots_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace luma::core
