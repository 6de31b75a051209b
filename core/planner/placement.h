// placement.h - where one buffer goes, given the placed buffers that overlap it in time:
// best fit (the smallest gap between them that holds it, lowest on ties, else on top:
// TFLite's and XLA's greedy) or first fit (the lowest offset where it fits: MiniMalloc's
// canonical placement).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace luma::core {

enum class Fit { best, first };

inline std::uint64_t align_up(std::uint64_t n, std::uint64_t a) noexcept {
  return a <= 1 ? n : (n + a - 1) / a * a;
}

// The gap search itself, fed the overlapping placed buffers in increasing offset.
class GapScan {
 public:
  GapScan(std::uint64_t size, std::uint64_t alignment, Fit fit)
      : size_(size), alignment_(alignment), fit_(fit) {}

  void add(std::uint64_t off, std::uint64_t end) {
    if (done_) return;
    if (off > cursor_) {
      std::uint64_t start = align_up(cursor_, alignment_);
      if (start + size_ <= off) {
        std::uint64_t gap = off - cursor_;
        if (fit_ == Fit::first || gap < best_gap_) {
          best_gap_ = gap;
          best_ = start;
          found_ = true;
          done_ = fit_ == Fit::first;
        }
      }
    }
    cursor_ = std::max(cursor_, end);
  }
  // The chosen offset: the gap found, or on top of everything.
  std::uint64_t result() const { return found_ ? best_ : align_up(cursor_, alignment_); }

 private:
  std::uint64_t size_, alignment_;
  Fit fit_;
  std::uint64_t cursor_ = 0, best_ = 0, best_gap_ = ~std::uint64_t{0};
  bool found_ = false, done_ = false;
};

// `busy` holds (offset, end) of the overlapping placed buffers; it is sorted in place.
inline std::uint64_t place(std::vector<std::pair<std::uint64_t, std::uint64_t>>& busy,
                           std::uint64_t size, std::uint64_t alignment, Fit fit) {
  std::sort(busy.begin(), busy.end());
  GapScan scan(size, alignment, fit);
  for (const auto& [off, end] : busy) scan.add(off, end);
  return scan.result();
}

}  // namespace luma::core
