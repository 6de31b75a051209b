// plan_fingerprint.h - which run a plan was made from, and whether the current process is
// that run again: the executable, its arguments and the devices (from the trace header).
//
// What must match, and why (docs/plan-replay.md):
// - the executable's base name: the same program, wherever it is started from (./app and
//   /home/me/app are the same program; an absolute path differs between machines);
// - every argument, in order: the arguments decide the work (model, batch size, input
//   file), and so the sequence of allocations the plan follows;
// - the number of devices and each device's name, in index order: a different GPU changes
//   what libraries allocate (workspace sizes chosen per architecture, memory sized from
//   cuMemGetInfo), and a plan of device 1 is meaningless where there is no device 1.
// Device memory totals are not compared: the same model reports the same total, and a
// driver update that moves it by a page should not turn a plan away.
// Pure functions: no I/O, no environment; the shim collects the current run's fingerprint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/trace_header.h"

namespace luma::core {

struct FingerprintDevice {
  std::uint32_t index = 0;
  std::string name;
  std::uint64_t total_bytes = 0;  // recorded for the reader; never compared
};

struct RunFingerprint {
  std::string executable;              // argv[0] as the process was started
  std::vector<std::string> arguments;  // argv[1..]
  std::vector<FingerprintDevice> devices;
};

// The fingerprint a trace header describes (its command line and devices).
RunFingerprint fingerprint_of(const TraceHeader& header);

struct FingerprintMatch {
  bool match = false;
  std::string reason;  // one line, when it does not match
};

// Whether `current` is the run `planned` describes; the reason names the first difference.
FingerprintMatch match_fingerprint(const RunFingerprint& planned, const RunFingerprint& current);

// The base name of an executable path ("./bin/app" -> "app").
std::string executable_base_name(const std::string& path);

}  // namespace luma::core
