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
// the trace and the segments disagree (a segment_free left out by skip_actions): an error.
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
};

class TorchSnapshotReader {
 public:
  static constexpr std::string_view kFormatName = "PyTorch memory snapshot";
  // True when `head` (the first bytes of a file, at least 32; kHeadBytes as the other
  // readers get) is a PyTorch snapshot: the PROTO opcode with protocol 2 to 5, then
  // (after a FRAME) EMPTY_DICT, the top level being a dict, and within the head the key
  // "segments" or "device_traces" written as a pickle string (SHORT_BINUNICODE, or
  // BINUNICODE as protocol 2 and PyTorch's C++ pickler write it). PyTorch writes
  // "segments" as the dict's first key, within its first 24 bytes.
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
