// tlsf_replay.cpp - replays lifetimes through the TLSF (see tlsf_replay.h).
//
// Speed (millions of events a second) comes from memory traffic, not arithmetic:
//  - the events are sorted as (time, event) pairs of 8 bytes (16 when times span more than
//    2^32; they were 32-byte records) by a stable LSD radix sort, 12 bits a pass (two
//    passes for times spanning up to 16 million), skipping passes whose digit is the same
//    for every event. Each pass streams through memory; a one-pass counting sort was tried
//    and was slower: it scatters every event to a random address, a cache and TLB miss each;
//  - an event is then 4 bytes: the buffer's index and whether it is an alloc;
//  - the only per-buffer state is the plan's own offset entry: before the replay it holds
//    the rounded size with the alignment's log2 in its low byte (rounded sizes are
//    multiples of 256), while the buffer is live its TLSF block handle, and after the free
//    its offset. The alloc's read of that entry is a cache miss (a buffer's events are far
//    apart in input order), so it is prefetched a few events ahead; the free finds it in
//    cache, written a few hundred events before;
//  - the TLSF is driven by block handles, so no offset map is touched per event.
// Memory: 8 bytes a buffer (the plan) plus 8-16 bytes an event for the sort, twice: linear.
#include "planner/tlsf_replay.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>
#include <string>

#include "planner/planner_constants.h"
#include "planner/tlsf.h"

namespace luma::core {

namespace {

constexpr std::uint32_t kAllocBit = 1;  // event = buffer index << 1 | kAllocBit for an alloc

static_assert(planner::kReplayRound >= 64 && (planner::kReplayRound & (planner::kReplayRound - 1)) == 0,
              "rounded sizes leave the low byte free for an alignment's log2");
constexpr std::uint64_t kLog2Mask = 0x3f;

template <class Key>
struct Keyed {
  Key time;
  std::uint32_t event;
};

// Stable LSD radix sort by time.
template <class Key>
void radix_sort(std::vector<Keyed<Key>>& v, std::uint64_t max_time) {
  constexpr int kBits = 12;
  constexpr std::size_t kDigits = std::size_t{1} << kBits;
  std::vector<Keyed<Key>> scratch(v.size());
  std::vector<std::size_t> count(kDigits);
  for (int shift = 0; shift < 64 && (max_time >> shift) != 0; shift += kBits) {
    std::fill(count.begin(), count.end(), 0);
    for (const Keyed<Key>& e : v) ++count[(e.time >> shift) & (kDigits - 1)];
    if (*std::max_element(count.begin(), count.end()) == v.size()) continue;  // one digit
    std::size_t sum = 0;
    for (std::size_t& c : count) {
      const std::size_t n = c;
      c = sum;
      sum += n;
    }
    for (const Keyed<Key>& e : v) scratch[count[(e.time >> shift) & (kDigits - 1)]++] = e;
    v.swap(scratch);
  }
}

// The events of the live buffers (lower < upper) in replay order: by time, frees before
// allocs, each in input order (tinygrad's planner). Generated frees first then allocs, each
// in input order, so a stable sort by time alone gives that order.
template <class Key>
std::vector<Keyed<Key>> sorted_events(const std::vector<Lifetime>& lifetimes, std::uint64_t first,
                                      std::uint64_t span, std::size_t live) {
  std::vector<Keyed<Key>> keyed(2 * live);
  std::size_t frees = 0, allocs = live;
  for (std::uint32_t i = 0; i < lifetimes.size(); ++i) {
    const Lifetime& lt = lifetimes[i];
    if (lt.lower >= lt.upper) continue;
    keyed[frees++] = {static_cast<Key>(lt.upper - first), i << 1};
    keyed[allocs++] = {static_cast<Key>(lt.lower - first), i << 1 | kAllocBit};
  }
  radix_sort(keyed, span);
  return keyed;
}

// Replays the sorted events; `entry` is the plan's offsets, holding each live buffer's
// rounded size | log2(alignment) (see the top).
template <class Key>
void replay(const std::vector<Keyed<Key>>& events, Tlsf& tlsf, std::uint64_t* entry) {
  const std::size_t n = events.size();
  for (std::size_t k = 0; k < n; ++k) {
    if (k + planner::kReplayPrefetchDistance < n) {
      const std::uint32_t ahead = events[k + planner::kReplayPrefetchDistance].event;
      if (ahead & kAllocBit) __builtin_prefetch(entry + (ahead >> 1), 1);
    }
    const std::uint32_t event = events[k].event;
    std::uint64_t& e = entry[event >> 1];
    if (event & kAllocBit) {
      e = tlsf.alloc_block(e & ~kLog2Mask, std::uint64_t{1} << (e & kLog2Mask));
    } else {
      const auto block = static_cast<Tlsf::Handle>(e);
      e = tlsf.offset_of(block);
      tlsf.free_block(block);
    }
  }
}

}  // namespace

Plan plan_tlsf_replay(const std::vector<Lifetime>& lifetimes) {
  using namespace planner;
  if (lifetimes.size() > (std::numeric_limits<std::uint32_t>::max() >> 1))
    throw std::invalid_argument("TLSF replay: more than 2^31 buffers");
  Plan plan;
  plan.strategy = "tlsf";
  // Each live buffer's entry starts as its rounded size | log2(alignment) (see the top).
  plan.offsets.assign(lifetimes.size(), 0);
  std::uint64_t total = 0, first = std::numeric_limits<std::uint64_t>::max(), last = 0;
  std::uint64_t head_room = 0;  // for alignments above the buffer's size (see below)
  std::size_t live = 0;
  for (std::size_t i = 0; i < lifetimes.size(); ++i) {
    const Lifetime& lt = lifetimes[i];
    if (lt.lower >= lt.upper) continue;  // never live: offset 0
    if (lt.size > kReplayMaxSize)
      throw std::invalid_argument("TLSF replay: buffer " + lt.id + " is too large");
    const std::uint64_t align = lt.alignment == 0 ? 1 : lt.alignment;
    if ((align & (align - 1)) != 0)
      throw std::invalid_argument("TLSF replay: alignment of buffer " + lt.id +
                                  " is not a power of two");
    const std::uint64_t rounded = (lt.size + kReplayRound - 1) / kReplayRound * kReplayRound;
    plan.offsets[i] = rounded | static_cast<std::uint64_t>(std::countr_zero(align));
    total += rounded;
    if (align > rounded) head_room += align;
    if (total > kReplayMaxSize || head_room > kReplayMaxSize)
      throw std::invalid_argument("TLSF replay: the buffers total too much");
    first = std::min(first, lt.lower);
    last = std::max(last, lt.upper);
    ++live;
  }
  const std::uint64_t span = live == 0 ? 0 : last - first;
  // tinygrad's arena: twice the total. Alignment heads fit in that for any alignment up to
  // the buffer's own rounded size; a buffer aligned beyond its size (never from an RMM log:
  // 256) could run it out of memory, so each such alignment is added (decision: inputs that
  // do not need it replay exactly as tinygrad's).
  Tlsf tlsf(std::max<std::uint64_t>(total * kReplayArenaFactor + head_room, kTlsfBlockSize), 0,
            kTlsfBlockSize, kTlsfLevel2Count);
  if (span <= std::numeric_limits<std::uint32_t>::max())
    replay(sorted_events<std::uint32_t>(lifetimes, first, span, live), tlsf, plan.offsets.data());
  else
    replay(sorted_events<std::uint64_t>(lifetimes, first, span, live), tlsf, plan.offsets.data());
  plan.arena = arena_of(lifetimes, plan.offsets);
  return plan;
}

}  // namespace luma::core
