// idle_segments.h - the wholly free segments of one pool, in the order they became wholly
// free: an intrusive doubly linked list through the segment records (Segment::idle_*), so
// that releasing them before growth, at empty_cache or near a memory limit touches only
// the segments it releases, whatever the number of segments held. With 10^6 live blocks
// (70,000 segments) a walk over every segment to find the few wholly free ones cost more
// than the alloc+free pairs between two growths together (docs/placement.md, "Speed").
// The head is the segment free the longest: growth releases the other pool's least
// recently freed first.
#pragma once

#include <cstddef>

#include "allocator/block.h"

namespace luma::core {

class IdleSegments {
 public:
  // s became wholly free (its one block is free): it goes to the back.
  void push_back(Segment* s) noexcept {
    s->idle = true;
    s->idle_prev = tail_;
    s->idle_next = nullptr;
    (tail_ != nullptr ? tail_->idle_next : head_) = s;
    tail_ = s;
    ++count_;
  }

  // s is listed and is no longer wholly free (taken, released or forgotten).
  void remove(Segment* s) noexcept {
    (s->idle_prev != nullptr ? s->idle_prev->idle_next : head_) = s->idle_next;
    (s->idle_next != nullptr ? s->idle_next->idle_prev : tail_) = s->idle_prev;
    s->idle = false;
    s->idle_prev = s->idle_next = nullptr;
    --count_;
  }

  Segment* front() const noexcept { return head_; }
  std::size_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  void clear() noexcept {
    for (Segment* s = head_; s != nullptr;) {
      Segment* next = s->idle_next;
      s->idle = false;
      s->idle_prev = s->idle_next = nullptr;
      s = next;
    }
    head_ = tail_ = nullptr;
    count_ = 0;
  }

 private:
  Segment* head_ = nullptr;
  Segment* tail_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace luma::core
