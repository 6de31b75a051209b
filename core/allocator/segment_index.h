// segment_index.h - the segments of one allocator sorted by base address: which segment
// holds an address (a free of a pointer the allocator does not own, block_of,
// segment_of), and the order of every walk over them.
//
// Sorted runs of at most kRun segments, in a list of runs sorted by their first base; each
// run keeps its bases beside the records, so a search reads two small arrays and no
// segment record but the one it finds. An insert or an erase moves at most kRun entries
// of one run and, when a run splits or empties, the list's pointers: with 70,000 segments
// (10^6 live blocks of the allocator benchmark) one sorted array moved half of all
// 70,000 pointers at each growth and each release (11 us apiece), more than the device
// calls they accompany cost there (docs/placement.md, "Speed").
//
// reserve_insert() is the only call that allocates (and may throw std::bad_alloc before
// anything changed); insert() after it, erase() and the walks never allocate.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "allocator/block.h"

namespace luma::core {

class SegmentIndex {
 public:
  static constexpr std::size_t kRun = 128;

  SegmentIndex() = default;
  SegmentIndex(const SegmentIndex&) = delete;
  SegmentIndex& operator=(const SegmentIndex&) = delete;

  // Room for one insert without allocating (a run to split into, a slot in the list).
  void reserve_insert() {
    if (spare_.empty()) {
      all_.reserve(all_.size() + 1);
      spare_.reserve(all_.size() + 1);  // so that giving a run back never allocates
      all_.push_back(std::make_unique<Run>());
      spare_.push_back(all_.back().get());
    }
    if (runs_.size() == runs_.capacity()) runs_.reserve(std::max<std::size_t>(16, runs_.capacity() * 2));
  }

  // s, not held yet, with a base no held segment has; reserve_insert() came first.
  void insert(Segment* s) noexcept {
    if (runs_.empty()) {
      runs_.push_back(take_spare());
      put(runs_[0], 0, s);
      ++size_;
      return;
    }
    std::size_t r = run_for(s->base);
    Run* run = runs_[r];
    if (run->n == kRun) {  // split in halves; the new run follows this one
      Run* half = take_spare();
      const std::uint32_t keep = kRun / 2;
      half->n = run->n - keep;
      std::copy_n(run->bases + keep, half->n, half->bases);
      std::copy_n(run->items + keep, half->n, half->items);
      run->n = keep;
      runs_.insert(runs_.begin() + static_cast<std::ptrdiff_t>(r + 1), half);
      if (s->base >= half->bases[0]) run = runs_[++r];
    }
    put(run, position(run, s->base), s);
    ++size_;
  }

  // s, held.
  void erase(const Segment* s) noexcept {
    const std::size_t r = run_for(s->base);
    Run* run = runs_[r];
    const std::uint32_t i = position(run, s->base);
    std::copy(run->bases + i + 1, run->bases + run->n, run->bases + i);
    std::copy(run->items + i + 1, run->items + run->n, run->items + i);
    --run->n;
    --size_;
    if (run->n == 0) {  // kept for the next split, so inserts rarely allocate
      runs_.erase(runs_.begin() + static_cast<std::ptrdiff_t>(r));
      give_back(run);
      return;
    }
    // A run and its successor that fit in half a run together become one, so runs stay
    // at least a quarter full after erases and the list stays short.
    if (r + 1 < runs_.size() && run->n + runs_[r + 1]->n <= kRun / 2) {
      Run* next = runs_[r + 1];
      std::copy_n(next->bases, next->n, run->bases + run->n);
      std::copy_n(next->items, next->n, run->items + run->n);
      run->n += next->n;
      next->n = 0;
      runs_.erase(runs_.begin() + static_cast<std::ptrdiff_t>(r + 1));
      give_back(next);
    }
  }

  // The segment whose range holds addr, or nullptr.
  Segment* containing(std::uintptr_t addr) const noexcept {
    if (runs_.empty() || addr < runs_[0]->bases[0]) return nullptr;
    const Run* run = runs_[run_for(addr)];
    const std::uint32_t i = static_cast<std::uint32_t>(std::upper_bound(run->bases, run->bases + run->n, addr) - run->bases);
    Segment* s = run->items[i - 1];  // i >= 1: addr >= the run's first base
    return addr - s->base < s->size ? s : nullptr;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  // f(Segment*) for every segment, in address order; f must not change the index.
  template <typename F>
  void for_each(F&& f) const {
    for (const Run* run : runs_)
      for (std::uint32_t i = 0; i < run->n; ++i) f(run->items[i]);
  }

  // Drops every segment for which pred(Segment*) is true, calling it once per segment in
  // address order; pred must not change the index.
  template <typename P>
  void remove_if(P&& pred) {
    std::size_t kept_runs = 0;
    for (Run* run : runs_) {
      std::uint32_t k = 0;
      for (std::uint32_t i = 0; i < run->n; ++i) {
        if (pred(run->items[i])) continue;
        run->bases[k] = run->bases[i];
        run->items[k] = run->items[i];
        ++k;
      }
      size_ -= run->n - k;
      run->n = k;
      if (k != 0) {
        runs_[kept_runs++] = run;
      } else {
        give_back(run);
      }
    }
    runs_.resize(kept_runs);
  }

  // Forgets every segment (the records are the caller's).
  void clear() noexcept {
    for (Run* run : runs_) {
      run->n = 0;
      give_back(run);
    }
    runs_.clear();
    size_ = 0;
  }

  // For check(): the runs' own consistency (bases sorted and equal to their records',
  // no run empty); false at the first fault.
  bool consistent() const noexcept {
    std::uintptr_t last = 0;
    std::size_t n = 0;
    for (const Run* run : runs_) {
      if (run->n == 0 || run->n > kRun) return false;
      for (std::uint32_t i = 0; i < run->n; ++i) {
        if (run->items[i] == nullptr || run->bases[i] != run->items[i]->base) return false;
        if (n != 0 && run->bases[i] <= last) return false;
        last = run->bases[i];
        ++n;
      }
    }
    return n == size_;
  }

 private:
  struct Run {
    std::uint32_t n = 0;
    std::uintptr_t bases[kRun];
    Segment* items[kRun];
  };

  // The run an address belongs to: the last whose first base is not above it (the
  // first run when it lies before all).
  std::size_t run_for(std::uintptr_t addr) const noexcept {
    auto it = std::upper_bound(runs_.begin(), runs_.end(), addr,
                               [](std::uintptr_t a, const Run* run) { return a < run->bases[0]; });
    return it == runs_.begin() ? 0 : static_cast<std::size_t>(it - runs_.begin()) - 1;
  }
  static std::uint32_t position(const Run* run, std::uintptr_t base) noexcept {
    return static_cast<std::uint32_t>(std::lower_bound(run->bases, run->bases + run->n, base) - run->bases);
  }
  static void put(Run* run, std::uint32_t i, Segment* s) noexcept {
    std::copy_backward(run->bases + i, run->bases + run->n, run->bases + run->n + 1);
    std::copy_backward(run->items + i, run->items + run->n, run->items + run->n + 1);
    run->bases[i] = s->base;
    run->items[i] = s;
    ++run->n;
  }
  Run* take_spare() noexcept {  // reserve_insert made sure there is one
    Run* run = spare_.back();
    spare_.pop_back();
    return run;
  }
  void give_back(Run* run) noexcept { spare_.push_back(run); }  // capacity: reserve_insert

  std::vector<Run*> runs_;  // in use, sorted by first base
  std::size_t size_ = 0;
  std::vector<std::unique_ptr<Run>> all_;  // every run made, in use or spare
  std::vector<Run*> spare_;
};

}  // namespace luma::core
