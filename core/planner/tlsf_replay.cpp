// tlsf_replay.cpp - replays lifetimes through the TLSF (see tlsf_replay.h).
#include "planner/tlsf_replay.h"

#include <algorithm>

#include "planner/planner_constants.h"
#include "planner/tlsf.h"

namespace luma::core {

namespace {

// An alloc carries its rounded size and alignment, so the replay reads only the events
// in order (looking them up in the lifetimes, in input order, was a cache miss each).
struct Event {
  std::uint64_t time;
  std::uint64_t key;  // input index, | kAllocBit for an alloc
  std::uint64_t size;
  std::uint64_t alignment;
};
constexpr std::uint64_t kAllocBit = std::uint64_t{1} << 63;

// Stable LSD radix sort by time, a byte per pass; passes where every time has the same
// byte are skipped (times below 2^24 take three passes). Linear, unlike the comparison
// sort that dominated the replay.
void sort_events_by_time(std::vector<Event>& events) {
  constexpr int kBytes = 8;
  std::vector<std::size_t> counts(kBytes * 256, 0);
  for (const Event& e : events)
    for (int b = 0; b < kBytes; ++b) ++counts[b * 256 + ((e.time >> (8 * b)) & 0xff)];
  std::vector<Event> scratch(events.size());
  for (int b = 0; b < kBytes; ++b) {
    std::size_t* count = &counts[static_cast<std::size_t>(b) * 256];
    if (std::any_of(count, count + 256, [&](std::size_t c) { return c == events.size(); }))
      continue;  // every event has the same byte here
    std::size_t sum = 0;
    for (int d = 0; d < 256; ++d) {
      std::size_t c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (const Event& e : events) scratch[count[(e.time >> (8 * b)) & 0xff]++] = e;
    events.swap(scratch);
  }
}

}  // namespace

Plan plan_tlsf_replay(const std::vector<Lifetime>& lifetimes) {
  using namespace planner;
  Plan plan;
  plan.strategy = "tlsf";
  plan.offsets.assign(lifetimes.size(), 0);
  // Frees first, then allocs, each in input order; a stable sort by time then gives
  // (time, frees before allocs, input order) - tinygrad's replay order.
  std::vector<Event> events;
  events.reserve(lifetimes.size() * 2);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < lifetimes.size(); ++i) {
    const Lifetime& lt = lifetimes[i];
    if (lt.lower >= lt.upper) continue;
    total += (lt.size + kReplayRound - 1) / kReplayRound * kReplayRound;
    events.push_back({lt.upper, i, 0, 0});
  }
  for (std::size_t i = 0; i < lifetimes.size(); ++i)
    if (lifetimes[i].lower < lifetimes[i].upper)
      events.push_back({lifetimes[i].lower, i | kAllocBit,
                        (lifetimes[i].size + kReplayRound - 1) / kReplayRound * kReplayRound,
                        lifetimes[i].alignment});
  sort_events_by_time(events);
  // Headroom beyond twice the total only matters for alignment heads, which the factor of
  // two already covers for any alignment up to the buffer's own rounded size.
  Tlsf tlsf(std::max<std::uint64_t>(total * kReplayArenaFactor, kTlsfBlockSize), 0,
            kTlsfBlockSize, kTlsfLevel2Count);
  for (const Event& ev : events) {
    std::size_t i = ev.key & ~kAllocBit;
    if (ev.key & kAllocBit) {
      plan.offsets[i] = tlsf.alloc(ev.size, ev.alignment);
    } else {
      tlsf.free(plan.offsets[i]);
    }
  }
  plan.arena = arena_of(lifetimes, plan.offsets);
  return plan;
}

}  // namespace luma::core
