// chrome_export.cpp - Trace Event Format JSON (Perfetto, chrome://tracing), telling the
// same story as the memviz snapshot of the same trace (docs/memviz.md):
// - per device one counter track ("ph":"C", category "memory"): `allocated` (block bytes,
//   down at the free request: `luma stats`' allocated), `active` (block bytes, down when
//   the free completes, its fences done: PyTorch's "active"), `active_requested` (the same
//   in requested bytes: the memviz Active Memory Timeline's total) and `reserved`. A free
//   still pending when the trace ends completes at its last event, as in the memviz
//   export; an RMM log's frees complete at once.
// - per allocation an async slice ("b"/"e", category "allocation") from the alloc to the
//   completion of its free, on the allocating thread's process; one never freed stays
//   open to the end of the trace;
// - an instant event ("ph":"i", category "oom") per out-of-memory, on its thread;
// - process and thread names ("ph":"M").
// --last N / --from / --to write part of the run (its counters start from the state at
// the window's start). Written as a stream: memory grows with the live blocks, not with
// the trace.
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "exports/exports.h"
#include "io/utf8_text.h"

namespace luma::tools {

namespace {
std::string json_text(const std::string& raw) {
  std::string escaped;
  for (char c : core::valid_utf8(raw)) {  // JSON text is UTF-8: a Latin-1 name would break it
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  return escaped;
}
}  // namespace

void export_chrome(RecordedRun& run, std::ostream& out, const WindowOptions& window) {
  const std::uint64_t pid = run.header().pid;
  const std::uint64_t from_ns = window.from_ns.value_or(0);
  const std::uint64_t to_ns = window.to_ns.value_or(UINT64_MAX);
  if (from_ns > to_ns) throw std::runtime_error("the time window ends before it starts");
  std::uint64_t first_index = 0;  // --last N: the events from this index on
  if (window.last_events) {
    std::uint64_t events = 0;
    run.read([&](const core::TraceEvent&) { ++events; });
    first_index = events > *window.last_events ? events - *window.last_events : 0;
  }
  struct Live {
    std::uint64_t size, requested, id;
    bool pending, shown;  // shown: its slice began in the output
  };
  struct State {
    std::uint64_t allocated = 0, active = 0, requested = 0, reserved = 0;
    std::unordered_map<std::uint64_t, Live> live;
  };
  std::map<int, State> dev;
  std::set<std::uint64_t> threads;
  const bool frees_at_once = run.frees_complete_at_once();
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  const std::string cmd =
      run.header().command_line.empty() ? run.path() : run.header().command_line[0];
  out << fmt::format(
      "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"{} (luma)\"}}}}",
      pid, json_text(cmd));
  auto counter = [&](int device, const State& s, double ts) {
    out << fmt::format(
        ",\n{{\"name\":\"device {} memory\",\"cat\":\"memory\",\"ph\":\"C\",\"ts\":{:.3f},"
        "\"pid\":{},\"args\":{{\"allocated\":{},\"active\":{},\"active_requested\":{},"
        "\"reserved\":{}}}}}",
        device, ts, pid, s.allocated, s.active, s.requested, s.reserved);
  };
  auto complete = [&](int device, State& s, std::uint64_t address, double ts, bool show) {
    auto it = s.live.find(address);
    if (it == s.live.end()) return false;
    if (!it->second.pending) s.allocated -= it->second.size;
    s.active -= it->second.size;
    s.requested -= std::min(s.requested, it->second.requested);
    if (show && it->second.shown)
      out << fmt::format(
        ",\n{{\"name\":\"allocation\",\"cat\":\"allocation\",\"ph\":\"e\",\"ts\":{:.3f},"
        "\"pid\":{},\"id\":\"{}.{}\"}}",
        ts, pid, device, it->second.id);
    s.live.erase(it);
    return true;
  };
  std::uint64_t last_ns = 0;
  bool past_window = false;
  run.read([&](const core::TraceEvent& e) {
    if (e.time_ns > to_ns) {
      past_window = true;
      return;
    }
    State& s = dev[e.device];
    const double ts = double(e.time_ns) / 1000.0;
    last_ns = std::max(last_ns, e.time_ns);
    const bool show = e.index >= first_index && e.time_ns >= from_ns;
    if (show && threads.insert(e.thread).second)
      out << fmt::format(
          ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},"
          "\"args\":{{\"name\":\"thread {}\"}}}}",
          pid, e.thread, e.thread);
    switch (e.kind) {
      case core::EventKind::alloc: {
        const std::uint64_t req = e.requested ? e.requested : e.size;
        s.allocated += e.size;
        s.active += e.size;
        s.requested += req;
        s.live[e.address] = {e.size, req, e.index, false, show};
        if (show)
          out << fmt::format(
              ",\n{{\"name\":\"allocation\",\"cat\":\"allocation\",\"ph\":\"b\",\"ts\":{:.3f},"
              "\"pid\":{},\"tid\":{},\"id\":\"{}.{}\",\"args\":{{\"address\":\"0x{:x}\","
              "\"size\":{},\"requested\":{},\"stream\":{}}}}}",
              ts, pid, e.thread, e.device, e.index, e.address, e.size, req, e.stream);
        break;
      }
      case core::EventKind::free_requested: {
        auto it = s.live.find(e.address);
        if (it == s.live.end()) return;
        if (frees_at_once) {
          complete(e.device, s, e.address, ts, show);
          break;
        }
        if (it->second.pending) return;
        it->second.pending = true;  // allocated drops now; active at the completion
        s.allocated -= it->second.size;
        break;
      }
      case core::EventKind::free_completed:
        if (!complete(e.device, s, e.address, ts, show)) return;
        break;
      case core::EventKind::segment_reserve: s.reserved += e.size; break;
      case core::EventKind::segment_release: s.reserved -= std::min(s.reserved, e.size); break;
      case core::EventKind::oom:
        if (!show) return;
        out << fmt::format(
            ",\n{{\"name\":\"out of memory (device {})\",\"cat\":\"oom\",\"ph\":\"i\",\"s\":\"t\","
            "\"ts\":{:.3f},\"pid\":{},\"tid\":{},\"args\":{{\"requested\":{},\"event\":{}}}}}",
            e.device, ts, pid, e.thread, e.requested, e.index);
        return;
      default: return;
    }
    if (show) counter(e.device, s, ts);
  });
  // Frees still pending when the trace ends complete there (the process exited); at the
  // end of a --to window they are still pending.
  const double end_ts = double(last_ns) / 1000.0;
  for (auto& [device, s] : dev) {
    if (past_window) break;
    std::vector<std::uint64_t> pending;
    for (const auto& [address, l] : s.live)
      if (l.pending) pending.push_back(address);
    if (pending.empty()) continue;
    std::sort(pending.begin(), pending.end());
    for (std::uint64_t a : pending) complete(device, s, a, end_ts, true);
    counter(device, s, end_ts);
  }
  out << "\n]}\n";
}

}  // namespace luma::tools
