// segment_table.h - the segments one allocator holds, each listed in every way it is
// found: by address (segment_index.h, which segment holds an address), by base (an own
// segment's block finds its segment at its free; the check finds every segment), by its
// first block's record number (a block that becomes its segment's only one finds the
// segment with one load), and, while wholly free, in its pool's idle list
// (idle_segments.h: what release before growth gives back, oldest first).
// Its invariant: a segment is in all of these or in none, the idle lists hold exactly the
// wholly free segments, and every record is a segment held. add() and remove() keep it;
// check() proves it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "allocator/block.h"
#include "allocator/idle_segments.h"
#include "allocator/pointer_map.h"
#include "allocator/record_pool.h"
#include "allocator/segment_index.h"

namespace luma::core {

class SegmentTable {
 public:
  // Room for one more segment whose first block's number is at most max_first_block; may
  // throw (no host memory), before anything changes.
  void reserve_one(std::size_t max_first_block) {
    records_.ensure(1);
    at_.reserve_for(at_.size() + 1);
    sorted_.reserve_insert();
    if (of_first_.size() <= max_first_block) of_first_.resize(max_first_block + 1 + max_first_block / 2);
  }

  // A new segment [base, base + size) of pool p whose blocks start with `first` (room
  // reserved by reserve_one), listed everywhere but idle. Its other fields are default.
  Segment* add(std::uintptr_t base, std::size_t size, Pool p, Block* first) noexcept {
    Segment* s = records_.get();
    s->base = base;
    s->size = size;
    s->pool = p;
    s->first = first;
    of_first_[first->self] = s;  // written once: a segment's first block stays its first
    sorted_.insert(s);
    at_.insert(base, s);
    return s;
  }

  // s is no longer held: out of every list, its record given back.
  void remove(Segment* s) noexcept {
    sorted_.erase(s);
    unlist(s);
  }
  // Removes every segment for which f(s) is true (f may read s, and release it).
  template <class F>
  void remove_if(F&& f) {
    sorted_.remove_if([&](Segment* s) {
      if (!f(s)) return false;
      unlist(s);
      return true;
    });
  }
  // f(s) for each segment, then forgets them all.
  template <class F>
  void clear(F&& f) {
    sorted_.for_each([&](Segment* s) {
      f(s);
      unlist(s);
    });
    sorted_.clear();
  }

  // The segment holding addr; nullptr if none.
  Segment* containing(std::uintptr_t addr) const noexcept { return sorted_.containing(addr); }
  // The segment based at base; nullptr if none.
  Segment* at(std::uintptr_t base) const noexcept {
    Segment* const* s = at_.find(base);
    return s != nullptr ? *s : nullptr;
  }
  // The segment whose first block is b (b->prev == nullptr).
  [[gnu::always_inline]] Segment* of_first(const Block* b) const noexcept { return of_first_[b->self]; }

  // The wholly free segments of pool p, in the order they became so: read-only, so that
  // only the table lists and unlists them (became_idle, no_longer_idle, remove).
  const IdleSegments& idle(Pool p) const noexcept { return idle_[pool_index(p)]; }
  // s (listed) became wholly free: it goes to the back of its pool's idle list.
  [[gnu::always_inline]] void became_idle(Segment* s) noexcept { idle_[pool_index(s->pool)].push_back(s); }
  // s (idle) is no longer wholly free: a block of it is taken.
  [[gnu::always_inline]] void no_longer_idle(Segment* s) noexcept { idle_[pool_index(s->pool)].remove(s); }

  template <class F>
  void for_each(F&& f) const {
    sorted_.for_each(f);
  }
  std::size_t size() const noexcept { return sorted_.size(); }
  std::size_t host_bytes() const noexcept {
    return records_.host_bytes() + at_.host_bytes() + of_first_.capacity() * sizeof(Segment*);
  }

  // The invariant, each failure told to fail().
  void check(const std::function<void(std::string)>& fail) const;

 private:
  void unlist(Segment* s) noexcept {
    if (s->idle) idle_[pool_index(s->pool)].remove(s);
    Segment* gone = nullptr;
    at_.take(s->base, &gone);
    records_.put(s);
  }

  RecordPool<Segment, 10> records_;  // 1024 per chunk: a program has few segments
  SegmentIndex sorted_;              // by base, in short sorted runs
  PointerMap<Segment*> at_;          // base -> segment
  // Each segment by its first block's record number. Entries of numbers that are not a
  // first block are stale and never read.
  std::vector<Segment*> of_first_;
  std::array<IdleSegments, kPools> idle_;
};

}  // namespace luma::core
