// event.h - what the allocator tells an observer (the trace writer) as it happens.
// The allocator calls EventSink::on_event with its per-device lock held, so the events of
// one device arrive in exactly the allocator's order; the sink must be fast and must not
// call back into the allocator.
#pragma once

#include <cstdint>

namespace luma::core {

enum class EventKind : std::uint8_t {
  alloc = 1,            // address, size (rounded), requested
  free_requested = 2,   // address, size: the program freed the block
  free_completed = 3,   // address, size: the block's fences completed; reusable now
  segment_reserve = 4,  // address, size: a real device allocation (or pages mapped: below)
  segment_release = 5,  // address, size: a real device free (or pages unmapped: below)
  oom = 6,              // requested: the device refused, even after releasing the cache
  empty_cache = 7,      // size: bytes released by this empty_cache call
};

struct Event {
  EventKind kind;
  int device;
  std::uint64_t address;
  std::uint64_t size;
  std::uint64_t requested;
};

// A segment event of expandable segments is not a driver allocation of its own but pages
// mapped into (unmapped from) the address range a pool reserved once; it carries
// requested == size, where an ordinary segment event carries 0. Viewers show such pages
// as parts of one growing segment (PyTorch's segment_map / segment_unmap).
constexpr bool is_mapped_pages(EventKind kind, std::uint64_t size, std::uint64_t requested) noexcept {
  return (kind == EventKind::segment_reserve || kind == EventKind::segment_release) && size != 0 &&
         requested == size;
}

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void on_event(const Event& event) noexcept = 0;
};

}  // namespace luma::core
