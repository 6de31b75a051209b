// trace_lifetime_reader.cpp - see trace_lifetime_reader.h. The lifetimes match
// `luma export --format csv` (tools/exports/lifetimes_export.cpp): same indices, same sizes.
#include "planner/input/trace_lifetime_reader.h"

#include <iterator>
#include <sstream>
#include <unordered_map>

#include "plan/plan_constants.h"
#include "trace/trace_reader.h"

namespace luma::core {
namespace {

TraceAllocations read_from(TraceReader& reader, bool for_replay) {
  if (for_replay && reader.truncation().truncated)
    throw TraceError(reader.source(), reader.truncation().file_bytes,
                     reader.truncation().describe() + "; a plan needs the whole run");
  TraceAllocations run;
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
      if (for_replay) l.alignment = plan::kMinReplayAlignment;
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

bool TraceLifetimeReader::accepts(std::string_view head) const {
  return TraceReader::accepts(head);
}

std::vector<Lifetime> TraceLifetimeReader::read(std::istream& in,
                                                const std::string& source) const {
  // The whole stream: the trace reader needs random access and bounds every length by
  // what the bytes hold.
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw PlanInputError(source + ": read error");
  return read_trace_allocations(std::move(bytes), source, false).lifetimes;
}

TraceAllocations read_trace_allocations(std::string bytes, const std::string& source, bool for_replay) {
  try {
    TraceReader reader(std::move(bytes), source);
    return read_from(reader, for_replay);
  } catch (const TraceError& e) {
    throw PlanInputError(e.what());
  }
}

TraceAllocations read_trace_allocations_file(const std::string& path, bool for_replay) {
  try {
    TraceReader reader(path);
    return read_from(reader, for_replay);
  } catch (const TraceError& e) {
    throw PlanInputError(e.what());
  }
}

DeviceAllocations allocations_of_device(const TraceAllocations& run, int device) {
  DeviceAllocations out;
  for (std::size_t i = 0; i < run.lifetimes.size(); ++i) {
    if (run.lifetimes[i].device != device) continue;
    out.lifetimes.push_back(run.lifetimes[i]);
    out.requested.push_back(run.requested[i]);
  }
  return out;
}

}  // namespace luma::core
