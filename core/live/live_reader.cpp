// live_reader.cpp - the sequence-lock read of a live record (see live_reader.h and
// docs/live-record.md).
#include "live/live_reader.h"

#include <atomic>
#include <cstring>
#include <thread>

namespace luma::core::live {

namespace {

// Tries of a slot mid-write before the reader starts sleeping between tries (the writer
// is then off its CPU, not just in the middle of a few stores).
constexpr int kSpinTries = 64;

template <std::size_t N>
std::string text_of(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

// One consistent copy of slot s: the values read between two equal, even sequence numbers.
bool read_slot(const Slot& s, SlotValues* out, std::chrono::steady_clock::time_point deadline) noexcept {
  for (int attempt = 0;; ++attempt) {
    const std::uint64_t before = s.seq.load(std::memory_order_acquire);
    if ((before & 1) == 0) {
      // Acquire loads: none of them can be read before the first sequence number, and the
      // second cannot be read before any of them (no fence: see live_writer.h).
      constexpr auto kAcquire = std::memory_order_acquire;
      SlotValues v;
      v.device = s.device.load(kAcquire);
      v.flags = s.flags.load(kAcquire);
      v.allocated_bytes = s.allocated_bytes.load(kAcquire);
      v.reserved_bytes = s.reserved_bytes.load(kAcquire);
      v.peak_allocated_bytes = s.peak_allocated_bytes.load(kAcquire);
      v.peak_reserved_bytes = s.peak_reserved_bytes.load(kAcquire);
      v.pending_free_bytes = s.pending_free_bytes.load(kAcquire);
      v.limit_bytes = s.limit_bytes.load(kAcquire);
      v.oom_count = s.oom_count.load(kAcquire);
      if (s.seq.load(std::memory_order_relaxed) == before) {
        *out = v;
        return true;
      }
    }
    if (attempt < kSpinTries) {
      std::this_thread::yield();
    } else {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

}  // namespace

ReadResult read_record(const void* base, std::size_t size, std::chrono::milliseconds patience) {
  ReadResult r;
  auto damaged = [&](std::string why) {
    r.status = ReadStatus::damaged;
    r.error = std::move(why);
    return r;
  };
  if (size < sizeof(Header))
    return damaged("holds " + std::to_string(size) + " bytes, less than a record's header (" +
                   std::to_string(sizeof(Header)) + ")");
  const auto* h = static_cast<const Header*>(base);
  if (h->magic != kMagic) return damaged("is not a luma live record (bad magic number)");
  if (h->version != kVersion)
    return damaged("is a record of layout version " + std::to_string(h->version) + ", this luma reads " +
                   std::to_string(kVersion));
  if (h->header_bytes != sizeof(Header) || h->slot_bytes != sizeof(Slot) || h->slot_count != kSlots)
    return damaged("has a header of version " + std::to_string(kVersion) + " with sizes of another (" +
                   std::to_string(h->header_bytes) + ", " + std::to_string(h->slot_bytes) + ", " +
                   std::to_string(h->slot_count) + ")");
  if (size < kRecordBytes)
    return damaged("holds " + std::to_string(size) + " bytes, less than a record (" +
                   std::to_string(kRecordBytes) + ")");
  const std::uint32_t state = h->state.load(std::memory_order_acquire);
  if (state > static_cast<std::uint32_t>(RecordState::closed))
    return damaged("has an unknown state " + std::to_string(state));
  const std::uint32_t used = h->slots_used.load(std::memory_order_acquire);
  if (used > kSlots) return damaged("claims " + std::to_string(used) + " slots of " + std::to_string(kSlots));
  RecordView& v = r.record;
  v.version = h->version;
  v.pid = h->pid;
  v.uid = h->uid;
  v.start_time = h->start_time;
  v.created_unix_ns = h->created_unix_ns;
  v.map_address = h->map_address;
  v.map_bytes = h->map_bytes;
  v.state = static_cast<RecordState>(state);
  v.exe = text_of(h->exe);
  v.group = text_of(h->group);
  v.command = text_of(h->command);
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (std::uint32_t i = 0; i < used; ++i) {
    SlotValues s;
    if (!read_slot(*slot_at(base, i), &s, deadline)) {
      r.status = ReadStatus::busy;
      r.error = "has slot " + std::to_string(i) + " mid-update for too long (is its process stopped?)";
      return r;
    }
    if ((s.flags & kSlotInUse) != 0) v.slots.push_back(s);
  }
  r.status = ReadStatus::ok;
  return r;
}

}  // namespace luma::core::live
