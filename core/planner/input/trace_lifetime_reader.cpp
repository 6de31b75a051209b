// trace_lifetime_reader.cpp - see trace_lifetime_reader.h. The lifetimes match
// `luma export --format csv` (tools/lifetimes_export.cpp): same indices, same sizes.
#include "planner/input/trace_lifetime_reader.h"

#include <iterator>
#include <sstream>
#include <unordered_map>

#include "trace/trace_reader.h"

namespace luma::core {

bool TraceLifetimeReader::accepts(std::string_view head) const {
  return TraceReader::accepts(head);
}

std::vector<Lifetime> TraceLifetimeReader::read(std::istream& in,
                                                const std::string& source) const {
  // The whole stream: the trace reader needs random access and bounds every length by
  // what the bytes hold.
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw PlanInputError(source + ": read error");
  std::vector<Lifetime> out;
  // device -> address -> the live lifetime at that address.
  std::unordered_map<int, std::unordered_map<std::uint64_t, std::size_t>> live;
  auto live_of = [&](int device) -> auto& { return live[device]; };
  std::uint64_t events = 0;
  try {
    TraceReader reader(std::move(bytes), source);
    reader.read([&](const TraceEvent& e) {
      events = e.index + 1;
      if (e.kind == EventKind::alloc) {
        Lifetime l;
        l.id = std::to_string(out.size());
        l.lower = e.index;
        l.upper = ~0ull;
        l.size = e.size;
        l.device = e.device;
        live_of(e.device)[e.address] = out.size();
        out.push_back(std::move(l));
      } else if (e.kind == EventKind::free_requested) {
        auto& m = live_of(e.device);
        auto it = m.find(e.address);
        if (it == m.end()) return;  // allocated before the trace began
        out[it->second].upper = e.index;
        m.erase(it);
      }
    });
  } catch (const TraceError& e) {
    throw PlanInputError(e.what());
  }
  for (Lifetime& l : out)
    if (l.upper == ~0ull) l.upper = events;  // never freed: live to the end
  return out;
}

}  // namespace luma::core
