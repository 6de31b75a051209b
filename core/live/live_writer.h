// live_writer.h - the writing side of a live-statistics record (live_record.h): lays a
// record out in memory the caller mapped, and keeps one allocator's slot up to date.
// libluma.so holds the file (shim/observe/live_record.h); this is the memory.
//
// The hot path is SlotWriter::publish (the caching allocator, at the end of each call,
// from the statistics it keeps anyway) or SlotWriter::on_event (plan replay's arena, per
// event). Either runs under the allocator's own lock, so each slot has one writer at a
// time, and a sequence lock (two stores of the sequence word around the values, all
// release stores: plain moves on x86, no atomic read-modify-write, no fence) lets
// readers in other processes take a consistent copy without ever making the writer wait.
// No std::atomic_thread_fence: ThreadSanitizer does not model fences (GCC refuses them
// under -Wtsan), and the release stores order the same without one (docs/live-record.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "base/event.h"
#include "live/live_record.h"

namespace luma::core::live {

// Who publishes: the header's identity fields.
struct RecordIdentity {
  unsigned pid = 0;
  unsigned uid = 0;
  std::uint64_t start_time = 0;       // /proc/PID/stat field 22
  std::uint64_t created_unix_ns = 0;
  std::uint64_t map_address = 0;      // where this process mapped the record, and its length
  std::uint64_t map_bytes = 0;
  std::string exe;      // cut to fit (kExeBytes - 1 bytes)
  std::string command;  // cut to fit
  std::string group;    // cut to fit
};

// Lays out a fresh record in `base` (kRecordBytes bytes, all zero: a new file's), in state
// `making`. The caller publishes it (publish_record) once it is where readers look.
void init_record(void* base, const RecordIdentity& id) noexcept;
// State `live` (release: every field laid out before is visible with it).
void publish_record(void* base) noexcept;
// State `closed`: the process is exiting (readers skip the record from now on).
void close_record(void* base) noexcept;

// The next slot nobody claimed yet, or nullopt when all kSlots are. Claims are made by one
// thread at a time (the shim makes them under its context table's lock).
std::optional<std::uint32_t> next_free_slot(const void* base) noexcept;

// A slot's figures at once (SlotWriter::publish).
struct SlotFigures {
  std::uint64_t allocated_bytes;
  std::uint64_t reserved_bytes;
  std::uint64_t peak_allocated_bytes;
  std::uint64_t peak_reserved_bytes;
  std::uint64_t pending_free_bytes;
  std::uint64_t oom_count;
};

// One allocator's slot. Unbound, it writes nothing.
class SlotWriter {
 public:
  SlotWriter() = default;
  // Binds slot `index` to an allocator of `device` with memory limit `limit` (nullopt:
  // none; group: it is a limit_group's budget), and marks the slot claimed. A slot that
  // was bound before (its allocator's context is gone, taken over by the next one of the
  // same device) keeps its figures: its current values are 0 by then (the context's memory
  // went with it) and its peaks and OOM count are the device's history.
  void bind(void* base, std::uint32_t index, int device, std::optional<std::uint64_t> limit,
            bool group) noexcept;
  bool bound() const noexcept { return slot_ != nullptr; }
  std::uint32_t index() const noexcept { return index_; }

  // Every figure at once, from statistics the allocator keeps anyway (the caching
  // allocator, at the end of each call: CachingAllocator::set_live_writer). A slot is kept
  // either this way or by on_event, never both.
  [[gnu::always_inline]] inline void publish(const SlotFigures& f) noexcept;
  // Allocated and pending-free bytes only: what a free can change (the other figures
  // only move when memory is allocated, reserved or released).
  [[gnu::always_inline]] inline void publish_held(std::uint64_t allocated_bytes,
                                                  std::uint64_t pending_free_bytes) noexcept;

  // One allocator event (event.h): alloc and free_requested move allocated bytes,
  // free_requested and free_completed pending-free bytes, segment_reserve and
  // segment_release reserved bytes, oom the OOM count.
  [[gnu::always_inline]] inline void on_event(EventKind kind, std::uint64_t size) noexcept;

 private:
  // The odd sequence number first (as on_event does). The values' stores that follow are
  // release stores, so this one cannot move below them: a reader that reads one of them
  // (with acquire) then sees the sequence number changed.
  [[gnu::always_inline]] inline void begin() noexcept {
    slot_->seq.store(seq_ + 1, std::memory_order_relaxed);
  }
  // The even sequence number last, released: a reader that reads it sees every value.
  [[gnu::always_inline]] inline void end() noexcept {
    seq_ += 2;
    slot_->seq.store(seq_, std::memory_order_release);
  }
  static void store(std::atomic<std::uint64_t>& to, std::uint64_t v) noexcept {
    to.store(v, std::memory_order_release);
  }

  Slot* slot_ = nullptr;
  std::uint32_t index_ = 0;
  std::uint64_t seq_ = 0;
  // This writer's own copies (no load from the shared page on the hot path).
  std::uint64_t allocated_ = 0, reserved_ = 0, pending_ = 0;
  std::uint64_t peak_allocated_ = 0, peak_reserved_ = 0, ooms_ = 0;
};

inline void SlotWriter::publish(const SlotFigures& f) noexcept {
  Slot* const s = slot_;
  if (s == nullptr) return;
  const std::uint64_t seq = seq_;
  seq_ = seq + 2;
  s->seq.store(seq + 1, std::memory_order_relaxed);
  store(s->allocated_bytes, f.allocated_bytes);
  store(s->reserved_bytes, f.reserved_bytes);
  store(s->peak_allocated_bytes, f.peak_allocated_bytes);
  store(s->peak_reserved_bytes, f.peak_reserved_bytes);
  store(s->pending_free_bytes, f.pending_free_bytes);
  store(s->oom_count, f.oom_count);
  s->seq.store(seq + 2, std::memory_order_release);
}

inline void SlotWriter::publish_held(std::uint64_t allocated_bytes, std::uint64_t pending_free_bytes) noexcept {
  Slot* const s = slot_;
  if (s == nullptr) return;
  const std::uint64_t seq = seq_;
  seq_ = seq + 2;
  s->seq.store(seq + 1, std::memory_order_relaxed);
  store(s->allocated_bytes, allocated_bytes);
  store(s->pending_free_bytes, pending_free_bytes);
  s->seq.store(seq + 2, std::memory_order_release);
}

inline void SlotWriter::on_event(EventKind kind, std::uint64_t size) noexcept {
  // Every new value is worked out in this writer's own copies first, so the stores into
  // the shared slot (release stores, which the compiler keeps in order with everything)
  // come last, back to back, with nothing reloaded between them.
  Slot* const s = slot_;
  if (s == nullptr) return;
  const std::uint64_t seq = seq_;
  switch (kind) {
    case EventKind::alloc: {
      const std::uint64_t a = allocated_ += size;
      const bool peak = a > peak_allocated_;
      if (peak) peak_allocated_ = a;
      seq_ = seq + 2;
      s->seq.store(seq + 1, std::memory_order_relaxed);
      store(s->allocated_bytes, a);
      if (peak) store(s->peak_allocated_bytes, a);
      break;
    }
    case EventKind::free_requested: {
      const std::uint64_t a = allocated_ -= size;
      const std::uint64_t p = pending_ += size;
      seq_ = seq + 2;
      s->seq.store(seq + 1, std::memory_order_relaxed);
      store(s->allocated_bytes, a);
      store(s->pending_free_bytes, p);
      break;
    }
    case EventKind::free_completed: {
      const std::uint64_t p = pending_ -= size;
      seq_ = seq + 2;
      s->seq.store(seq + 1, std::memory_order_relaxed);
      store(s->pending_free_bytes, p);
      break;
    }
    case EventKind::segment_reserve: {
      const std::uint64_t r = reserved_ += size;
      const bool peak = r > peak_reserved_;
      if (peak) peak_reserved_ = r;
      seq_ = seq + 2;
      s->seq.store(seq + 1, std::memory_order_relaxed);
      store(s->reserved_bytes, r);
      if (peak) store(s->peak_reserved_bytes, r);
      break;
    }
    case EventKind::segment_release: {
      const std::uint64_t r = reserved_ -= size;
      seq_ = seq + 2;
      s->seq.store(seq + 1, std::memory_order_relaxed);
      store(s->reserved_bytes, r);
      break;
    }
    case EventKind::oom: {
      const std::uint64_t n = ++ooms_;
      seq_ = seq + 2;
      s->seq.store(seq + 1, std::memory_order_relaxed);
      store(s->oom_count, n);
      break;
    }
    default:  // empty_cache changes nothing published
      return;
  }
  s->seq.store(seq + 2, std::memory_order_release);
}

}  // namespace luma::core::live
