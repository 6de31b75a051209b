// live_view.h - what `luma top` and `luma exporter` show of the live records: one row per
// process and device (the process's allocators of that device added up), the use of each
// limit_group's budget, and the table and JSON forms of `luma top`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "live/live_reader.h"

namespace luma::core::live {

struct DeviceRow {
  unsigned pid = 0;
  std::string exe;
  std::string command;
  std::string group;  // the process's limit_group ("" for none)
  int device = 0;
  std::uint64_t allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t pending_free_bytes = 0;
  std::uint64_t oom_count = 0;
  std::optional<std::uint64_t> limit_bytes;  // nullopt: no limit
  bool group_limit = false;                  // the limit is the group's budget
};

// A limit_group's budget on one device and what its members reserve under it.
struct GroupRow {
  std::string group;
  int device = 0;
  std::uint64_t budget_bytes = 0;
  std::uint64_t reserved_bytes = 0;  // the members' reserved bytes, added up
  unsigned members = 0;
};

// A file of the directory that was not read, and why.
struct SkippedFile {
  std::string path;
  std::string reason;
};

// One row per device of the record, its slots added up (several contexts of one device:
// currents and counts add, a peak is the largest of the peaks and of the summed current,
// as the exit statistics do for contexts, core::PeakRule::parts_in_turn).
std::vector<DeviceRow> device_rows(const RecordView& record);

// Largest reserved first, then by pid and device (a stable order for equal rows).
void sort_rows(std::vector<DeviceRow>& rows);

// Every (group, device) whose limit is a group's budget, with its members' sum; by group
// name and device.
std::vector<GroupRow> group_rows(const std::vector<DeviceRow>& rows);

struct TopFormat {
  bool exact_bytes = false;  // byte counts instead of "1.5 GiB"
};

// The table `luma top` prints: a header line, a line per row, a line per group.
std::string format_top_text(const std::vector<DeviceRow>& rows, const std::vector<GroupRow>& groups,
                            const TopFormat& format);
// The same as one JSON object: {"processes": n, "rows": [...], "groups": [...],
// "skipped": [...]} (docs/live-record.md lists the keys).
std::string format_top_json(const std::vector<DeviceRow>& rows, const std::vector<GroupRow>& groups,
                            const std::vector<SkippedFile>& skipped);

}  // namespace luma::core::live
