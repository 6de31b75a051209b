// live_directory.h - the live records of this user's processes in a directory (the
// reading side of LUMA_LIVE_DIR, docs/live-record.md), for `luma top` and `luma exporter`.
// Reads files only: never signals or attaches to a process.
//
// Each file named luma-live.UID.PID with this user's uid is opened without following
// links and used only if it is this user's own and nobody else may write it; one that is
// not, or that is not a record of this layout, is skipped with its reason. A record whose
// process is gone (killed, crashed: it never removed it) is removed here.
#pragma once

#include <string>
#include <vector>

#include "live/live_reader.h"
#include "live/live_view.h"

namespace luma::tools {

struct LiveScan {
  std::vector<core::live::RecordView> records;     // of running processes
  std::vector<core::live::SkippedFile> skipped;    // not read, and why
};

// LUMA_LIVE_DIR when it is an absolute directory, else /dev/shm.
std::string default_live_dir();

// Throws std::runtime_error naming `dir` when it cannot be listed.
LiveScan scan_live_directory(const std::string& dir);

// The rows of every record, largest reserved first.
std::vector<core::live::DeviceRow> rows_of(const LiveScan& scan);

// "PATH REASON; skipped": the line a skipped file gets.
std::string skipped_line(const core::live::SkippedFile& s);

}  // namespace luma::tools
