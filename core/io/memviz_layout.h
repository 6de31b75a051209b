// memviz_layout.h - the dicts of PyTorch's memory snapshot (torch.cuda.memory._snapshot(),
// read by torch/utils/viz/MemoryViz.js and torch.cuda._memory_viz) with PyTorch's keys,
// types and units, written once for the two writers of such snapshots: `luma export
// --format memviz` (a whole trace, tools/exports/memviz_export.cpp) and libluma.so's snapshot at an
// out-of-memory error (io/oom_snapshot.h). docs/memviz.md lists the fields and their
// sources; tests/io/check_memviz.py checks them.
//
// Each begin_* writes a dict's keys up to "frames" and leaves that key's value to the
// caller (who knows where frames come from: a trace's stacks, or none), so the caller
// writes the frames list and then closes what begin_* opened (see each function).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "allocator/allocator_snapshot.h"
#include "base/event.h"
#include "io/pickle_writer.h"

namespace luma::core::memviz {

// Segments larger than this are "large" in the snapshot, as PyTorch's small pool holds
// only its 2 MiB segments.
inline constexpr std::uint64_t kSmallSegmentBytes = 2u << 20;

struct SegmentFields {
  int device = 0;
  std::uint64_t address = 0, total_size = 0;
  // As PyTorch counts them: allocated excludes blocks waiting for their fences; active
  // and requested include them.
  std::uint64_t allocated_size = 0, active_size = 0, requested_size = 0;
  std::uint64_t stream = 0;
  // A mapped run of an expandable segment (PyTorch reports each contiguous mapped range
  // of one as a segment with is_expandable).
  bool expandable = false;
};
// Opens the segment's dict and writes its fields, then the "frames" key. The caller then
// writes the frames, calls begin_segment_blocks, writes each block, and calls end_segment.
void begin_segment(PickleWriter& p, const SegmentFields& s);
void begin_segment_blocks(PickleWriter& p);  // "blocks": [ ...
void end_segment(PickleWriter& p);           // ... ] }

struct BlockFields {
  std::uint64_t address = 0, size = 0, requested_size = 0;
  BlockSnapshotState state = BlockSnapshotState::inactive;
};
// Opens the block's dict and writes its fields, then "frames": the caller writes the
// frames and calls p.end_dict().
void begin_block(PickleWriter& p, const BlockFields& b);

// One device_traces entry: alloc/free entries carry addr, an oom entry device_free
// (the device's free memory then) instead.
struct TraceEntryFields {
  std::string_view action;
  std::uint64_t addr = 0;
  std::optional<std::uint64_t> device_free;  // set: an oom entry
  std::uint64_t size = 0, stream = 0;
  std::uint64_t time_us = 0;  // microseconds since 1970
};
// Opens the entry's dict and writes its fields, then "frames": the caller writes the
// frames and calls p.end_dict().
void begin_trace_entry(PickleWriter& p, const TraceEntryFields& e);

// A frame of a "frames" list: {filename, line, name}.
void write_frame(PickleWriter& p, std::string_view filename, std::int64_t line, std::string_view name);

// The viewer's action for an allocator event; empty for an event it has no action for.
// Pages mapped or unmapped (is_mapped_pages, base/event.h) are segment_map / segment_unmap,
// which the viewer merges with (splits from) the adjacent mapped range of the same stream.
std::string_view action_name(EventKind k, bool mapped_pages = false) noexcept;
std::string_view state_name(BlockSnapshotState s) noexcept;

// "allocator_settings": PyTorch's keys (what its settings view and tools expect) with
// luma's counterparts where there is one, and luma's own (the LUMA_CONF text
// `settings`, key:value,...) under "luma", typed: numbers as ints, true/false as booleans.
void write_allocator_settings(PickleWriter& p, const std::string& settings);

}  // namespace luma::core::memviz
