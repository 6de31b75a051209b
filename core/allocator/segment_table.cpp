// segment_table.cpp - SegmentTable's invariant, checked (segment_table.h); part of the
// allocator's invariant check (allocator_check.cpp), never on a hot path.
#include "allocator/segment_table.h"

#include <fmt/format.h>

namespace luma::core {

void SegmentTable::check(const std::function<void(std::string)>& fail) const {
  if (!sorted_.consistent()) fail("the segment index is inconsistent (bases unsorted or stale, or a run empty)");
  std::size_t wholly = 0;
  sorted_.for_each([&](const Segment* s) {
    if (s->wholly_free() != s->idle)
      fail(fmt::format("segment {:#x} is {}wholly free but {}listed as such", s->base, s->wholly_free() ? "" : "not ",
                       s->idle ? "" : "not "));
    wholly += s->wholly_free() ? 1 : 0;
    if (at(s->base) != s) fail(fmt::format("segment {:#x} is not in the base map", s->base));
    if (s->first == nullptr || s->first->self >= of_first_.size() || of_first_[s->first->self] != s)
      fail(fmt::format("segment {:#x} is not found from its first block", s->base));
  });
  if (at_.size() != sorted_.size())
    fail(fmt::format("the base map holds {} segments, {} are held", at_.size(), sorted_.size()));
  if (records_.in_use() != sorted_.size())
    fail(fmt::format("{} segment records in use, {} segments held", records_.in_use(), sorted_.size()));
  std::size_t listed = 0;
  for (std::size_t p = 0; p < kPools; ++p) {
    const char* pool = p == pool_index(Pool::small) ? "small" : "large";
    std::size_t n = 0;
    const Segment* prev = nullptr;
    for (const Segment* s = idle_[p].front(); s != nullptr && n <= sorted_.size(); prev = s, s = s->idle_next) {
      ++n;
      if (!s->idle || pool_index(s->pool) != p || s->idle_prev != prev)
        fail(fmt::format("{} pool's list of wholly free segments: entry {:#x} is wrong", pool, s->base));
    }
    if (n != idle_[p].size())
      fail(fmt::format("{} pool: {} wholly free segments listed, the list counts {}", pool, n, idle_[p].size()));
    listed += n;
  }
  if (listed != wholly) fail(fmt::format("{} segments are wholly free, {} listed", wholly, listed));
}

}  // namespace luma::core
