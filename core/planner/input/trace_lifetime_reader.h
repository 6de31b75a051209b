// trace_lifetime_reader.h - a luma trace (docs/trace-format.md) as planner input: one
// lifetime per alloc, from its event index to the index of its free_requested (or to the
// end of the trace when never freed; a free of an address allocated before the trace began
// is ignored), on the device it was made on. The one reading of a trace's allocations:
// `luma plan` on lifetimes and the input of a replay plan (which also needs the bytes each
// allocation requested, the run's fingerprint, 256-byte alignment and the whole run) are
// the same lifetimes, same indices, same sizes. A trace that does not read gives a
// PlanInputError carrying the trace reader's message (file and byte offset).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan_fingerprint.h"
#include "planner/input/lifetime_reader.h"

namespace luma::core {

class TraceLifetimeReader final : public LifetimeReader {
 public:
  std::string_view format_name() const override { return "luma trace"; }
  std::string_view expected_start() const override { return "LUMATRC\\x01"; }
  bool accepts(std::string_view head) const override;
  std::vector<Lifetime> read(std::istream& in, const std::string& source) const override;
};

// A trace's allocations with what a replay plan needs beyond lifetimes.
struct TraceAllocations {
  RunFingerprint fingerprint;            // command line and devices, from the header
  std::vector<Lifetime> lifetimes;       // one per alloc event, in trace order
  std::vector<std::uint64_t> requested;  // lifetimes[i] asked for requested[i] bytes
};

// `for_replay`: each lifetime aligned to cudaMalloc's 256 B (replay hands planned offsets
// out as device pointers), and a trace cut short refused (a plan must cover the whole
// run: one made from the part before a cut would place only the buffers the cut left).
TraceAllocations read_trace_allocations(std::string bytes, const std::string& source, bool for_replay);
TraceAllocations read_trace_allocations_file(const std::string& path, bool for_replay);

// The allocations of one device, in trace order (= that device's sequence order).
struct DeviceAllocations {
  std::vector<Lifetime> lifetimes;
  std::vector<std::uint64_t> requested;
};
DeviceAllocations allocations_of_device(const TraceAllocations& run, int device);

}  // namespace luma::core
