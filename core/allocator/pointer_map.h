// pointer_map.h - address -> what the allocator keeps of an allocated block (8 bytes), for
// free() and owns(); the same table maps each segment's base to its record. Keys are never
// 0 (0 marks an empty slot).
//
// Buckets of one cache line: 4 keys and their 4 values. A key lives in its home bucket
// (Fibonacci hash of the address) unless that was full when it was inserted; then in the
// first later bucket with room, and its home bucket counts it (`overflow_`). A lookup
// compares the 4 keys of one line without a branch per key and stops there when the key is
// found or no key overflowed from the home bucket; only then does it walk on, and it stops
// once it has seen every key that overflowed from the home bucket. Deleting clears the slot
// and, for an overflowed key, the count: no tombstones, no shifting, and the walk never
// outlives its keys.
//
// At most a quarter full (kLoadDenominator: one key per bucket on average), so a bucket is
// full, and a key overflowed, a fraction of a percent of the time: a free is one line read
// and almost no mispredicted branch. Linear probing over single slots cost 0.8
// mispredictions and 2.4 cache-line misses per alloc+free pair at 10^4 live blocks
// (docs/performance.md). 64 bytes of table per live block, as before.
// reserve_for() is the only call that allocates (and may throw std::bad_alloc, before the
// caller changed anything).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "allocator/large_pages.h"

namespace luma::core {

template <typename V>
class PointerMap {
  static_assert(sizeof(V) == 8, "a bucket is 4 keys and 4 values of 8 bytes: one cache line");

 public:
  static constexpr std::size_t kWays = 4;
  // The table is at most 1/kLoadDenominator full (see the file comment).
  static constexpr std::size_t kLoadDenominator = 4;

  PointerMap() = default;
  PointerMap(const PointerMap&) = delete;
  PointerMap& operator=(const PointerMap&) = delete;
  ~PointerMap() { release(buckets_, overflow_, buckets_count_); }

  // Room for n entries without growing.
  void reserve_for(std::size_t n) {
    if ((n + 1) * kLoadDenominator > buckets_count_ * kWays) grow(n);
  }
  // Whether one more insert fits without growing.
  bool has_room() const noexcept { return (size_ + 2) * kLoadDenominator <= buckets_count_ * kWays; }

  [[gnu::always_inline]] void insert(std::uintptr_t key, const V& value) noexcept {  // caller reserved; key absent
    const std::size_t h = home(key);
    std::size_t b = h;
    for (;;) {
      const unsigned empty = match(buckets_[b], 0);
      if (empty != 0) {
        const auto i = static_cast<unsigned>(std::countr_zero(empty));
        buckets_[b].key[i] = key;
        buckets_[b].value[i] = value;
        break;
      }
      b = (b + 1) & mask_;
    }
    if (b != h) ++overflow_[h];
    ++size_;
  }

  // The value stored for key, or nullptr; valid until the map next changes.
  const V* find(std::uintptr_t key) const noexcept {
    std::size_t b = 0;
    unsigned i = 0;
    return locate(key, &b, &i) ? &buckets_[b].value[i] : nullptr;
  }

  // Starts loading the bucket `key` hashes to, so a find or insert soon after does not
  // wait for memory (with a million entries the table is far bigger than any cache).
  void prefetch(std::uintptr_t key) const noexcept {
    if (buckets_count_ != 0) __builtin_prefetch(&buckets_[home(key)]);
  }

  // Removes key and gives its value.
  [[gnu::always_inline]] bool take(std::uintptr_t key, V* out) noexcept {
    std::size_t b = 0;
    unsigned i = 0;
    if (!locate(key, &b, &i)) return false;
    *out = buckets_[b].value[i];
    buckets_[b].key[i] = 0;
    const std::size_t h = home(key);
    if (b != h) --overflow_[h];
    --size_;
    return true;
  }

  std::size_t size() const noexcept { return size_; }

  template <typename F>
  void for_each(F&& f) const {
    for (std::size_t b = 0; b < buckets_count_; ++b)
      for (std::size_t i = 0; i < kWays; ++i)
        if (buckets_[b].key[i] != 0) f(buckets_[b].key[i], buckets_[b].value[i]);
  }

  // For tests and check(): the home bucket of a key, the number of buckets, and how many
  // keys a bucket has overflowed.
  std::size_t home(std::uintptr_t key) const noexcept {
    // Fibonacci hashing: the low bits of block addresses are all zero (alignment), the
    // multiply spreads the rest over the top bits.
    return static_cast<std::size_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  std::size_t bucket_count() const noexcept { return buckets_count_; }
  // Host memory held: the buckets and their overflow counts.
  std::size_t host_bytes() const noexcept {
    return buckets_count_ == 0 ? 0
                               : index_memory_footprint(buckets_count_ * sizeof(Bucket)) +
                                     index_memory_footprint(buckets_count_ * sizeof(std::uint32_t));
  }
  std::uint32_t overflowed(std::size_t bucket) const noexcept { return overflow_[bucket]; }

 private:
  struct alignas(64) Bucket {
    std::uintptr_t key[kWays];
    V value[kWays];
  };
  static_assert(sizeof(Bucket) == 64, "one bucket, one cache line");

  // Bit i set when bucket.key[i] == key: four compares and no branch.
  static unsigned match(const Bucket& bucket, std::uintptr_t key) noexcept {
    return static_cast<unsigned>(bucket.key[0] == key) | static_cast<unsigned>(bucket.key[1] == key) << 1 |
           static_cast<unsigned>(bucket.key[2] == key) << 2 | static_cast<unsigned>(bucket.key[3] == key) << 3;
  }

  [[gnu::always_inline]] bool locate(std::uintptr_t key, std::size_t* bucket, unsigned* slot) const noexcept {
    if (buckets_count_ == 0 || key == 0) return false;
    const std::size_t h = home(key);
    unsigned m = match(buckets_[h], key);
    if (m != 0) [[likely]] {
      *bucket = h;
      *slot = static_cast<unsigned>(std::countr_zero(m));
      return true;
    }
    // Rare: walk on while keys overflowed by h remain unseen.
    std::uint32_t unseen = overflow_[h];
    for (std::size_t b = (h + 1) & mask_; unseen != 0; b = (b + 1) & mask_) {
      m = match(buckets_[b], key);
      if (m != 0) {
        *bucket = b;
        *slot = static_cast<unsigned>(std::countr_zero(m));
        return true;
      }
      for (std::size_t i = 0; i < kWays; ++i)
        if (buckets_[b].key[i] != 0 && home(buckets_[b].key[i]) == h) --unseen;
    }
    return false;
  }

  void grow(std::size_t n) {
    std::size_t count = std::max<std::size_t>(buckets_count_, 256);
    while ((n + 1) * kLoadDenominator > count * kWays) count *= 2;
    // Both zeroed: every slot empty, nothing overflowed. The counters first, so that a
    // failure leaves nothing to undo but them.
    auto* counts = static_cast<std::uint32_t*>(allocate_index_memory(count * sizeof(std::uint32_t)));
    Bucket* fresh = nullptr;
    try {
      fresh = static_cast<Bucket*>(allocate_index_memory(count * sizeof(Bucket)));
    } catch (...) {
      free_index_memory(counts, count * sizeof(std::uint32_t));
      throw;
    }
    Bucket* old = buckets_;
    std::uint32_t* old_counts = overflow_;
    const std::size_t old_count = buckets_count_;
    buckets_ = fresh;
    overflow_ = counts;
    buckets_count_ = count;
    mask_ = count - 1;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(count));
    size_ = 0;
    for (std::size_t b = 0; b < old_count; ++b)
      for (std::size_t i = 0; i < kWays; ++i)
        if (old[b].key[i] != 0) insert(old[b].key[i], old[b].value[i]);
    release(old, old_counts, old_count);
  }

  static void release(Bucket* buckets, std::uint32_t* counts, std::size_t count) noexcept {
    free_index_memory(buckets, count * sizeof(Bucket));
    free_index_memory(counts, count * sizeof(std::uint32_t));
  }

  Bucket* buckets_ = nullptr;
  std::uint32_t* overflow_ = nullptr;  // per bucket: its keys stored in later buckets
  std::size_t buckets_count_ = 0;      // a power of two
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace luma::core
