// forwarded_stats.h - what `luma stats` says about the allocation calls luma forwarded to
// the driver (the trace's forwarded_call records: stream-ordered pools, managed and pinned
// host memory, virtual memory), per path as the shim grouped them: calls by entry point,
// bytes allocated and freed, and the bytes live at once (their peak, where every free can be
// matched to what it frees: by address, or by cuMemCreate handle).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace/trace_format.h"

namespace luma::tools {

struct ForwardedPathSummary {
  std::string path;  // the shim's id of the path ("stream_ordered", "virtual_memory", ...)
  std::uint64_t allocs = 0, alloc_bytes = 0, frees = 0, freed_bytes = 0;
  std::uint64_t maps = 0, mapped_bytes = 0, unmaps = 0;
  std::uint64_t live_bytes = 0, peak_live_bytes = 0;  // allocated (or mapped) and not freed
  std::uint64_t unmatched_frees = 0;  // frees whose allocation the trace does not name
  std::uint64_t unnamed_allocs = 0;   // allocations recorded without address or handle
  std::map<std::string, std::uint64_t> calls_by_entry;
  // The live bytes are exact only when every free was matched and every allocation named.
  bool live_known() const noexcept { return unmatched_frees == 0 && unnamed_allocs == 0; }
};

class ForwardedStats {
 public:
  // One record, in file order; a record seen before (a second pass over the trace delivers
  // everything again) is ignored.
  void add(const core::trace::ForwardedCall& call);
  std::uint64_t calls() const noexcept { return calls_; }
  // The paths that had calls, in the order they first appear in the trace.
  const std::vector<ForwardedPathSummary>& paths() const noexcept { return paths_; }

 private:
  std::vector<ForwardedPathSummary> paths_;
  std::map<std::string, std::size_t, std::less<>> index_;
  // Live allocations of each path: key (address, or handle for cuMemCreate) -> bytes.
  std::vector<std::unordered_map<std::uint64_t, std::uint64_t>> live_;
  std::uint64_t calls_ = 0;
  std::uint64_t next_seq_ = 0;
};

}  // namespace luma::tools
