// oom_watch_sink_test.cpp - OomWatchSink (shim/observe/oom_watch_sink.h), the per-allocator
// tables behind the out-of-memory report's call sites and snapshot: the live-block table
// holds exactly the blocks allocated and not yet completed (checked against a model
// through many allocs and frees whose addresses collide in the table, so deletion must
// move entries back), frees carry their alloc's requested size and stack, each distinct
// stack is kept once, the ring keeps the last events in order, and a full table drops
// (and counts) what does not fit. It forwards every event to the next sink.
#include "observe/oom_watch_sink.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <thread>
#include <vector>

#include "observe/call_context.h"

namespace luma::shim {
namespace {

using core::Event;
using core::EventKind;

struct CountingSink final : core::EventSink {
  std::size_t events = 0;
  void on_event(const Event&) noexcept override { ++events; }
};

void alloc(OomWatchSink& s, std::uint64_t addr, std::uint64_t size, std::uint64_t requested,
           std::vector<std::uint64_t> stack = {}) {
  CallContext& c = call_context();
  c.depth = static_cast<std::uint32_t>(stack.size());
  std::copy(stack.begin(), stack.end(), c.stack);
  s.on_event(Event{EventKind::alloc, 0, addr, size, requested});
  c.depth = 0;
}
void free_block(OomWatchSink& s, std::uint64_t addr, std::uint64_t size) {
  s.on_event(Event{EventKind::free_requested, 0, addr, size, 0});
  s.on_event(Event{EventKind::free_completed, 0, addr, size, 0});
}

TEST(OomWatchSink, LiveTableMatchesAModelThroughCollidingAllocsAndFrees) {
  OomWatchSink s(nullptr, 4, 0);
  std::map<std::uint64_t, std::uint64_t> model;  // address -> requested
  std::mt19937_64 rng(7);
  // Addresses 1 MiB apart: their low bits agree, so the hash alone spreads them; many
  // share a probe run at a few thousand live blocks.
  for (int step = 0; step < 200'000; ++step) {
    const std::uint64_t addr = (1 + rng() % 5000) << 20;
    if (model.count(addr)) {
      free_block(s, addr, 512);
      model.erase(addr);
    } else {
      alloc(s, addr, 512, 100 + addr % 400);
      model[addr] = 100 + addr % 400;
    }
  }
  const OomWatchSink::Copy c = s.copy();
  std::map<std::uint64_t, std::uint64_t> kept;
  for (const auto& b : c.live) kept[b.address] = b.requested;
  EXPECT_EQ(kept, model);
  EXPECT_EQ(c.dropped_blocks, 0u);
}

TEST(OomWatchSink, FreesCarryTheirAllocsSizeAndStackAndStacksAreKeptOnce) {
  OomWatchSink s(nullptr, 4, 100);
  alloc(s, 0x1000, 512, 300, {0xa, 0xb});
  alloc(s, 0x2000, 512, 200, {0xa, 0xb});
  alloc(s, 0x3000, 1024, 1000, {0xc});
  s.on_event(Event{EventKind::free_requested, 0, 0x2000, 512, 0});
  const OomWatchSink::Copy c = s.copy();
  ASSERT_EQ(c.stacks.size(), 2u);
  EXPECT_EQ(c.stacks[0], (std::vector<std::uint64_t>{0xa, 0xb}));
  EXPECT_EQ(c.stacks[1], (std::vector<std::uint64_t>{0xc}));
  ASSERT_EQ(c.events.size(), 4u);
  EXPECT_EQ(c.events[3].kind, EventKind::free_requested);
  EXPECT_EQ(c.events[3].requested, 200u);
  EXPECT_EQ(c.events[3].stack, 1u);
  EXPECT_EQ(c.events[2].stack, 2u);
  ASSERT_EQ(c.live.size(), 3u);
  for (const auto& b : c.live) EXPECT_EQ(b.pending, b.address == 0x2000) << b.address;
}

TEST(OomWatchSink, TheRingKeepsTheLastEventsInOrderAndForwardsEveryEvent) {
  CountingSink next;
  OomWatchSink s(&next, 0, 1000);
  for (std::uint64_t i = 1; i <= 2500; ++i) alloc(s, i << 12, 512, i);
  EXPECT_EQ(next.events, 2500u);
  const OomWatchSink::Copy c = s.copy();
  ASSERT_EQ(c.events.size(), 1000u);
  for (std::size_t k = 0; k < c.events.size(); ++k) EXPECT_EQ(c.events[k].requested, 1501 + k);
  for (std::size_t k = 1; k < c.events.size(); ++k) EXPECT_LE(c.events[k - 1].time_us, c.events[k].time_us);
}

TEST(OomWatchSink, FullTablesDropAndCountWhatDoesNotFit) {
  OomWatchSink s(nullptr, 1, 0);
  const std::uint64_t room = kOomBlockSlots / 8 * 7;
  for (std::uint64_t i = 1; i <= room + 10; ++i) alloc(s, i << 9, 512, 512, {i % (kOomMaxStacks + 5) + 1});
  const OomWatchSink::Copy c = s.copy();
  EXPECT_EQ(c.live.size(), room);
  EXPECT_EQ(c.dropped_blocks, 10u);
  EXPECT_EQ(c.stacks.size(), kOomMaxStacks);
  EXPECT_GT(c.dropped_stacks, 0u);
}

// The out-of-memory path copies while other threads' events arrive (each under its
// allocator's lock, here one thread): every copy is a consistent state.
TEST(OomWatchSink, CopiesWhileEventsArriveAreConsistent) {
  OomWatchSink s(nullptr, 2, 500);
  std::thread events([&] {
    for (std::uint64_t i = 1; i <= 50'000; ++i) {
      alloc(s, i << 12, 512, i % 500 + 1, {i % 7 + 1, 0x99});
      if (i > 8) free_block(s, (i - 8) << 12, 512);
    }
  });
  for (int k = 0; k < 200; ++k) {
    const OomWatchSink::Copy c = s.copy();
    EXPECT_LE(c.live.size(), 9u);
    for (const auto& b : c.live) {
      EXPECT_EQ(b.requested, (b.address >> 12) % 500 + 1);
      ASSERT_GE(b.stack, 1u);
      ASSERT_LE(b.stack, c.stacks.size());
      EXPECT_EQ(c.stacks[b.stack - 1][0], (b.address >> 12) % 7 + 1);
    }
  }
  events.join();
  EXPECT_EQ(s.copy().live.size(), 8u);
}

}  // namespace
}  // namespace luma::shim
