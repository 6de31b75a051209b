// plan_trace_input.h - a luma trace read as the input of a replay plan: the planner's
// lifetimes exactly as TraceLifetimeReader gives them (same indices, same sizes), except
// that each is aligned to cudaMalloc's 256 B (replay hands the planned offsets out as
// device pointers), plus what the lifetimes lack: the bytes each allocation requested, and
// the fingerprint of the run (its command line and devices, from the header).
// Bad input ends in one PlanInputError carrying the trace reader's message (file, offset).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replay/plan_fingerprint.h"
#include "planner/lifetime.h"

namespace luma::core {

// (Not tools' RecordedRun, which is a trace opened for the tools' own reports.)
struct PlanTraceInput {
  RunFingerprint fingerprint;
  std::vector<Lifetime> lifetimes;       // one per alloc event, in trace order
  std::vector<std::uint64_t> requested;  // lifetimes[i] asked for requested[i] bytes
};

PlanTraceInput read_plan_trace_input(const std::string& path);
// The same from bytes in memory (tests); `source` names it in messages.
PlanTraceInput read_plan_trace_input_bytes(std::string bytes, const std::string& source);

// The allocations of one device, in trace order (= that device's sequence order).
struct DeviceAllocations {
  std::vector<Lifetime> lifetimes;
  std::vector<std::uint64_t> requested;
};
DeviceAllocations allocations_of_device(const PlanTraceInput& run, int device);

}  // namespace luma::core
