// replay_test_util.h - what the plan replay tests share: plans built from lifetimes (by the
// real planner) or by hand, event and divergence recorders, a device that hands out the
// same arena address every time (a deterministic driver, for "identical addresses across
// two replays"), tags written into blocks to prove data survives, and an independent
// oracle of live address ranges that fails a test on any overlap.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/event.h"
#include "plan/plan_file.h"
#include "replay/plan_replay.h"
#include "planner/lifetime.h"
#include "planner/planner.h"

namespace luma::core::testing {

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += "\n  " + l;
  return out;
}

// Every invariant check() knows, as one assertion that prints all violations.
#define LUMA_REPLAY_CLEAN(x)                                                          \
  do {                                                                                \
    const std::vector<std::string> violations_ = (x).check();                         \
    EXPECT_TRUE(violations_.empty()) << ::luma::core::testing::joined(violations_); \
  } while (false)

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

class RecordingSink final : public EventSink {
 public:
  void on_event(const Event& e) noexcept override { events.push_back(e); }
  std::size_t count(EventKind kind) const {
    std::size_t n = 0;
    for (const Event& e : events) n += e.kind == kind ? 1 : 0;
    return n;
  }
  std::vector<Event> events;
};

class RecordingDivergences final : public DivergenceSink {
 public:
  void on_divergence(int device, const Divergence& d) noexcept override {
    devices.push_back(device);
    seen.push_back(d);
  }
  std::vector<int> devices;
  std::vector<Divergence> seen;
};

// One planned allocation per (requested, size, offset); arena = the largest end.
struct Placed {
  std::uint64_t requested, size, offset;
};
inline DevicePlanFile manual_plan(const std::vector<Placed>& placed, int device = 0) {
  DevicePlanFile d;
  d.device = device;
  d.alignment = 256;
  for (const Placed& p : placed) {
    PlannedAllocation a;
    a.name = std::to_string(d.allocations.size());
    a.requested = p.requested;
    a.size = p.size;
    a.offset = p.offset;
    d.arena = std::max(d.arena, p.offset + p.size);
    d.allocations.push_back(a);
  }
  return d;
}

// Lifetimes in allocation-index time: allocation k lives [k, free_at[k]).
inline std::vector<Lifetime> sequence_lifetimes(const std::vector<std::uint64_t>& sizes,
                                                const std::vector<std::uint64_t>& free_at) {
  std::vector<Lifetime> out;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    Lifetime l;
    l.id = std::to_string(k);
    l.lower = k;
    l.upper = free_at[k];
    l.size = sizes[k];
    l.alignment = 256;
    out.push_back(l);
  }
  return out;
}

// The planner's plan of `lifetimes` (in sequence order) as a device plan file.
inline DevicePlanFile planned(const std::vector<Lifetime>& lifetimes, const std::vector<std::uint64_t>& requested,
                              Strategy strategy = Strategy::greedy) {
  SearchOptions search;
  search.max_iterations = 2000;
  const PlanReport r = plan_lifetimes(lifetimes, strategy, search);
  DevicePlanFile d;
  d.arena = r.chosen.arena;
  d.alignment = 256;
  d.lower_bound = r.lower_bound;
  d.strategy = r.chosen.strategy;
  for (std::size_t k = 0; k < lifetimes.size(); ++k) {
    PlannedAllocation a;
    a.name = lifetimes[k].id;
    a.requested = requested.empty() ? lifetimes[k].size : requested[k];
    a.size = lifetimes[k].size;
    a.offset = r.chosen.offsets[k];
    a.lower = lifetimes[k].lower;
    a.upper = lifetimes[k].upper;
    d.allocations.push_back(a);
  }
  return d;
}

// A device whose arena is always at the same address: one buffer, reserved at most once at
// a time (what a deterministic driver gives two runs of the same program).
class FixedBaseDevice final : public Device {
 public:
  explicit FixedBaseDevice(std::size_t capacity) : capacity_(capacity) {
    base_ = std::aligned_alloc(4096, capacity);
  }
  ~FixedBaseDevice() override { std::free(base_); }
  FixedBaseDevice(const FixedBaseDevice&) = delete;
  FixedBaseDevice& operator=(const FixedBaseDevice&) = delete;

  Reservation reserve(std::size_t bytes) noexcept override {
    ++reserves;
    if (held_ || bytes > capacity_) return Reservation::out_of_memory();
    held_ = true;
    return {base_, 0};
  }
  bool release(void* base, std::size_t) noexcept override {
    if (!held_ || base != base_) return false;
    held_ = false;
    return true;
  }
  FenceMode fence_mode() const noexcept override { return FenceMode::none; }
  int reserves = 0;

 private:
  std::size_t capacity_;
  void* base_ = nullptr;
  bool held_ = false;
};

// A tag at both ends of a block, to prove its bytes were never handed to anyone else.
inline void write_tag(void* p, std::size_t size, std::uint64_t tag) {
  std::memcpy(p, &tag, sizeof tag);
  std::memcpy(static_cast<char*>(p) + size - sizeof tag, &tag, sizeof tag);
}
inline bool has_tag(const void* p, std::size_t size, std::uint64_t tag) {
  std::uint64_t a = 0, b = 0;
  std::memcpy(&a, p, sizeof a);
  std::memcpy(&b, static_cast<const char*>(p) + size - sizeof b, sizeof b);
  return a == tag && b == tag;
}

// The live address ranges the program holds, checked independently of the allocator:
// add() fails the test when a new block overlaps one still held.
class LiveRanges {
 public:
  void add(const void* p, std::size_t size) {
    const std::uintptr_t a = addr(p), e = a + size;
    auto it = live_.lower_bound(a);
    if (it != live_.end()) {
      EXPECT_GE(it->first, e) << "block " << a << " overlaps a live block at " << it->first;
    }
    if (it != live_.begin()) {
      --it;
      EXPECT_LE(it->second, a) << "block " << a << " overlaps a live block at " << it->first;
    }
    live_[a] = e;
  }
  void remove(const void* p) { live_.erase(addr(p)); }
  std::size_t size() const { return live_.size(); }

 private:
  std::map<std::uintptr_t, std::uintptr_t> live_;
};

}  // namespace luma::core::testing
