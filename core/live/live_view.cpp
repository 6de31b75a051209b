// live_view.cpp - rows, groups and the two forms of `luma top` (see live_view.h).
#include "live/live_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "stats/stats_format.h"

namespace luma::core::live {

std::vector<DeviceRow> device_rows(const RecordView& record) {
  std::vector<DeviceRow> rows;
  for (const SlotValues& s : record.slots) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const DeviceRow& r) { return r.device == s.device; });
    if (it == rows.end()) {
      DeviceRow r;
      r.pid = record.pid;
      r.exe = record.exe;
      r.command = record.command;
      r.group = record.group;
      r.device = s.device;
      rows.push_back(std::move(r));
      it = rows.end() - 1;
    }
    DeviceRow& r = *it;
    r.allocated_bytes += s.allocated_bytes;
    r.reserved_bytes += s.reserved_bytes;
    r.pending_free_bytes += s.pending_free_bytes;
    r.oom_count += s.oom_count;
    r.peak_allocated_bytes = std::max({r.peak_allocated_bytes, s.peak_allocated_bytes, r.allocated_bytes});
    r.peak_reserved_bytes = std::max({r.peak_reserved_bytes, s.peak_reserved_bytes, r.reserved_bytes});
    if ((s.flags & kSlotHasLimit) != 0) {
      // One budget per device index: every allocator of the device has the same limit.
      r.limit_bytes = std::max(r.limit_bytes.value_or(0), s.limit_bytes);
      r.group_limit = r.group_limit || (s.flags & kSlotGroupLimit) != 0;
    }
  }
  return rows;
}

void sort_rows(std::vector<DeviceRow>& rows) {
  std::sort(rows.begin(), rows.end(), [](const DeviceRow& a, const DeviceRow& b) {
    if (a.reserved_bytes != b.reserved_bytes) return a.reserved_bytes > b.reserved_bytes;
    return std::tie(a.pid, a.device) < std::tie(b.pid, b.device);
  });
}

std::vector<GroupRow> group_rows(const std::vector<DeviceRow>& rows) {
  std::map<std::pair<std::string, int>, GroupRow> groups;
  for (const DeviceRow& r : rows) {
    if (!r.group_limit || !r.limit_bytes) continue;
    GroupRow& g = groups[{r.group, r.device}];
    g.group = r.group;
    g.device = r.device;
    // Every member gives the same limit (each checks the group's total against its own);
    // should they differ, the largest is the most any member lets the group reach.
    g.budget_bytes = std::max(g.budget_bytes, *r.limit_bytes);
    g.reserved_bytes += r.reserved_bytes;
    ++g.members;
  }
  std::vector<GroupRow> out;
  for (auto& [key, g] : groups) out.push_back(std::move(g));
  return out;
}

namespace {

std::string size_text(std::uint64_t bytes, const TopFormat& f) {
  return f.exact_bytes ? std::to_string(bytes) : format_bytes(bytes);
}

// The executable's name, cut to the column (as top cuts COMMAND).
std::string command_cell(const DeviceRow& r) {
  constexpr std::size_t kWidth = 16;
  std::string name = r.exe.empty() ? r.command : r.exe;
  if (name.size() > kWidth) name.resize(kWidth);
  return name;
}

}  // namespace

std::string format_top_text(const std::vector<DeviceRow>& rows, const std::vector<GroupRow>& groups,
                            const TopFormat& format) {
  std::set<unsigned> pids;
  std::uint64_t allocated = 0, reserved = 0;
  for (const DeviceRow& r : rows) {
    pids.insert(r.pid);
    allocated += r.allocated_bytes;
    reserved += r.reserved_bytes;
  }
  const int w = format.exact_bytes ? 13 : 10;  // a byte column's width
  std::string out = fmt::format("{} process{} under luma: {} reserved, {} allocated\n", pids.size(),
                                pids.size() == 1 ? "" : "es", size_text(reserved, format),
                                size_text(allocated, format));
  out += fmt::format("{:>8} {:<16} {:>3} {:>{w}} {:>{w}} {:>{w}} {:>{w}} {:>{w}} {:<16} {:>5}\n", "PID",
                     "COMMAND", "DEV", "ALLOCATED", "RESERVED", "PEAK", "PENDING", "LIMIT", "GROUP", "OOMS",
                     fmt::arg("w", w));
  for (const DeviceRow& r : rows) {
    out += fmt::format("{:>8} {:<16} {:>3} {:>{w}} {:>{w}} {:>{w}} {:>{w}} {:>{w}} {:<16} {:>5}\n", r.pid,
                       command_cell(r), r.device, size_text(r.allocated_bytes, format),
                       size_text(r.reserved_bytes, format), size_text(r.peak_reserved_bytes, format),
                       size_text(r.pending_free_bytes, format),
                       r.limit_bytes ? size_text(*r.limit_bytes, format) : std::string("-"),
                       r.group.empty() ? std::string("-") : r.group, r.oom_count, fmt::arg("w", w));
  }
  for (const GroupRow& g : groups)
    out += fmt::format("group {} on device {}: {} reserved of its {} budget by {} process{}\n", g.group,
                       g.device, size_text(g.reserved_bytes, format), size_text(g.budget_bytes, format),
                       g.members, g.members == 1 ? "" : "es");
  return out;
}

std::string format_top_json(const std::vector<DeviceRow>& rows, const std::vector<GroupRow>& groups,
                            const std::vector<SkippedFile>& skipped) {
  using Json = nlohmann::ordered_json;
  Json out = Json::object();
  std::set<unsigned> pids;
  Json jrows = Json::array();
  for (const DeviceRow& r : rows) {
    pids.insert(r.pid);
    jrows.push_back({{"pid", r.pid},
                     {"command", r.command},
                     {"exe", r.exe},
                     {"device", r.device},
                     {"allocated_bytes", r.allocated_bytes},
                     {"reserved_bytes", r.reserved_bytes},
                     {"peak_reserved_bytes", r.peak_reserved_bytes},
                     {"peak_allocated_bytes", r.peak_allocated_bytes},
                     {"pending_free_bytes", r.pending_free_bytes},
                     {"limit_bytes", r.limit_bytes ? Json(*r.limit_bytes) : Json(nullptr)},
                     {"group", r.group},
                     {"group_limit", r.group_limit},
                     {"oom_count", r.oom_count}});
  }
  out["processes"] = pids.size();
  out["rows"] = std::move(jrows);
  Json jgroups = Json::array();
  for (const GroupRow& g : groups)
    jgroups.push_back({{"group", g.group},
                       {"device", g.device},
                       {"budget_bytes", g.budget_bytes},
                       {"reserved_bytes", g.reserved_bytes},
                       {"members", g.members}});
  out["groups"] = std::move(jgroups);
  Json jskipped = Json::array();
  for (const SkippedFile& s : skipped) jskipped.push_back({{"path", s.path}, {"reason", s.reason}});
  out["skipped"] = std::move(jskipped);
  // Text from another process (a command line) need not be UTF-8: replaced, never thrown on.
  return out.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace luma::core::live
