// oom_watch_sink.h - what libluma.so keeps of one allocator's events for an out-of-memory
// error, when a trace is on and LUMA_TRACE_STACKS or LUMA_OOM_SNAPSHOT asks for it: the
// call stack and requested size of each live block (so the report can rank call sites by
// live bytes, and the snapshot draw each block's frames and size its frees as PyTorch
// does), and with LUMA_OOM_SNAPSHOT a ring of the last kOomRecentEvents events (the
// snapshot's device_traces). Attached in front of the allocator's trace sink, which it
// calls next: nothing is kept without a trace, and nothing at all costs anything when
// neither setting is on (no sink is made).
//
// Fixed tables, sized when the allocator is built: an event never allocates (it arrives
// under the allocator's lock). A table that is full drops what does not fit (counted):
// those blocks have no site and no frames. The sink's own mutex guards the tables; the
// out-of-memory path takes it alone (never while holding the allocator's lock) to copy
// them, so no lock order can deadlock.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "base/event.h"
#include "observe/call_context.h"
#include "io/oom_snapshot.h"

namespace luma::shim {

// The recent events a snapshot shows: the last steps of a typical training loop, bounded
// (PyTorch's own ring is sized by _record_memory_history's max_entries); each costs 56
// bytes per allocator.
inline constexpr std::size_t kOomRecentEvents = 10'000;
// Live blocks tracked per allocator (a power of two; 32 bytes each: 2 MiB), and distinct
// stacks (each depth x 8 bytes).
inline constexpr std::size_t kOomBlockSlots = std::size_t{1} << 16;
inline constexpr std::uint32_t kOomMaxStacks = 4096;

class OomWatchSink final : public core::EventSink {
 public:
  struct LiveBlock {
    std::uint64_t address = 0;  // 0: empty slot
    std::uint64_t requested = 0;
    std::uint64_t size = 0;
    std::uint32_t stack = 0;    // stack id (1-based); 0: none
    bool pending = false;       // freed by the program, fences not done yet
  };
  // What the out-of-memory path copies out (under the sink's mutex).
  struct Copy {
    std::vector<core::RecentEvent> events;     // oldest first
    std::vector<std::vector<std::uint64_t>> stacks;  // id - 1 indexes
    std::vector<LiveBlock> live;
    std::uint64_t dropped_blocks = 0, dropped_stacks = 0;
  };

  // `next`: the trace sink (may be nullptr); `depth`: frames per stack (LUMA_TRACE_STACKS);
  // `ring`: recent events kept (0: none). Allocates every table now (throws bad_alloc).
  OomWatchSink(core::EventSink* next, unsigned depth, std::size_t ring)
      : next_(next), depth_(depth), ring_(ring), blocks_(kOomBlockSlots),
        stack_frames_(static_cast<std::size_t>(depth) * kOomMaxStacks), stack_depth_(kOomMaxStacks),
        stack_index_(2 * kOomMaxStacks, 0) {}

  void on_event(const core::Event& e) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      record(e);
    }
    if (next_ != nullptr) next_->on_event(e);
  }

  Copy copy() const {
    Copy c;
    std::lock_guard<std::mutex> lock(mu_);
    c.events.reserve(ring_used_);
    const std::size_t first = ring_used_ < ring_.size() ? 0 : ring_next_;
    for (std::size_t i = 0; i < ring_used_; ++i) c.events.push_back(ring_[(first + i) % ring_.size()]);
    c.stacks.reserve(stacks_);
    for (std::uint32_t id = 1; id <= stacks_; ++id) {
      const std::uint64_t* f = &stack_frames_[static_cast<std::size_t>(id - 1) * depth_];
      c.stacks.emplace_back(f, f + stack_depth_[id - 1]);
    }
    c.live.reserve(live_count_);
    for (const LiveBlock& b : blocks_)
      if (b.address != 0) c.live.push_back(b);
    c.dropped_blocks = dropped_blocks_;
    c.dropped_stacks = dropped_stacks_;
    return c;
  }

 private:
  static std::uint64_t now_us() noexcept {
    timespec t{};
    clock_gettime(CLOCK_REALTIME, &t);
    return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000u + static_cast<std::uint64_t>(t.tv_nsec) / 1000;
  }
  static std::size_t hash(std::uint64_t x) noexcept {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return static_cast<std::size_t>(x);
  }

  void record(const core::Event& e) noexcept {
    const CallContext& c = call_context();
    core::RecentEvent r{e.kind, e.address, e.size, e.requested, c.stream, 0, 0};
    switch (e.kind) {
      case core::EventKind::alloc:
        r.stack = c.depth > 0 && depth_ > 0 ? intern({c.stack, std::min<std::size_t>(c.depth, depth_)}) : 0;
        insert({e.address, e.requested, e.size, r.stack, false});
        break;
      case core::EventKind::free_requested:
      case core::EventKind::free_completed:
        if (LiveBlock* b = find(e.address)) {
          r.requested = b->requested;
          r.stack = b->stack;
          if (e.kind == core::EventKind::free_requested) b->pending = true;
          else erase(b);
        }
        break;
      default: break;
    }
    if (!ring_.empty()) {
      r.time_us = now_us();
      ring_[ring_next_] = r;
      ring_next_ = (ring_next_ + 1) % ring_.size();
      if (ring_used_ < ring_.size()) ++ring_used_;
    }
  }

  // The live-block table: linear probing, deletion by backward shift (no tombstones).
  std::size_t mask() const noexcept { return blocks_.size() - 1; }
  LiveBlock* find(std::uint64_t address) noexcept {
    for (std::size_t i = hash(address) & mask();; i = (i + 1) & mask()) {
      if (blocks_[i].address == address) return &blocks_[i];
      if (blocks_[i].address == 0) return nullptr;
    }
  }
  void insert(const LiveBlock& b) noexcept {
    if (live_count_ >= blocks_.size() / 8 * 7) {  // keep probes short: 7/8 full at most
      ++dropped_blocks_;
      return;
    }
    std::size_t i = hash(b.address) & mask();
    while (blocks_[i].address != 0 && blocks_[i].address != b.address) i = (i + 1) & mask();
    if (blocks_[i].address == 0) ++live_count_;
    blocks_[i] = b;
  }
  void erase(LiveBlock* b) noexcept {
    std::size_t hole = static_cast<std::size_t>(b - blocks_.data());
    for (std::size_t i = (hole + 1) & mask(); blocks_[i].address != 0; i = (i + 1) & mask()) {
      const std::size_t home = hash(blocks_[i].address) & mask();
      // Moves back an entry whose home is not in (hole, i]: it was probed past the hole.
      if (((i - home) & mask()) >= ((i - hole) & mask())) {
        blocks_[hole] = blocks_[i];
        hole = i;
      }
    }
    blocks_[hole] = LiveBlock{};
    --live_count_;
  }

  // The stack's id, added on first sight; 0 when the table is full.
  std::uint32_t intern(std::span<const std::uint64_t> frames) noexcept {
    std::uint64_t h = frames.size();
    for (std::uint64_t f : frames) h = hash(h ^ f) + f;
    const std::size_t m = stack_index_.size() - 1;
    std::size_t i = hash(h) & m;
    for (; stack_index_[i] != 0; i = (i + 1) & m) {
      const std::uint32_t id = stack_index_[i];
      const std::uint64_t* f = &stack_frames_[static_cast<std::size_t>(id - 1) * depth_];
      if (stack_depth_[id - 1] == frames.size() && std::equal(frames.begin(), frames.end(), f)) return id;
    }
    if (stacks_ == kOomMaxStacks) {
      ++dropped_stacks_;
      return 0;
    }
    const std::uint32_t id = ++stacks_;
    std::copy(frames.begin(), frames.end(), &stack_frames_[static_cast<std::size_t>(id - 1) * depth_]);
    stack_depth_[id - 1] = static_cast<std::uint32_t>(frames.size());
    stack_index_[i] = id;
    return id;
  }

  core::EventSink* const next_;
  const std::size_t depth_;
  mutable std::mutex mu_;
  std::vector<core::RecentEvent> ring_;
  std::size_t ring_next_ = 0, ring_used_ = 0;
  std::vector<LiveBlock> blocks_;
  std::size_t live_count_ = 0;
  std::vector<std::uint64_t> stack_frames_;  // kOomMaxStacks x depth
  std::vector<std::uint32_t> stack_depth_;   // frames of each stack
  std::vector<std::uint32_t> stack_index_;   // hash -> id (0: empty); twice kOomMaxStacks
  std::uint32_t stacks_ = 0;
  std::uint64_t dropped_blocks_ = 0, dropped_stacks_ = 0;
};

}  // namespace luma::shim
