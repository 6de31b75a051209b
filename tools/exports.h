// exports.h - `luma export` formats, one file each: memviz (PyTorch memory_viz snapshot
// pickle), chrome (Trace Event Format JSON), rmm (RMM's logging CSV), csv (the planner's
// lifetimes). Each reads the run (possibly in several passes) and writes to `out`; they
// throw std::runtime_error for input they cannot express.
#pragma once

#include <optional>
#include <ostream>

#include "recorded_run.h"
#include "symbolizer.h"

namespace luma::tools {

// Segments larger than this are "large" in the snapshot, as PyTorch's small pool holds
// only its 2 MiB segments.
inline constexpr std::uint64_t kSmallSegmentBytes = 2u << 20;

// What of the run a memviz snapshot keeps (PyTorch's own keeps its last max_entries).
struct MemvizOptions {
  std::optional<std::uint64_t> last_entries;  // each device's last N trace entries
  std::optional<std::uint64_t> from_ns, to_ns;  // events in [from, to] (trace time); the
                                               // segments are the state at `to`
};
void export_memviz(RecordedRun& run, std::ostream& out, Symbolizer* symbolizer,
                   const MemvizOptions& options = {});
void export_chrome(RecordedRun& run, std::ostream& out);
void export_rmm(RecordedRun& run, std::ostream& out);
// device: which device's buffers (the CSV form has no device column); nullopt: the only
// device of the run, an error when there are several.
void export_lifetimes_csv(RecordedRun& run, std::ostream& out, std::optional<int> device);

}  // namespace luma::tools
