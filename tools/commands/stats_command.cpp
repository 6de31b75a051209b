// stats_command.cpp - `luma stats TRACE...`: per process and device, peaks, the cache at
// the peak of reserved (reserved but unallocated bytes, free blocks, fragmentation),
// counts, a size histogram, the largest allocations and the top call sites (symbolized
// here, from the recorded mappings) as the program's own frames (call_sites.h: --frames);
// a PyTorch snapshot's stages (its annotated ranges: where the peak falls, the peaks in
// each); several inputs (the ranks of one job) side by side with totals. The text fits a
// screen; --full adds the size histogram, the largest allocations and every call site.
// `--json` prints everything as one JSON document. What an input does not record (an RMM
// log's pid, times, segments) is "n/a" in text and null in JSON, never 0. `--svg F` draws
// one run's allocated and recorded reserved bytes over time (memory_svg.h); `A B --compare`
// how B's peaks differ from A's and the call sites and stages that account for it
// (stats_compare.h).
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/call_sites.h"
#include "commands/commands.h"
#include "report/forwarded_stats.h"
#include "exports/memory_svg.h"
#include "inputs/recorded_run.h"
#include "report/run_stats.h"
#include "report/stats_compare.h"
#include "inputs/symbolizer.h"

namespace luma::tools {

namespace {

struct Input {
  std::unique_ptr<RecordedRun> run;
  RunStats stats;
  ForwardedStats forwarded;  // calls luma forwarded to the driver (records_forwarded())
  std::unique_ptr<Symbolizer> symbolizer;
  std::unique_ptr<CallSites> sites;
};

struct Shown {
  bool full = false;  // the histogram, the largest allocations, every site
};


nlohmann::json frames_json(Input& in, std::uint32_t site) {
  nlohmann::json frames = nlohmann::json::array();
  for (const SiteFrame& f : in.sites->frames(site)) {
    if (f.address == 0) {  // a snapshot's call sites are named, not addresses
      frames.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line}});
      continue;
    }
    nlohmann::json j = {{"address", f.address}};
    if (in.symbolizer) {
      j["function"] = f.function;
      j["file"] = f.file;
      j["line"] = f.line;
      j["module"] = f.module;
    }
    frames.push_back(std::move(j));
  }
  return frames;
}

nlohmann::json sites_json(Input& in, const std::vector<CallSiteTotal>& sites) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : sites)
    out.push_back({{"bytes", s.bytes}, {"count", s.count}, {"frames", frames_json(in, s.stack)}});
  return out;
}

constexpr const char* kNotAvailable = "n/a";

// A value the input does not record: JSON null, and "n/a" in text (never a made-up 0).
template <typename T>
nlohmann::json if_recorded(bool recorded, const T& value) {
  return recorded ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// `layout`: the segments there are known, so their free blocks were measured.
nlohmann::json peak_reserved_json(const PeakReservedState& at, bool layout) {
  return {{"event_index", at.event_index},
          {"time_ns", at.time_ns},
          {"reserved_bytes", at.reserved},
          {"allocated_bytes", at.allocated},
          {"reserved_unallocated_bytes", at.unallocated()},
          {"free_blocks", if_recorded(layout, at.free_blocks)},
          {"largest_free_block_bytes", if_recorded(layout, at.largest_free_block)},
          {"fragmentation", if_recorded(layout, at.fragmentation())}};
}

nlohmann::json device_json(Input& in, const DeviceRunStats& d) {
  const bool times = in.run->records_times();
  const bool segments = in.run->records_segments();
  const std::optional<TorchWindow> window = in.run->torch_window(d.device);
  nlohmann::json hist = nlohmann::json::array();
  for (std::size_t k = 0; k < d.histogram.size(); ++k)
    if (d.histogram[k])
      hist.push_back({{"min_bytes", std::uint64_t{1} << k},
                      {"max_bytes", k == 63 ? ~0ull : (std::uint64_t{2} << k) - 1},
                      {"count", d.histogram[k]}});
  nlohmann::json largest = nlohmann::json::array();
  for (const auto& a : d.largest)
    largest.push_back({{"size", a.size}, {"requested", a.requested}, {"address", a.address},
                       {"event_index", a.index}, {"time_ns", if_recorded(times, a.time_ns)}});
  nlohmann::json out = {{"device", d.device},
          {"peak_allocated_bytes", d.peak_allocated},
          {"peak_reserved_bytes", if_recorded(segments, d.peak_reserved)},
          {"peak_requested_bytes", d.peak_requested},
          {"at_peak_reserved",
           segments ? peak_reserved_json(d.at_peak_reserved, d.layout_known) : nlohmann::json(nullptr)},
          {"peak", {{"event_index", d.peak_index}, {"time_ns", if_recorded(times, d.peak_time_ns)}}},
          {"allocations", d.allocations},
          {"frees", d.frees},
          {"frees_completed", if_recorded(!in.run->frees_complete_at_once(), d.frees_completed)},
          {"segment_reserves", if_recorded(segments, d.segment_reserves)},
          {"segment_releases", if_recorded(segments, d.segment_releases)},
          {"pages_mapped", if_recorded(segments, d.pages_mapped)},
          {"pages_unmapped", if_recorded(segments, d.pages_unmapped)},
          {"page_growths", if_recorded(segments, d.page_growths)},
          {"ooms", d.ooms},
          {"empty_cache_calls", if_recorded(segments, d.empty_cache_calls)},
          {"cache_absorbed", if_recorded(segments, d.cache_absorbed())},
          {"unmatched_frees", d.unmatched_frees},
          {"allocated_bytes_total", d.allocated_bytes_total},
          {"requested_bytes_total", d.requested_bytes_total},
          {"final_allocated_bytes", d.final_allocated},
          {"final_reserved_bytes", if_recorded(segments, d.final_reserved)},
          {"size_histogram", hist},
          {"largest_allocations", largest},
          {"top_callsites_at_peak", sites_json(in, d.callsites_at_peak)},
          {"top_callsites_total", sites_json(in, d.callsites_total)}};
  // Only a PyTorch snapshot has the keys of its recording window (as only traces with
  // Python frames have top_python_lines).
  if (window) {
    nlohmann::json stages = nlohmann::json::array();
    for (const DeviceRunStats::Stage& st : d.stages)
      stages.push_back({{"name", st.name},
                        {"ranges", st.ranges},
                        {"peak_allocated_bytes", if_recorded(st.entered, st.peak_allocated)},
                        {"peak_reserved_bytes", if_recorded(st.entered, st.peak_reserved)}});
    out["stages"] = stages;
    out["stages_at_peak"] = d.stages_at_peak;
    out["incomplete"] = window->incomplete;
    out["window_notes"] = window->notes;
    out["blocks_before_window"] = window->blocks_before_window;
    out["reserved_before_window_bytes"] = window->reserved_before_window;
  }
  return out;
}

// The calls luma forwarded, one object per path that had any; null when the input cannot
// record them (an RMM log, a trace of format version 1).
nlohmann::json forwarded_json(const Input& in) {
  if (!in.run->records_forwarded()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const ForwardedPathSummary& p : in.forwarded.paths()) {
    const bool live = p.live_known();
    out.push_back({{"path", p.path},
                   {"calls", p.calls_by_entry},
                   {"allocs", p.allocs},
                   {"alloc_bytes", p.alloc_bytes},
                   {"frees", p.frees},
                   {"freed_bytes", if_recorded(live, p.freed_bytes)},
                   {"maps", p.maps},
                   {"mapped_bytes", p.mapped_bytes},
                   {"unmaps", p.unmaps},
                   {"unmatched_frees", p.unmatched_frees},
                   {"peak_live_bytes", if_recorded(live, p.peak_live_bytes)},
                   {"final_live_bytes", if_recorded(live, p.live_bytes)}});
  }
  return out;
}

// The forwarded calls in text: nothing when there were none.
void print_forwarded(const Input& in) {
  if (in.forwarded.calls() == 0) return;
  fmt::print("forwarded to the driver (not served by luma's cache): {} calls\n",
             in.forwarded.calls());
  for (const ForwardedPathSummary& p : in.forwarded.paths()) {
    std::string entries;
    for (const auto& [name, n] : p.calls_by_entry)
      entries += fmt::format("{}{} {}", entries.empty() ? "" : ", ", name, n);
    fmt::print("  {}: {}\n", p.path, entries);
    if (p.allocs || p.frees)
      fmt::print("    allocations      {} ({}), {} freed\n", p.allocs, bytes_text(p.alloc_bytes),
                 p.frees);
    if (p.maps || p.unmaps)
      fmt::print("    mappings         {} ({}), {} unmapped\n", p.maps, bytes_text(p.mapped_bytes),
                 p.unmaps);
    if (p.live_known())
      fmt::print("    peak live        {} ({} at the end)\n", bytes_text(p.peak_live_bytes),
                 bytes_text(p.live_bytes));
    else
      fmt::print("    peak live        {} ({} frees name no recorded allocation, {} allocations "
                 "no address)\n",
                 kNotAvailable, p.unmatched_frees, p.unnamed_allocs);
  }
}

struct Totals {
  std::uint64_t peak_allocated = 0, peak_reserved = 0, allocations = 0, frees = 0,
                segment_reserves = 0, ooms = 0, cache_absorbed = 0, events = 0;
  bool segments = true;  // every input records segments (else their sums are not known)
};

Totals totals_of(const std::vector<Input>& inputs) {
  Totals t;
  for (const auto& in : inputs) {
    t.events += in.stats.events;
    t.segments = t.segments && in.run->records_segments();
    for (const auto& d : in.stats.devices) {
      t.peak_allocated += d.peak_allocated;
      t.peak_reserved += d.peak_reserved;
      t.allocations += d.allocations;
      t.frees += d.frees;
      t.segment_reserves += d.segment_reserves;
      t.ooms += d.ooms;
      t.cache_absorbed += d.cache_absorbed();
    }
  }
  return t;
}

void print_json(std::vector<Input>& inputs) {
  nlohmann::json runs = nlohmann::json::array();
  for (auto& in : inputs) {
    const auto& h = in.run->header();
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& d : in.stats.devices) devices.push_back(device_json(in, d));
    const bool process = in.run->records_process();
    const core::TraceTruncation& cut = in.run->truncation();
    nlohmann::json truncation = nullptr;  // null: the file is whole
    if (cut.truncated)
      truncation = {{"file_bytes", cut.file_bytes},
                    {"expected_bytes", cut.expected_bytes},
                    {"missing_bytes", cut.missing_bytes()},
                    {"lost_slots", cut.lost_slots},
                    {"exact", cut.exact},
                    {"message", cut.describe()}};
    runs.push_back({{"file", in.run->path()},
                    {"format", in.run->format()},
                    {"pid", if_recorded(process, h.pid)},
                    {"host", if_recorded(process, h.host)},
                    {"command_line", h.command_line},
                    {"luma_version", if_recorded(process, h.luma_version)},
                    {"closed_cleanly", if_recorded(process, in.run->closed_cleanly())},
                    {"truncated", truncation},
                    {"events", in.stats.events},
                    {"unwritten_slots", if_recorded(process, in.stats.unwritten_slots)},
                    {"duration_ns", if_recorded(in.run->records_times(), in.stats.duration_ns)},
                    {"devices", devices},
                    {"forwarded_calls", forwarded_json(in)}});
    // Only a snapshot has the window's time range.
    if (const core::TorchSnapshot* snap = in.run->torch_snapshot())
      runs.back()["window"] = {{"first_time_us", if_recorded(snap->first_time_us.has_value(), snap->first_time_us.value_or(0))},
                               {"last_time_us", if_recorded(snap->last_time_us.has_value(), snap->last_time_us.value_or(0))}};
    // Only traces with Python frames have the key (format version 2; docs/trace-format.md).
    if (!in.stats.python_lines.empty()) {
      nlohmann::json lines = nlohmann::json::array();
      for (const auto& l : in.stats.python_lines)
        lines.push_back({{"file", l.file},
                         {"line", l.line},
                         {"function", l.function},
                         {"allocations", l.allocations},
                         {"bytes", l.bytes},
                         {"peak_live_bytes", l.peak_live_bytes}});
      runs.back()["top_python_lines"] = lines;
    }
  }
  const Totals t = totals_of(inputs);
  nlohmann::json doc = {
      {"runs", runs},
      {"totals",
       {{"runs", inputs.size()},
        {"events", t.events},
        {"peak_allocated_bytes_sum", t.peak_allocated},
        {"peak_reserved_bytes_sum", if_recorded(t.segments, t.peak_reserved)},
        {"allocations", t.allocations},
        {"frees", t.frees},
        {"segment_reserves", if_recorded(t.segments, t.segment_reserves)},
        {"ooms", t.ooms},
        {"cache_absorbed", if_recorded(t.segments, t.cache_absorbed)}}}};
  // Names and paths from the trace may not be UTF-8: invalid bytes become U+FFFD.
  std::printf("%s\n", doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void print_sites(Input& in, const char* title, const std::vector<CallSiteTotal>& sites) {
  if (sites.empty()) return;
  fmt::print("  {}:\n", title);
  for (const auto& s : sites) {
    fmt::print("    {} in {} allocations\n", bytes_text(s.bytes), s.count);
    const std::vector<SiteFrame>& frames = in.sites->frames(s.stack);
    if (frames.empty()) fmt::print("      (no frame of the program's: the allocator's and the recorder's only)\n");
    for (const SiteFrame& f : frames) {
      if (f.address == 0 && (f.line > 0 || f.python))
        fmt::print("      {}:{} {}\n", f.file, f.line, f.function);
      else if (f.address == 0 && (f.file.empty() || f.file == "??"))
        fmt::print("      {}\n", f.function);  // a C++ frame PyTorch could not place in a file
      else if (f.address == 0)
        fmt::print("      {} in {}\n", f.function, f.file);
      else if (!in.symbolizer)
        fmt::print("      0x{:x}\n", f.address);
      else if (f.line > 0)
        fmt::print("      0x{:x} {} at {}:{}\n", f.address, f.function, f.file, f.line);
      else
        fmt::print("      0x{:x} {} in {}\n", f.address, f.function, f.module.empty() ? "??" : f.module);
    }
  }
}

// "2026-07-12 10:47:02.287" (UTC) of a time_us.
std::string utc_text(std::int64_t us) {
  const std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  if (!::gmtime_r(&secs, &tm)) return fmt::format("{} us", us);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03}", buf, (us % 1000000) / 1000);
}

// A snapshot's first lines: the file, its devices, the window's time range.
void print_snapshot_header(const Input& in, const core::TorchSnapshot& snap) {
  std::string devices;
  for (const core::TorchDevice& d : snap.devices)
    devices += fmt::format("{}{}", devices.empty() ? "" : ", ", d.sequence.device);
  fmt::print("{} ({}): {} {}\n", in.run->path(), in.run->format(), snap.devices.size() == 1 ? "device" : "devices",
             devices.empty() ? "none" : devices);
  if (in.run->records_times() && snap.first_time_us && snap.last_time_us) {
    const std::string first = utc_text(*snap.first_time_us), last = utc_text(*snap.last_time_us);
    const std::int64_t us = *snap.last_time_us - *snap.first_time_us;
    fmt::print("  window {}, {} to {} UTC: {} events\n",
               us >= 10000 ? fmt::format("{:.3f} s", double(us) / 1e6) : fmt::format("{} us", us), first,
               last.substr(0, 10) == first.substr(0, 10) ? last.substr(11) : last, in.stats.events);
  } else {
    fmt::print("  window: {} events in the order recorded (no time_us in the snapshot: no clock)\n", in.stats.events);
  }
}

void print_stages(const DeviceRunStats& d) {
  if (d.stages.empty()) return;
  fmt::print("  peak in stage      {}\n", d.stages_at_peak.empty() ? std::string("(none: outside every stage)") : [&] {
    std::string t;
    for (const std::string& n : d.stages_at_peak) t += (t.empty() ? "" : " > ") + n;
    return t;
  }());
  std::size_t width = 5;
  for (const auto& st : d.stages) width = std::max(width, st.name.size());
  width = std::min<std::size_t>(width, 60);
  fmt::print("  {:<{}}  {:>14}  {:>14}  {:>6}\n", "stage", width + 2, "peak allocated", "peak reserved", "ranges");
  for (const auto& st : d.stages) {
    if (st.entered)
      fmt::print("    {:<{}}  {:>14}  {:>14}  {:>6}\n", st.name, width, bytes_text(st.peak_allocated),
                 bytes_text(st.peak_reserved), st.ranges);
    else
      fmt::print("    {:<{}}  {:>14}  {:>14}  {:>6}\n", st.name, width, "(no event)", "", st.ranges);
  }
}

// The innermost Python frame of each allocation, over the run's devices.
void print_python_lines(const std::vector<PythonLineTotal>& lines) {
  if (lines.empty()) return;
  fmt::print("top allocating Python lines (innermost Python frame of each allocation):\n");
  for (const auto& l : lines)
    fmt::print("  {}:{} {}: {} in {} allocations, peak live {}\n", l.file, l.line, l.function,
               bytes_text(l.bytes), l.allocations, bytes_text(l.peak_live_bytes));
}


void print_text(std::vector<Input>& inputs, const Shown& shown) {
  for (auto& in : inputs) {
    const auto& h = in.run->header();
    const bool process = in.run->records_process();
    const bool times = in.run->records_times();
    const bool segments = in.run->records_segments();
    std::string cmd;
    for (const auto& a : h.command_line) cmd += (cmd.empty() ? "" : " ") + a;
    if (const core::TorchSnapshot* snap = in.run->torch_snapshot())
      print_snapshot_header(in, *snap);
    else
      fmt::print("{} ({}): pid {} on {}: {}\n", in.run->path(), in.run->format(),
                 process ? std::to_string(h.pid) : kNotAvailable,
                 !process ? kNotAvailable : h.host.empty() ? "?" : h.host.c_str(), cmd);
    if (in.run->torch_snapshot()) {
      // said in the header
    } else if (times)
      fmt::print("  {} events over {:.3f} s{}\n", in.stats.events, in.stats.duration_ns / 1e9,
                 in.run->closed_cleanly() ? "" : " (unfinished: the process did not close it)");
    else
      fmt::print("  {} events (duration n/a: the {} numbers its events by row)\n",
                 in.stats.events, in.run->format());
    if (in.run->truncation().truncated)
      fmt::print("  warning: {}\n", in.run->truncation().describe());
    if (in.stats.unwritten_slots)
      fmt::print("  warning: {} slots were claimed but never written (a thread died "
                 "mid-write, or the writer dropped events)\n", in.stats.unwritten_slots);
    for (const auto& d : in.stats.devices) {
      fmt::print("device {}:\n", d.device);
      if (const std::optional<TorchWindow> w = in.run->torch_window(d.device))
        for (const std::string& line : window_lines(*w)) fmt::print("  {}\n", line);
      fmt::print("  peak allocated     {} at event {}", bytes_text(d.peak_allocated),
                 d.peak_index);
      if (times) fmt::print(" ({:.6f} s after start)", d.peak_time_ns / 1e9);
      fmt::print("\n");
      if (segments) {
        const PeakReservedState& at = d.at_peak_reserved;
        fmt::print("  peak reserved      {} at event {}\n", bytes_text(d.peak_reserved),
                   at.event_index);
        fmt::print("  unallocated        {} of it ({:.1f}%): reserved but not allocated, "
                   "{} allocated then\n",
                   bytes_text(at.unallocated()),
                   at.reserved ? 100.0 * double(at.unallocated()) / double(at.reserved) : 0.0,
                   bytes_text(at.allocated));
        if (!d.layout_known)
          fmt::print("  fragmentation      {} (the segments PyTorch reserved before the recording window "
                     "are not in it)\n", kNotAvailable);
        else if (at.free_blocks == 0)
          fmt::print("  fragmentation      {:.3f}: nothing free in the segments\n",
                     at.fragmentation());
        else
          fmt::print("  fragmentation      {:.3f}: the largest free block is {} of {} free in "
                     "{} blocks\n",
                     at.fragmentation(), bytes_text(at.largest_free_block),
                     bytes_text(at.free_bytes), at.free_blocks);
      } else {
        fmt::print("  peak reserved      {} (the {} records no segments)\n", kNotAvailable,
                   in.run->format());
        fmt::print("  fragmentation      {}\n", kNotAvailable);
      }
      print_stages(d);
      fmt::print("  allocations        {} ({} freed; {} still allocated at the end)\n",
                 d.allocations, d.frees, bytes_text(d.final_allocated));
      if (segments) {
        fmt::print("  segments           {} reserved, {} released\n", d.segment_reserves,
                   d.segment_releases);
        if (d.pages_mapped != 0 || d.pages_unmapped != 0) {
          fmt::print("  expandable pages   {} mapped in {} growths, {} unmapped\n", d.pages_mapped,
                     d.page_growths, d.pages_unmapped);
          fmt::print("  cache absorbed     {} calls (allocations - segment reserves - growths)\n",
                     d.cache_absorbed());
        } else {
          fmt::print("  cache absorbed     {} calls (allocations - segment reserves)\n",
                     d.cache_absorbed());
        }
      } else {
        fmt::print("  segments           {}\n", kNotAvailable);
        fmt::print("  cache absorbed     {}\n", kNotAvailable);
      }
      fmt::print("  out of memory      {}\n", d.ooms);
      if (d.unmatched_frees) fmt::print("  unmatched frees    {}\n", d.unmatched_frees);
      if (shown.full) {
        fmt::print("  size histogram (requested):\n");
        for (std::size_t k = 0; k < d.histogram.size(); ++k)
          if (d.histogram[k])
            fmt::print("    [{:>10}, {:>10}) {}\n", bytes_text(std::uint64_t{1} << k),
                       k == 63 ? std::string("inf") : bytes_text(std::uint64_t{2} << k),
                       d.histogram[k]);
        fmt::print("  largest allocations:\n");
        for (const auto& a : d.largest)
          fmt::print("    {} (requested {}) at 0x{:x}, event {}\n", bytes_text(a.size),
                     a.requested, a.address, a.index);
        print_sites(in, "call sites live at the peak", d.callsites_at_peak);
        print_sites(in, "call sites over the run", d.callsites_total);
      } else {
        print_sites(in, "top call sites live at the peak", d.callsites_at_peak);
        print_sites(in, "top call sites over the run", d.callsites_total);
      }
    }
    print_python_lines(in.stats.python_lines);
    print_forwarded(in);
  }
  if (inputs.size() > 1) {
    fmt::print("\n{:<40} {:>14} {:>14} {:>12} {:>8}\n", "run", "peak alloc", "peak reserved",
               "allocations", "ooms");
    for (const auto& in : inputs) {
      std::uint64_t pa = 0, pr = 0, n = 0, o = 0;
      for (const auto& d : in.stats.devices) {
        pa += d.peak_allocated;
        pr += d.peak_reserved;
        n += d.allocations;
        o += d.ooms;
      }
      fmt::print("{:<40} {:>14} {:>14} {:>12} {:>8}\n", in.run->path(), bytes_text(pa),
                 in.run->records_segments() ? bytes_text(pr) : kNotAvailable, n, o);
    }
    const Totals t = totals_of(inputs);
    fmt::print("{:<40} {:>14} {:>14} {:>12} {:>8}\n", "total (sum of peaks)",
               bytes_text(t.peak_allocated), t.segments ? bytes_text(t.peak_reserved) : kNotAvailable,
               t.allocations, t.ooms);
  }
}

// The picture of one run (--svg): per device, the bytes allocated after each alloc and free
// (as stats counts them: peak allocated is the line's peak) and, where the input records
// segments, the bytes reserved after each segment event (a snapshot's: PyTorch's own,
// from the bytes it held when the window began). x: the recorded clock, else the device's
// allocation number.
MemoryPicture stats_picture(RecordedRun& run) {
  struct Device {
    std::map<std::uint64_t, std::uint64_t> live;  // address -> size
    std::uint64_t allocated = 0, reserved = 0, allocations = 0;
    MemorySeries allocated_line{MemorySeries::Kind::live, "", {}, false};
    MemorySeries reserved_line{MemorySeries::Kind::recorded, "", {}, false};
  };
  const bool times = run.records_times(), segments = run.records_segments();
  std::map<int, Device> devices;
  std::uint64_t end_ns = 0;
  run.read(
      [&](const core::TraceEvent& e) {
        const auto [it, added] = devices.try_emplace(e.device);
        Device& d = it->second;
        if (e.kind == core::EventKind::alloc) ++d.allocations;
        const double x = times ? double(e.time_ns) / 1e9 : double(d.allocations);
        end_ns = std::max(end_ns, e.time_ns);
        if (added && segments) {
          d.reserved = run.reserved_before_window(e.device);
          d.reserved_line.points.push_back({x, d.reserved});
        }
        switch (e.kind) {
          case core::EventKind::alloc:
            d.live[e.address] = e.size;
            d.allocated += e.size;
            d.allocated_line.points.push_back({x, d.allocated});
            break;
          case core::EventKind::free_requested:
            if (auto f = d.live.find(e.address); f != d.live.end()) {
              d.allocated -= f->second;
              d.live.erase(f);
              d.allocated_line.points.push_back({x, d.allocated});
            }
            break;
          case core::EventKind::segment_reserve:
            d.reserved += e.size;
            d.reserved_line.points.push_back({x, d.reserved});
            break;
          case core::EventKind::segment_release:
            d.reserved -= std::min(d.reserved, e.size);
            d.reserved_line.points.push_back({x, d.reserved});
            break;
          default: break;
        }
      },
      false);
  MemoryPicture pic;
  pic.title = run.path() + " - luma stats";
  pic.clock = times;
  const core::TorchSnapshot* snap = run.torch_snapshot();
  for (auto& [n, d] : devices) {
    const std::string of = devices.size() > 1 ? fmt::format(", device {}", n) : std::string();
    d.allocated_line.label = "allocated (live bytes)" + of;
    pic.series.push_back(std::move(d.allocated_line));
    if (segments) {
      d.reserved_line.label = (snap ? "PyTorch's reserved (recorded)" : "reserved (recorded)") + of;
      pic.series.push_back(std::move(d.reserved_line));
    }
  }
  if (snap && times && !devices.empty()) pic.stages = snapshot_stages(*snap, devices.begin()->first, end_ns);
  return pic;
}

}  // namespace

void add_stats_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "stats", "Summarize traces (or RMM logs, PyTorch memory snapshots): peaks, fragmentation, sizes, call sites");
  struct Options {
    std::vector<std::string> inputs;
    bool json = false;
    bool full = false;
    std::vector<std::string> frames;
    std::string svg;
    bool compare = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("TRACE", o->inputs,
                  "luma traces, RMM logs or PyTorch memory snapshots (several: the ranks of a job)")
      ->required();
  cmd->add_flag("--json", o->json, "print JSON instead of text");
  cmd->add_flag("--full", o->full,
                "also the size histogram, the largest allocations and every call site (JSON: every call site)");
  cmd->add_option("--frames", o->frames,
                  "frames a call site shows (N, default 2), or 'native' to keep C++ frames after the Python ones "
                  "(may be given twice: --frames native --frames 8)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--svg", o->svg,
                  "also draw the run as SVG to this file: bytes allocated and recorded reserved over time, peaks "
                  "marked, a snapshot's stages shaded (one run)");
  cmd->add_flag("--compare", o->compare,
                "two runs A B: B's peaks against A's (B - A, bytes and %) and the call sites and stages live at "
                "the peaks that account for it, largest difference first (--full: every one; --json)");
  cmd->callback([o] {
    FramesOption frames;
    try {
      frames = parse_frames_option(o->frames);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "luma stats: %s\n", e.what());
      throw ExitCode{kExitUsage};
    }
    if (!o->svg.empty() && o->inputs.size() != 1) {
      std::fprintf(stderr, "luma stats: --svg draws one run: %zu inputs given\n", o->inputs.size());
      throw ExitCode{kExitUsage};
    }
    if (o->compare && o->inputs.size() != 2) {
      std::fprintf(stderr, "luma stats: --compare takes two runs, A and B: %zu given\n", o->inputs.size());
      throw ExitCode{kExitUsage};
    }
    if (o->compare && !o->svg.empty()) {
      std::fprintf(stderr, "luma stats: --svg draws one run: it cannot be combined with --compare\n");
      throw ExitCode{kExitUsage};
    }
    std::vector<Input> inputs;
    try {
      for (const auto& path : o->inputs) {
        Input in;
        in.run = std::make_unique<RecordedRun>(path);
        ForwardedStats forwarded;
        in.run->set_forwarded_handler(
            [&forwarded](const core::trace::ForwardedCall& c) { forwarded.add(c); });
        if (!in.run->header().mappings.empty())
          in.symbolizer = std::make_unique<Symbolizer>(in.run->header().mappings);
        in.sites = std::make_unique<CallSites>(*in.run, in.symbolizer.get(), frames);
        RunStatsOptions options;
        options.site_of = [sites = in.sites.get()](std::uint32_t stack) { return sites->site_of(stack); };
        options.all_sites = o->full;
        in.stats = compute_run_stats(*in.run, options);
        in.run->set_forwarded_handler({});
        in.forwarded = std::move(forwarded);
        inputs.push_back(std::move(in));
      }
      if (!o->svg.empty()) write_memory_svg(o->svg, stats_picture(*inputs.front().run));
      if (o->compare) {
        const auto side = [](Input& in) {
          return CompareSide{in.run.get(), in.sites.get(), &in.stats, in.symbolizer != nullptr};
        };
        print_comparison(side(inputs[0]), side(inputs[1]), o->json, o->full);
        return;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "luma stats: %s\n", e.what());
      throw ExitCode{kExitFailure};
    }
    if (o->json)
      print_json(inputs);
    else
      print_text(inputs, Shown{o->full});
  });
}

}  // namespace luma::tools
