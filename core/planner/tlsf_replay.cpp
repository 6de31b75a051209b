// tlsf_replay.cpp - replays lifetimes through the TLSF (see tlsf_replay.h).
#include "planner/tlsf_replay.h"

#include <algorithm>

#include "planner/planner_constants.h"
#include "planner/tlsf.h"

namespace luma::core {

Plan plan_tlsf_replay(const std::vector<Lifetime>& lifetimes) {
  using namespace planner;
  Plan plan;
  plan.strategy = "tlsf";
  plan.offsets.assign(lifetimes.size(), 0);
  struct Ev {
    std::uint64_t time;
    std::uint64_t key;  // (is_alloc << 63) | input index: frees first, then input order
  };
  std::vector<Ev> events;
  events.reserve(lifetimes.size() * 2);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < lifetimes.size(); ++i) {
    const Lifetime& lt = lifetimes[i];
    if (lt.lower >= lt.upper) continue;
    total += (lt.size + kReplayRound - 1) / kReplayRound * kReplayRound;
    events.push_back({lt.lower, (std::uint64_t{1} << 63) | i});
    events.push_back({lt.upper, i});
  }
  std::sort(events.begin(), events.end(), [](const Ev& a, const Ev& b) {
    return a.time != b.time ? a.time < b.time : a.key < b.key;
  });
  // Headroom beyond twice the total only matters for alignment heads, which the factor of
  // two already covers for any alignment up to the buffer's own rounded size.
  Tlsf tlsf(std::max<std::uint64_t>(total * kReplayArenaFactor, kTlsfBlockSize), 0,
            kTlsfBlockSize, kTlsfLevel2Count);
  for (const Ev& ev : events) {
    std::size_t i = ev.key & ~(std::uint64_t{1} << 63);
    if (ev.key >> 63) {
      std::uint64_t rounded = (lifetimes[i].size + kReplayRound - 1) / kReplayRound * kReplayRound;
      plan.offsets[i] = tlsf.alloc(rounded, lifetimes[i].alignment);
    } else {
      tlsf.free(plan.offsets[i]);
    }
  }
  plan.arena = arena_of(lifetimes, plan.offsets);
  return plan;
}

}  // namespace luma::core
