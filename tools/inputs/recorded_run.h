// recorded_run.h - one input of `luma stats` / `luma export`: a luma trace, an RMM
// allocation log read through the planner's RMM reader, or a PyTorch memory snapshot
// (core/torch_snapshot), presented as one event stream. The format is detected by content. Errors are std::runtime_error naming the file (and,
// for traces, the byte offset). A trace cut short after its header is read up to the cut,
// with one warning line on stderr saying how much was lost (every command that reads it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "inputs/recorded_input.h"
#include "trace/trace_reader.h"

namespace luma::tools {

class RecordedRun {
 public:
  explicit RecordedRun(const std::string& path);
  ~RecordedRun();

  const std::string& path() const noexcept { return path_; }
  // "luma trace", "RMM log" or "PyTorch memory snapshot".
  const std::string& format() const noexcept { return format_; }
  // For RMM logs and snapshots: only what they have (no pid, host or devices).
  const core::TraceHeader& header() const noexcept;
  bool closed_cleanly() const noexcept;
  // A trace cut short after its header: read up to the cut (an RMM log: never truncated).
  const core::TraceTruncation& truncation() const noexcept;
  // What the input records. An RMM log has no process facts (pid, host, luma version),
  // no times (its events are numbered by row) and no segments of a cache: what it lacks
  // is shown as not available, never as 0.
  // A snapshot records PyTorch's segments (their entries in the window: reserved, freed,
  // mapped, unmapped) and, from newer PyTorch versions on, a clock.
  bool records_process() const noexcept { return trace_ != nullptr; }
  bool records_times() const noexcept { return trace_ != nullptr || snapshot_times_; }
  bool records_segments() const noexcept { return trace_ != nullptr || snapshot_ != nullptr; }
  // An RMM log has no completion events: its frees complete as they are made. (luma's
  // allocator records every completion, so a trace's free without one is still pending.)
  // A snapshot's frees are its free_requested entries (free_completed where none was).
  bool frees_complete_at_once() const noexcept { return !trace_; }

  // A PyTorch snapshot (else null) and what its window saw of `device` (else nullopt).
  const core::TorchSnapshot* torch_snapshot() const noexcept { return snapshot_.get(); }
  std::optional<TorchWindow> torch_window(int device) const;
  // PyTorch's reserved bytes on `device` when a snapshot's window began: segments whose
  // reservation the window did not see (0 for other inputs).
  std::uint64_t reserved_before_window(int device) const;

  // Calls luma forwarded to the driver (a trace of format version 2 or later records
  // them; an older trace or an RMM log does not). A handler set here sees them during
  // read(), in file order, again on every read.
  bool records_forwarded() const noexcept {
    return trace_ != nullptr && trace_->header().format_version >= 2;
  }
  void set_forwarded_handler(core::TraceReader::ForwardedFn fn) {
    if (trace_) trace_->set_forwarded_handler(std::move(fn));
  }

  // Reads every event in order; shows a progress bar when stderr is a terminal.
  core::TraceReadSummary read(const core::TraceReader::EventFn& on_event,
                              bool show_progress = true);
  const std::vector<std::uint64_t>& stack(std::uint32_t id) const noexcept;
  // The Python frames of a Python stack id (innermost first); empty for 0 and RMM logs.
  // A snapshot's: the frames of the stack whose file is Python source.
  const std::vector<core::TracePythonFrame>& python_stack(std::uint32_t id) const noexcept;
  // A call site recorded by name rather than by address (a snapshot's frames, each
  // PyTorch's file, function and line, innermost first): its stack() is empty. Empty for
  // other inputs.
  const std::vector<core::TracePythonFrame>& named_stack(std::uint32_t id) const noexcept;

 private:
  std::string path_;
  std::string format_;
  std::unique_ptr<core::TraceReader> trace_;
  std::vector<core::TraceEvent> events_;  // an RMM log or a snapshot, as events in order
  core::TraceHeader rmm_header_;
  core::TraceTruncation no_truncation_;
  std::unique_ptr<const core::TorchSnapshot> snapshot_;
  bool snapshot_times_ = false;
  std::vector<std::vector<core::TracePythonFrame>> named_stacks_, python_stacks_;  // by stack id

  void read_rmm_log(const std::string& path);
  void read_snapshot(core::TorchSnapshot snapshot);
};

}  // namespace luma::tools
