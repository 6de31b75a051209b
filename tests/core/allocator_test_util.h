// allocator_test_util.h - what the caching allocator's tests share: an event recorder and
// the "consistency is clean" assertion every test makes after each operation.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/event.h"

namespace luma::core::testing {

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
