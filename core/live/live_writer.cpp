// live_writer.cpp - laying out a live record and binding its slots (see live_writer.h).
#include "live/live_writer.h"

#include <algorithm>
#include <cstring>

namespace luma::core::live {

namespace {

// `text` into a fixed field, cut to leave its NUL (the rest of the field is already 0).
template <std::size_t N>
void put_text(char (&field)[N], const std::string& text) noexcept {
  std::memcpy(field, text.data(), std::min(text.size(), N - 1));
}

}  // namespace

void init_record(void* base, const RecordIdentity& id) noexcept {
  auto* h = static_cast<Header*>(base);
  h->magic = kMagic;
  h->version = kVersion;
  h->header_bytes = sizeof(Header);
  h->slot_bytes = sizeof(Slot);
  h->slot_count = kSlots;
  h->pid = id.pid;
  h->uid = id.uid;
  h->start_time = id.start_time;
  h->created_unix_ns = id.created_unix_ns;
  h->map_address = id.map_address;
  h->map_bytes = id.map_bytes;
  h->state.store(static_cast<std::uint32_t>(RecordState::making), std::memory_order_relaxed);
  h->slots_used.store(0, std::memory_order_relaxed);
  put_text(h->exe, id.exe);
  put_text(h->group, id.group);
  put_text(h->command, id.command);
}

void publish_record(void* base) noexcept {
  static_cast<Header*>(base)->state.store(static_cast<std::uint32_t>(RecordState::live),
                                          std::memory_order_release);
}

void close_record(void* base) noexcept {
  static_cast<Header*>(base)->state.store(static_cast<std::uint32_t>(RecordState::closed),
                                          std::memory_order_release);
}

std::optional<std::uint32_t> next_free_slot(const void* base) noexcept {
  const std::uint32_t used = static_cast<const Header*>(base)->slots_used.load(std::memory_order_relaxed);
  if (used >= kSlots) return std::nullopt;
  return used;
}

void SlotWriter::bind(void* base, std::uint32_t index, int device,
                      std::optional<std::uint64_t> limit, bool group) noexcept {
  Slot* s = slot_at(base, index);
  slot_ = s;
  index_ = index;
  // The slot's own figures, for a slot taken over from an allocator whose context is gone.
  seq_ = s->seq.load(std::memory_order_relaxed) & ~std::uint64_t{1};
  allocated_ = s->allocated_bytes.load(std::memory_order_relaxed);
  reserved_ = s->reserved_bytes.load(std::memory_order_relaxed);
  pending_ = s->pending_free_bytes.load(std::memory_order_relaxed);
  peak_allocated_ = s->peak_allocated_bytes.load(std::memory_order_relaxed);
  peak_reserved_ = s->peak_reserved_bytes.load(std::memory_order_relaxed);
  ooms_ = s->oom_count.load(std::memory_order_relaxed);
  begin();
  s->device.store(device, std::memory_order_release);
  s->flags.store(kSlotInUse | (limit ? kSlotHasLimit : 0u) | (limit && group ? kSlotGroupLimit : 0u),
                 std::memory_order_release);
  store(s->limit_bytes, limit.value_or(0));
  end();
  // Claimed once its device is written: readers list slots [0, slots_used).
  auto* h = static_cast<Header*>(base);
  if (h->slots_used.load(std::memory_order_relaxed) <= index)
    h->slots_used.store(index + 1, std::memory_order_release);
}

}  // namespace luma::core::live
