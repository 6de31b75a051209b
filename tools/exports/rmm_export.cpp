// rmm_export.cpp - RMM's logging_resource_adaptor CSV: `Thread,Time,Action,Pointer,Size,
// Stream`, Action allocate / free / allocate failure; Time as RMM writes it
// (HH:MM:SS.microseconds, wall clock: the trace's start time plus the event's).
#include <fmt/core.h>

#include "exports/exports.h"

namespace luma::tools {

void export_rmm(RecordedRun& run, std::ostream& out) {
  out << "Thread,Time,Action,Pointer,Size,Stream\n";
  const std::uint64_t start = run.header().start_unix_ns;
  run.read([&](const core::TraceEvent& e) {
    const char* action = nullptr;
    std::uint64_t size = e.size;
    switch (e.kind) {
      case core::EventKind::alloc: action = "allocate"; break;
      case core::EventKind::free_requested: action = "free"; break;
      case core::EventKind::oom: action = "allocate failure"; size = e.requested; break;
      default: return;
    }
    const std::uint64_t t = (start + e.time_ns) / 1000;  // microseconds since 1970
    const std::uint64_t day_us = t % (86400ull * 1000000);
    out << fmt::format("{},{:02}:{:02}:{:02}.{:06},{},0x{:x},{},0x{:x}\n", e.thread,
                       day_us / 3600000000ull, day_us / 60000000ull % 60,
                       day_us / 1000000ull % 60, day_us % 1000000, action, e.address, size,
                       e.stream);
  });
}

}  // namespace luma::tools
