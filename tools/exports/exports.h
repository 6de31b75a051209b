// exports.h - `luma export` formats, one file each: memviz (PyTorch memory_viz snapshot
// pickle), chrome (Trace Event Format JSON), rmm (RMM's logging CSV), csv (the planner's
// lifetimes). Each reads the run (possibly in several passes) and writes to `out`; they
// throw std::runtime_error for input they cannot express.
#pragma once

#include <optional>
#include <ostream>

#include "inputs/recorded_run.h"
#include "inputs/symbolizer.h"

namespace luma::tools {

// What part of the run an export keeps (PyTorch's own snapshot keeps its last
// max_entries): memviz, each device's last N trace entries; chrome, the last N events of
// the run; both, the events in [from, to] (ns of trace time). A memviz snapshot's
// segments are the state at `to`.
struct WindowOptions {
  std::optional<std::uint64_t> last_events;
  std::optional<std::uint64_t> from_ns, to_ns;
};
void export_memviz(RecordedRun& run, std::ostream& out, Symbolizer* symbolizer,
                   const WindowOptions& window = {});
void export_chrome(RecordedRun& run, std::ostream& out, const WindowOptions& window = {});
void export_rmm(RecordedRun& run, std::ostream& out);
// device: which device's buffers (the CSV form has no device column); nullopt: the only
// device of the run, an error when there are several.
void export_lifetimes_csv(RecordedRun& run, std::ostream& out, std::optional<int> device);

}  // namespace luma::tools
