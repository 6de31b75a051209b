// plan_trace_input.cpp - see plan_trace_input.h. Mirrors TraceLifetimeReader's rules (a
// lifetime runs from its alloc event to its free_requested, or to the end of the trace; a
// free of an address allocated before the trace began is ignored) so that a replay plan and
// `luma plan` on the same trace see the same lifetimes.
#include "plan_trace_input.h"

#include <unordered_map>

#include "plan_constants.h"
#include "planner/lifetime_reader.h"
#include "trace/trace_reader.h"

namespace luma::core {
namespace {

PlanTraceInput read_from(TraceReader& reader) {
  // A plan must cover the whole run: one made from the part before a cut would place only
  // the buffers the cut left (luma stats and export read such a trace, with a warning).
  if (reader.truncation().truncated)
    throw TraceError(reader.source(), reader.truncation().file_bytes,
                     reader.truncation().describe() + "; a plan needs the whole run");
  PlanTraceInput run;
  run.fingerprint = fingerprint_of(reader.header());
  // device -> address -> the live allocation at that address.
  std::unordered_map<int, std::unordered_map<std::uint64_t, std::size_t>> live;
  std::uint64_t events = 0;
  reader.read([&](const TraceEvent& e) {
    events = e.index + 1;
    if (e.kind == EventKind::alloc) {
      Lifetime l;
      l.id = std::to_string(run.lifetimes.size());
      l.lower = e.index;
      l.upper = ~0ull;
      l.size = e.size;
      l.alignment = plan::kMinReplayAlignment;
      l.device = e.device;
      live[e.device][e.address] = run.lifetimes.size();
      run.lifetimes.push_back(std::move(l));
      // A writer that did not know the request stores 0: the block's size is the best guess.
      run.requested.push_back(e.requested != 0 ? e.requested : e.size);
    } else if (e.kind == EventKind::free_requested) {
      auto& m = live[e.device];
      auto it = m.find(e.address);
      if (it == m.end()) return;  // allocated before the trace began
      run.lifetimes[it->second].upper = e.index;
      m.erase(it);
    }
  });
  for (Lifetime& l : run.lifetimes)
    if (l.upper == ~0ull) l.upper = events;  // never freed: live to the end
  return run;
}

}  // namespace

PlanTraceInput read_plan_trace_input(const std::string& path) {
  try {
    TraceReader reader(path);
    return read_from(reader);
  } catch (const TraceError& e) {
    throw PlanInputError(e.what());
  }
}

PlanTraceInput read_plan_trace_input_bytes(std::string bytes, const std::string& source) {
  try {
    TraceReader reader(std::move(bytes), source);
    return read_from(reader);
  } catch (const TraceError& e) {
    throw PlanInputError(e.what());
  }
}

DeviceAllocations allocations_of_device(const PlanTraceInput& run, int device) {
  DeviceAllocations out;
  for (std::size_t i = 0; i < run.lifetimes.size(); ++i) {
    if (run.lifetimes[i].device != device) continue;
    out.lifetimes.push_back(run.lifetimes[i]);
    out.requested.push_back(run.requested[i]);
  }
  return out;
}

}  // namespace luma::core
