// offset_map.h - block start offset -> block index, for the TLSF: a flat open-addressing
// hash table (linear probing, backward-shift deletion), so alloc and free allocate no
// memory per event (std::unordered_map allocated a node per block, and dominated the replay).
// Never holds the value kEmpty.
#pragma once

#include <cstdint>
#include <vector>

namespace luma::core {

class OffsetMap {
 public:
  static constexpr std::uint32_t kEmpty = 0xffffffffu;

  // The value for key, or kEmpty.
  std::uint32_t find(std::uint64_t key) const noexcept {
    if (slots_.empty()) return kEmpty;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].value == kEmpty) return kEmpty;
      if (slots_[i].key == key) return slots_[i].value;
    }
  }
  // Inserts or overwrites.
  void set(std::uint64_t key, std::uint32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].value == kEmpty) {
        slots_[i] = {key, value};
        ++size_;
        return;
      }
      if (slots_[i].key == key) {
        slots_[i].value = value;
        return;
      }
    }
  }
  void erase(std::uint64_t key) noexcept {
    if (slots_.empty()) return;
    std::size_t i = home(key);
    while (true) {
      if (slots_[i].value == kEmpty) return;
      if (slots_[i].key == key) break;
      i = (i + 1) & mask_;
    }
    // Backward shift: pull later members of the probe run into the hole.
    for (std::size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].value == kEmpty) break;
      std::size_t h = home(slots_[j].key);
      // slots_[j] may move to i only if its home is not in (i, j] (cyclically).
      bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i].value = kEmpty;
    --size_;
  }
  std::size_t size() const noexcept { return size_; }

 private:
  struct Slot {
    std::uint64_t key = 0;
    std::uint32_t value = kEmpty;
  };
  std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ull) >> shift_) & mask_;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    std::size_t n = old.empty() ? 64 : old.size() * 2;
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    shift_ = 64;
    for (std::size_t k = n; k > 1; k >>= 1) --shift_;  // top log2(n) bits of the product
    size_ = 0;
    for (const Slot& s : old)
      if (s.value != kEmpty) set(s.key, s.value);
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0, size_ = 0;
  int shift_ = 64;
};

}  // namespace luma::core
