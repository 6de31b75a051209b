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

// `busy` holds (offset, end) of the overlapping placed buffers; it is sorted in place.
inline std::uint64_t place(std::vector<std::pair<std::uint64_t, std::uint64_t>>& busy,
                           std::uint64_t size, std::uint64_t alignment, Fit fit) {
  std::sort(busy.begin(), busy.end());
  std::uint64_t cursor = 0;
  std::uint64_t best = 0, best_gap = ~std::uint64_t{0};
  bool found = false;
  for (const auto& [off, end] : busy) {
    if (off > cursor) {
      std::uint64_t start = align_up(cursor, alignment);
      if (start + size <= off) {
        if (fit == Fit::first) return start;
        std::uint64_t gap = off - cursor;
        if (gap < best_gap) {
          best_gap = gap;
          best = start;
          found = true;
        }
      }
    }
    cursor = std::max(cursor, end);
  }
  return found ? best : align_up(cursor, alignment);
}

}  // namespace luma::core
