// torch_snapshot.h - PyTorch's CUDA memory snapshot (`torch.cuda.memory._dump_snapshot()`
// after `_record_memory_history()`) read as luma's recorded runs: per device, the
// allocations and frees in the order PyTorch's caching allocator saw them (a SimSequence,
// core/simulate/sim_sequence.h), the call site of each allocation, and the bytes PyTorch
// itself reserved over the recorded window, exactly.
//
// The file is a pickle (pickle_reader.h; nothing in it is run) of a dict
//   segments:       [{device, address, total_size, blocks: [{address?, size,
//                     requested_size, state, frames}], ...}]   the allocator at the dump
//   device_traces:  [[{action, addr, size, stream, time_us?, frames?}, ...] per device]
//   external_annotations (newer versions): [{stage: START|END, name, device, time_us}]
//                   the named ranges of the run (Optimizer.zero_grad, Optimizer.step,
//                   record_function), read as stages; annotate entries of device_traces
//                   with a stage and a name are read the same way
//   allocator_settings (newer versions), and others, not read.
// A segment's segment_pool_id (a pair, (0, 0) the default pools) and is_expandable (a bool)
// are read where present; either of another type is an error naming the segment.
//
// A MemPool's snapshot: torch.cuda.MemPool(...).snapshot() (PyTorch 2.5+) returns
// torch.cuda.memory_snapshot(pool.id), which is torch._C._cuda_memorySnapshot(pool.id)
// ["segments"] (torch/cuda/memory.py): the list of that pool's segments alone
// (c10/cuda/CUDACachingAllocator.cpp snapshot(mempool_id): get_private_pool_head_blocks),
// pickled as the program saves it. Read as a snapshot of segments without device_traces,
// as is a dict without 'device_traces' and a list of the segments of all pools
// (torch.cuda.memory_snapshot()): the blocks allocated at the dump. Where one private pool
// owns every segment, the snapshot is that pool's (TorchSnapshot::pool): reserved comes from
// its segments only, and TorchSnapshot::note says so. A dict of one pool's segments with
// device_traces (_cuda_memorySnapshot(pool id) dumped whole) has the whole device's trace
// (record_trace keeps one ring buffer a device): only the entries within the pool's
// segments at the dump are read, so a pool segment given back within the window is not seen
// (the note says how many were left out). A whole _snapshot() whose segments all belong to
// one private pool (a CUDA graph's, say) reads the same way: nothing in the file tells them
// apart.
//
// skip_actions: _record_memory_history(skip_actions=[...]) leaves entries of those actions
// out of device_traces (record_trace: skip_actions_list). What a window lacks, seen from the
// entries it has, is TorchDevice::missing_actions (and TorchDevice::lacks, one line), and the
// figures are made of what is there: no free_requested (but free_completed): each free is
// its completion; no free_completed: each free is its request; no alloc (but frees):
// nothing to replay, the frees make no allocation, the sequence is the blocks allocated at
// the dump; segment_free but no segment_alloc: the walk below counts no segment as new in
// the window, the most reserved can have been; segment_alloc (segment_map) but no
// segment_free (segment_unmap) where the walk below goes below zero: the walk goes on from
// zero there, the least reserved can have been at every moment (the peak: at least the
// largest segment or range it reserved).
//
// Fields and actions as torch/csrc/cuda/Module.cpp (_cuda_memorySnapshot) and
// c10/cuda/CUDACachingAllocator.cpp (record_trace) write them: an alloc entry's size is
// the bytes requested; free_requested (the program's free) and free_completed (the block
// reusable again, after its streams' events) carry the block's requested bytes; segment_alloc
// / segment_free carry a cudaMalloc'd segment's size and segment_map / segment_unmap the
// bytes an expandable segment mapped or unmapped: exactly what PyTorch adds to (takes off)
// its reserved bytes. snapshot, oom and annotate entries change nothing here; an action
// this reader does not know is skipped and named in TorchSnapshot::unknown_actions.
//
// The sequence: an allocation is its alloc entry; its free is its free_requested entry, or
// its free_completed entry where the window has no request for the block (skip_actions
// left requests out). Times: time_us as ns since the earliest entry of any device (entries
// without time_us, as older versions write: each op's position, has_times false).
//
// The window: `_record_memory_history(max_entries=N)` keeps only the last N entries, and
// recording may begin after the program allocated. Blocks live when the window began are
// replayed from that state: an allocation at the window's start, before every op (stack 0:
// its site is unknown), for each block the window frees without having seen it allocated
// (its size: the free entry's, which is the block's requested bytes), and for each block
// still allocated at the dump (state active_allocated) that the window never saw allocated
// (its size: the block's requested_size; its frames: the block's, where it was allocated;
// never freed). Such a window is `incomplete`, and so is one that began with memory
// reserved, or that completes a free it saw no request for while it records requests
// (the request came before the window: that block was not live, nothing is made of it).
//
// PyTorch's reserved bytes: at the dump, the sum of total_size of the device's segments
// (each mapped range of an expandable segment is one); walked backwards through the
// segment entries (alloc and map add bytes going forward, so they are taken off going
// back) this gives the reserved bytes at every moment of the window and their peak, exact
// even when the window dropped the start of the run. A walk that goes below zero means
// the trace and the segments disagree: an error, unless the window has no entry of the kind
// that gives the bytes back (skip_actions, above).
//
// Expandable segments (expandable_segments:True) reserve by mapping: segment_map /
// segment_unmap entries (DeviceCachingAllocator::map_block / unmap_block) and no
// segment_alloc (alloc_block returns before recording one), and the dump reports each
// contiguous mapped range as a segment with is_expandable True (snapshot(): "one segment
// for each contiguous mapped range"): mapped bytes count up on segment_map and down on
// segment_unmap, as map_block and unmap_block change reserved_bytes. The dump's reserved
// is the sum of those ranges. TorchDevice::expandable_segments.
//
// Bad input - a damaged pickle, another pickle, a field missing or of the wrong type - ends
// in a PlanInputError naming the source and the byte offset or the field
// ("device_traces[0][17]: 'addr' is a str, not an int"); never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "simulate/sim_sequence.h"
#include "torch_snapshot/pickle_reader.h"

namespace luma::core {

struct TorchFrame {
  std::string filename;
  std::string name;  // the function
  std::int64_t line = 0;
  bool operator==(const TorchFrame&) const = default;
};
// "file:line function", as a call site is shown.
std::string frame_text(const TorchFrame& f);

// One allocation of a device's sequence: allocations[op.id] for each op of the sequence.
struct TorchAllocation {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;  // requested
  std::int64_t stream = 0;  // the cudaStream_t, as PyTorch writes it
  std::uint32_t stack = 0;  // TorchSnapshot::stacks index; 0: no frames
  bool before_window = false;  // live when the window began (replayed from that state)
};

// PyTorch's reserved bytes after a segment entry.
struct TorchReservedStep {
  // The entry's action: a cudaMalloc'd segment reserved or freed, or an expandable
  // segment's range mapped or unmapped.
  enum class Action : std::uint8_t { segment_alloc, segment_free, segment_map, segment_unmap };
  std::uint64_t time_ns = 0;  // the entry's time (its position without a clock)
  std::size_t op = 0;         // the sequence's ops before it (the entry is between ops op-1 and op)
  std::uint64_t bytes = 0;    // reserved after the entry
  Action action = Action::segment_alloc;
  std::uint64_t address = 0;  // the entry's addr and size: the range it reserved or gave back
  std::uint64_t size = 0;
};

struct TorchDevice {
  // device, has_times, ops (before-window allocations first), allocations, frees,
  // peak_live, facts: a stream of the program's own (PyTorch's side streams do not block
  // with the legacy stream), a second device. A snapshot shows no threads.
  SimSequence sequence;
  std::vector<TorchAllocation> allocations;  // by SimOp::id
  std::size_t entries = 0;                   // the device's trace entries
  bool incomplete = false;                   // the window does not reach back to the run's start
  std::uint64_t blocks_before_window = 0;    // allocations made at the window's start
  // PyTorch's reserved bytes: when the window began, after each segment entry, at the
  // dump, and the most at any moment of the window.
  std::uint64_t recorded_reserved_start_bytes = 0;
  std::vector<TorchReservedStep> reserved;
  std::uint64_t recorded_reserved_end_bytes = 0;
  std::uint64_t recorded_peak_reserved_bytes = 0;
  // Expandable segments: a segment of the dump with is_expandable True, or segment_map /
  // segment_unmap entries in the window.
  bool expandable_segments = false;
  // The action kinds the window lacks, as PyTorch names them ("free_requested", "alloc",
  // "segment_free", ...; in the order of kLackable): what _record_memory_history(skip_actions=
  // [...]) leaves out, seen from the entries the window has (see the header's comment).
  // Empty when nothing shows missing.
  std::vector<std::string> missing_actions;
  // One line saying what the window lacks and what the figures are made of then; empty
  // when missing_actions is.
  std::string lacks;
};

// A stage of the run: a named range PyTorch recorded, from its START to its END on the
// sequences' clock (ns since the earliest trace entry; a START before it is at 0). An END
// without a START began before the window (0); a START without an END lasts to the end.
struct TorchStage {
  std::string name;
  int device = -1;  // -1: every device
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = UINT64_MAX;
};

struct TorchSnapshot {
  int protocol = 0;  // the pickle's
  // time_us of the earliest and the latest trace entry (of any device), where recorded.
  std::optional<std::int64_t> first_time_us, last_time_us;
  // Stages, by start (only with a clock: annotations are placed by their time_us).
  std::vector<TorchStage> stages;
  // By device number: each device with trace entries or segments.
  std::vector<TorchDevice> devices;
  // Call sites: frames once each, and stacks as frame indices, innermost first as PyTorch
  // writes them; stacks[0] is the empty stack.
  std::vector<TorchFrame> frames;
  std::vector<std::vector<std::uint32_t>> stacks;
  std::vector<std::string> unknown_actions;  // distinct, in order of first appearance
  // The devices' missing_actions together, distinct, in the order of kLackable.
  std::vector<std::string> missing_actions;
  // A MemPool's snapshot (every segment of one private pool): its segment_pool_id.
  std::optional<std::pair<std::int64_t, std::int64_t>> pool;
  // What the file is when it is not a whole _snapshot(): one line, for a tool to print
  // ("reserved from pool (1,0)'s segments only: a MemPool snapshot ..."); empty otherwise.
  std::string note;
};

// The action kinds a window can be found to lack, in order.
inline constexpr std::string_view kLackable[] = {"alloc", "free_requested", "free_completed", "segment_alloc",
                                                 "segment_free", "segment_unmap"};

class TorchSnapshotReader {
 public:
  static constexpr std::string_view kFormatName = "PyTorch memory snapshot";
  // True when `head` (the first bytes of a file, at least 32; kHeadBytes as the other
  // readers get) is a PyTorch snapshot: the PROTO opcode with protocol 2 to 5, then
  // (after a FRAME) EMPTY_DICT, the top level being a dict, and within the head the key
  // "segments" or "device_traces" written as a pickle string (SHORT_BINUNICODE, or
  // BINUNICODE as protocol 2 and PyTorch's C++ pickler write it). PyTorch writes
  // "segments" as the dict's first key, within its first 24 bytes. Or, a MemPool's
  // snapshot: EMPTY_LIST, the top level a list, and the keys "device" and "total_size" of
  // its first segment (the first and the third key of a segment, as PyTorch writes it).
  static bool accepts(std::string_view head) noexcept;
  // Reads a whole snapshot; `source` names it in messages. Throws PlanInputError.
  static TorchSnapshot read(std::string_view bytes, const std::string& source, const PickleLimits& limits = {});
  // Reads the file at `path`. Throws PlanInputError.
  static TorchSnapshot read_file(const std::string& path, const PickleLimits& limits = {});
};

// The snapshot as `luma simulate` takes a recorded run: format kFormatName, the sequences of
// the devices that allocate.
SimInput torch_snapshot_sim_input(const TorchSnapshot& snapshot);

}  // namespace luma::core
