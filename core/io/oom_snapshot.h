// oom_snapshot.h - the allocator of one device at an out-of-memory error, as a snapshot
// PyTorch's memory viewer opens (LUMA_OOM_SNAPSHOT): {"segments": the allocator's
// segments and blocks (CachingAllocator::snapshot), "device_traces": the recent events
// the caller kept (with a trace on) ending with the "oom" entry, "allocator_settings"}.
// The dicts are memviz_layout.h's, shared with `luma export --format memviz`.
//
// Pure: the caller (libluma.so, shim/observe/oom_watch.cpp) gathers the snapshot, the
// events, the call stacks (already symbolized) and the driver's free memory.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator/allocator_snapshot.h"
#include "base/event.h"

namespace luma::core {

// One recent allocator event, as the shim kept it. Frees carry their alloc's requested
// size and stack (PyTorch's entries do), when the shim still knew them.
struct RecentEvent {
  EventKind kind = EventKind::alloc;
  std::uint64_t address = 0;
  std::uint64_t size = 0;       // rounded (segments: the segment's size)
  std::uint64_t requested = 0;  // alloc and frees: bytes asked for; segments: is_mapped_pages
  std::uint64_t stream = 0;
  std::uint64_t time_us = 0;    // microseconds since 1970
  std::uint32_t stack = 0;      // OomSnapshot::stacks id; 0: none
};

struct SnapshotFrame {
  std::string filename;  // the module (or source file)
  std::int64_t line = 0;
  std::string name;      // the function (symbol+offset), or the address
};

struct OomSnapshot {
  int device = 0;
  AllocatorSnapshot segments;
  std::span<const RecentEvent> events;  // oldest first
  // The oom entry: the request that failed, the device's free memory (the driver's
  // answer; unknown: total - reserved is not known either, so 0), when.
  std::uint64_t requested = 0;
  std::optional<std::uint64_t> device_free;
  std::uint64_t stream = 0;
  std::uint64_t time_us = 0;
  std::string settings;  // LUMA_CONF text (format_settings): allocator_settings
  // Call stacks, id - 1 indexes; and the stack of each live block by address.
  std::vector<std::vector<SnapshotFrame>> stacks;
  std::unordered_map<std::uint64_t, std::uint32_t> block_stacks;
};

// Writes the pickle. Events the viewer has no action for (empty_cache) and earlier oom
// events (their device_free is not known) are left out; time_us never goes back (a
// wall-clock step is flattened). Throws on the stream's or the host's failure.
void write_oom_snapshot(std::ostream& out, const OomSnapshot& s);

}  // namespace luma::core
