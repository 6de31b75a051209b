// chrome_export.cpp - Trace Event Format JSON (Perfetto, chrome://tracing): per device one
// counter track ("ph":"C") with allocated and reserved bytes, updated at every event that
// changes them, and an instant event ("ph":"i") per out-of-memory. Written as a stream:
// memory does not grow with the trace.
#include <fmt/core.h>

#include <map>
#include <unordered_map>

#include "exports.h"
#include "utf8_text.h"

namespace luma::tools {

void export_chrome(RecordedRun& run, std::ostream& out) {
  const std::uint64_t pid = run.header().pid;
  struct State {
    std::uint64_t allocated = 0, reserved = 0;
    std::unordered_map<std::uint64_t, std::uint64_t> live;
  };
  std::map<int, State> dev;
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  std::string cmd = run.header().command_line.empty() ? run.path() : run.header().command_line[0];
  std::string escaped;
  for (char c : valid_utf8(cmd)) {  // JSON text is UTF-8: a Latin-1 name would break it
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  out << fmt::format(
      "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"{} (luma)\"}}}}",
      pid, escaped);
  run.read([&](const core::TraceEvent& e) {
    State& s = dev[e.device];
    const double ts = double(e.time_ns) / 1000.0;
    switch (e.kind) {
      case core::EventKind::alloc:
        s.allocated += e.size;
        s.live[e.address] = e.size;
        break;
      case core::EventKind::free_requested: {
        auto it = s.live.find(e.address);
        if (it == s.live.end()) return;
        s.allocated -= it->second;
        s.live.erase(it);
        break;
      }
      case core::EventKind::segment_reserve: s.reserved += e.size; break;
      case core::EventKind::segment_release: s.reserved -= std::min(s.reserved, e.size); break;
      case core::EventKind::oom:
        out << fmt::format(
            ",\n{{\"name\":\"out of memory (device {})\",\"ph\":\"i\",\"s\":\"p\",\"ts\":{:.3f},"
            "\"pid\":{},\"tid\":{},\"args\":{{\"requested\":{},\"event\":{}}}}}",
            e.device, ts, pid, e.thread, e.requested, e.index);
        return;
      default: return;
    }
    out << fmt::format(
        ",\n{{\"name\":\"device {} memory\",\"ph\":\"C\",\"ts\":{:.3f},\"pid\":{},"
        "\"args\":{{\"allocated\":{},\"reserved\":{}}}}}",
        e.device, ts, pid, s.allocated, s.reserved);
  });
  out << "\n]}\n";
}

}  // namespace luma::tools
