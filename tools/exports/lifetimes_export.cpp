// lifetimes_export.cpp - the planner's CSV `id,lower,upper,size`: one row per allocation
// of one device, lower = its event index, upper = the index of its free (free_requested),
// or the number of events for allocations never freed (live to the end of the trace).
#include <fmt/core.h>

#include <set>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "exports/exports.h"

namespace luma::tools {

void export_lifetimes_csv(RecordedRun& run, std::ostream& out, std::optional<int> device) {
  struct Row {
    std::uint64_t lower, upper, size;
  };
  std::vector<Row> rows;
  std::unordered_map<std::uint64_t, std::size_t> live;  // address -> row
  std::set<int> devices;
  std::uint64_t events = 0;
  const int want = device.value_or(-1);
  bool several = false;
  int first_device = -1;
  run.read([&](const core::TraceEvent& e) {
    ++events;
    devices.insert(e.device);
    if (!device) {
      if (first_device < 0) first_device = e.device;
      if (e.device != first_device) several = true;
    }
    if (e.device != (device ? want : first_device)) return;
    if (e.kind == core::EventKind::alloc) {
      live[e.address] = rows.size();
      rows.push_back({e.index, ~0ull, e.size});
    } else if (e.kind == core::EventKind::free_requested) {
      auto it = live.find(e.address);
      if (it == live.end()) return;
      rows[it->second].upper = e.index;
      live.erase(it);
    }
  });
  if (several) {
    std::string list;
    for (int d : devices) list += (list.empty() ? "" : ", ") + std::to_string(d);
    throw std::runtime_error(run.path() + ": the trace has devices " + list +
                             "; the CSV form holds one: choose it with --device");
  }
  if (device && !devices.count(*device))
    throw std::runtime_error(run.path() + ": no events on device " + std::to_string(*device));
  out << "id,lower,upper,size\n";
  for (std::size_t i = 0; i < rows.size(); ++i)
    out << fmt::format("{},{},{},{}\n", i, rows[i].lower,
                       rows[i].upper == ~0ull ? events : rows[i].upper, rows[i].size);
}

}  // namespace luma::tools
