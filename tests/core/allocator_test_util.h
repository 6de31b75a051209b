// allocator_test_util.h - what the caching allocator's tests share: an event recorder and
// the "consistency is clean" assertion every test makes after each operation.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "base/event.h"

namespace luma::core::testing {

// The placement of PyTorch's CUDACachingAllocator with its defaults (20 MiB shared
// segments, every block splittable, segments released only by empty_cache and the
// out-of-memory path, no tight placement near a limit): what the tests of the pools,
// splits, counters and the out-of-memory path describe, with PyTorch's numbers. luma's
// own defaults differ (constants.h, docs/placement.md) and are tested by simulation.
inline AllocatorOptions pytorch_placement() {
  AllocatorOptions o;
  o.large_segment = 20u << 20;
  o.max_split_size = ~std::size_t{0};
  o.release_free_segments = false;
  o.pressure_divisor = 0;
  return o;
}

// Records every event; thread-safe only because the allocator calls it under its lock.
class RecordingSink final : public EventSink {
 public:
  void on_event(const Event& e) noexcept override { events.push_back(e); }
  std::vector<EventKind> kinds() const {
    std::vector<EventKind> k;
    for (const Event& e : events) k.push_back(e.kind);
    return k;
  }
  std::size_t count(EventKind kind) const {
    std::size_t n = 0;
    for (const Event& e : events) n += e.kind == kind ? 1 : 0;
    return n;
  }
  std::vector<Event> events;
};

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += "\n  " + l;
  return out;
}

// Every invariant check() knows, as one assertion that prints all violations.
#define LUMA_EXPECT_CLEAN(alloc)                                                  \
  do {                                                                            \
    const std::vector<std::string> violations_ = (alloc).check();                 \
    EXPECT_TRUE(violations_.empty()) << ::luma::core::testing::joined(violations_); \
  } while (false)
#define LUMA_ASSERT_CLEAN(alloc)                                                  \
  do {                                                                            \
    const std::vector<std::string> violations_ = (alloc).check();                 \
    ASSERT_TRUE(violations_.empty()) << ::luma::core::testing::joined(violations_); \
  } while (false)

inline void* must_alloc(CachingAllocator& a, std::size_t bytes) {
  const AllocResult r = a.allocate(bytes);
  EXPECT_EQ(r.status, AllocStatus::ok) << "allocate(" << bytes << ")";
  EXPECT_NE(r.ptr, nullptr);
  return r.ptr;
}

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace luma::core::testing
