// run_identity.h - what identifies this run: host, command line (from /proc/self/cmdline,
// so it is right for any program, whatever its main did with argv) and the devices as the
// real driver names them. One source for the trace header (trace_recorder.cpp) and the
// plan's fingerprint check (plan_loader.cpp), so a plan made from a trace is matched
// against exactly what that trace recorded.
// Call only after the driver is initialised (cuInit ran): the first context's allocator is
// built then. Never throws except std::bad_alloc.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "io/path_pattern.h"
#include "driver/real_driver.h"
#include "trace/trace_header.h"

namespace luma::shim {

// The file's contents, cut at max_bytes ("" when it cannot be read).
std::string read_proc_file(const char* path, std::size_t max_bytes);

std::string host_name();

// This process's facts for a file-name pattern (core/io/path_pattern.h): pid, host name,
// rank from the launchers' variables, executable name. `fields()` points into it.
struct ProcessNames {
  long pid = 0;
  std::string host;
  std::string rank;
  const char* exe = "";
  core::PathFields fields() const { return {pid, host, rank, exe}; }
};
ProcessNames process_names();

// argv of this process, as started (from /proc/self/cmdline).
std::vector<std::string> process_command_line();

// Every device the driver reports (at most 64): index, name, total memory.
std::vector<core::TraceDevice> driver_devices(const RealDriver& driver);

}  // namespace luma::shim
