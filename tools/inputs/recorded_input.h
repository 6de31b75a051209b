// recorded_input.h - any recorded run as what `luma simulate` replays (core::SimInput): a
// luma trace, an RMM log or a planner CSV (core/simulate reads those), or a PyTorch memory
// snapshot (core/torch_snapshot, the layer above core/simulate, so the choice is made
// here). The format is detected by content. For a snapshot, what PyTorch itself recorded is
// kept beside each device's sequence: its peak reserved bytes for the same allocations, and
// whether the recording window saw the run's start. Also the snapshot as the planner's
// lifetimes (`luma plan`) and the one line that says a window was incomplete.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/lifetime.h"
#include "simulate/sim_sequence.h"
#include "torch_snapshot/torch_snapshot.h"

namespace luma::tools {

// What a PyTorch snapshot recorded of one device, beside its sequence.
struct TorchWindow {
  bool incomplete = false;                   // the window does not reach back to the run's start
  std::uint64_t blocks_before_window = 0;    // live when it began: replayed from that state
  std::uint64_t reserved_before_window = 0;  // PyTorch's reserved bytes when it began
  std::uint64_t recorded_peak_reserved = 0;  // PyTorch's peak reserved over the window
  // What the figures are made of where the recording was not a whole device's, one line
  // each: a MemPool snapshot's note (reserved from that pool's segments), what a window
  // recorded with skip_actions lacks (core/torch_snapshot/torch_snapshot.h).
  std::vector<std::string> notes;
  // The recorded stages that reach this device (device -1: every device), on its ops' clock.
  std::vector<core::TorchStage> stages;
};

// The stages of `window` under way at `time_ns` (on its ops' clock), outermost first, each
// name once; none outside every stage.
std::vector<std::string> stages_at(const TorchWindow& window, std::uint64_t time_ns);

struct RecordedInput {
  core::SimInput sim;  // format and the devices' sequences, as core::read_sim_input gives them
  // Parallel to sim.devices: set for a PyTorch snapshot's devices, empty for other formats.
  std::vector<std::optional<TorchWindow>> torch;
  // A snapshot's call sites (frames and stacks; each device's allocations name theirs),
  // kept for the commands that show them (its devices' sequences were moved into sim).
  // Null for other formats.
  std::shared_ptr<const core::TorchSnapshot> snapshot;
};

// Whether `head` (a file's first bytes, core::kHeadBytes of them) is a PyTorch snapshot.
bool is_torch_snapshot(std::string_view head);

// Reads `path` (a regular file, or a pipe read once). Throws core::PlanInputError naming the
// file and the line, byte offset or field at fault.
RecordedInput read_recorded_input(const std::string& path);

// The window of one snapshot device (with the snapshot's note, where it has one).
TorchWindow torch_window(const core::TorchDevice& device, const std::string& snapshot_note = {});

// "the trace is incomplete: N blocks were live when the recording window began; replayed
// from that state" (and the bytes PyTorch held reserved then, when it held any).
std::string incomplete_window_line(const TorchWindow& window);

// The lines a command prints about a snapshot device's window before its figures: that it
// was incomplete (as above) and its notes; none for a whole window of a whole device.
std::vector<std::string> window_lines(const TorchWindow& window);

// A snapshot's allocations as the planner's lifetimes, per device: each op's position in
// its device's sequence is the time (an allocation live from its op to its free's op; one
// never freed, to one past the last op), its requested bytes the size, cudaMalloc's
// alignment. Blocks live when the window began are allocations at its start.
std::vector<core::Lifetime> torch_snapshot_lifetimes(const core::TorchSnapshot& snapshot);

}  // namespace luma::tools
