// simulate_command.cpp - `luma simulate TRACE`: the recorded allocations replayed through
// luma's caching allocator (core/simulate) under one or more settings (`--conf`, LUMA_CONF
// syntax), side by side: the peak reserved against the run's peak live bytes (the
// planner's lower bound), the driver calls, where the excess lies at the peak, and with
// --min-limit the smallest memory_limit that serves the whole run. The free path is the one
// libluma.so would take for the recorded program (core/free_path), or --free-path; on the
// fenced path fences complete on the recorded clock plus --fence-latency. A PyTorch memory
// snapshot is replayed too (recorded_input.h), beside the peak PyTorch itself reserved.
// `--tune RUN...` searches the settings instead (simulate_tune.h). `--svg F` draws the run:
// live bytes, PyTorch's recorded reserved and luma's reserved under each --conf over time
// (memory_svg.h). User documentation: docs/simulate.md.
#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands/commands.h"
#include "exports/memory_svg.h"
#include "planner/input/lifetime_reader.h"
#include "inputs/recorded_input.h"
#include "settings/config.h"
#include "simulate/simulation.h"
#include "commands/simulate_text.h"
#include "commands/simulate_tune.h"

namespace luma::tools {

namespace {

struct SimulateOptions {
  std::vector<std::string> inputs;  // one, or with --tune several
  std::string input;                // the one (without --tune)
  std::vector<std::string> confs;
  std::string fence_latency = "0";
  std::string free_path;  // --free-path: empty, the rule decides
  std::optional<int> device;
  bool min_limit = false;
  std::string repeat = "1";  // --repeat: copies of the window in a row
  unsigned copies = 1;
  double limit_step = 0.005;  // x peak live
  bool json = false;
  std::string svg;  // --svg: the picture of the run
  // --tune and its options (simulate_tune.h).
  bool tune = false;
  std::string objective = "peak";
  std::string limit;
  unsigned jobs = 0;
  // Which options the command line gave (their counts), for the combinations refused.
  const CLI::Option* conf_option = nullptr;
  const CLI::Option* objective_option = nullptr;
  const CLI::Option* limit_option = nullptr;
  const CLI::Option* jobs_option = nullptr;
  const CLI::Option* repeat_option = nullptr;
  const CLI::Option* budget_option = nullptr;
  std::string driver_budget = "1ms";  // --tune: warm driver time per copy
};

struct Column {
  std::string label;  // the --conf text, or "default"
  core::SimOptions options;
};

struct DeviceRun {
  core::SimResult result;
  std::optional<core::LimitScan> limits;  // --min-limit
};

[[noreturn]] void fail(int code, const std::string& message) {
  std::fprintf(stderr, "luma simulate: %s\n", message.c_str());
  throw ExitCode{code};
}

// "0", or a number with a unit: ns, us, ms, s ("50us", "1.5ms").
std::optional<std::uint64_t> parse_duration(const std::string& text) {
  if (text == "0") return 0;
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit == "ns") scale = 1;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "s") scale = 1e9;
  if (scale == 0 || !std::isfinite(v) || v < 0 || v * scale > 1e18) return std::nullopt;
  return static_cast<std::uint64_t>(std::llround(v * scale));
}

std::vector<Column> columns_of(const SimulateOptions& o, std::uint64_t latency,
                               std::optional<core::FreePath> free_path) {
  std::vector<Column> columns;
  const std::vector<std::string> confs = o.confs.empty() ? std::vector<std::string>{""} : o.confs;
  for (const std::string& conf : confs) {
    core::ParseResult parsed = core::parse_settings(conf);
    for (const std::string& e : core::validate(parsed.settings.allocator)) parsed.errors.push_back(e);
    if (!parsed.errors.empty()) fail(kExitUsage, "--conf '" + conf + "': " + parsed.errors.front());
    Column c;
    c.label = conf.empty() ? "default" : conf;
    c.options.settings = parsed.settings;
    c.options.fence_latency_ns = latency;
    c.options.free_path = free_path;
    c.options.repeat = o.copies;
    columns.push_back(std::move(c));
  }
  return columns;
}

// One table row: a label, then one cell per column.
void row(const std::string& label, const std::vector<std::string>& cells, std::size_t width) {
  std::string line = fmt::format("  {:<38}", label);
  for (const std::string& c : cells) line += fmt::format(" {:>{}}", c, width);
  fmt::print("{}\n", line);
}

template <typename F>
std::vector<std::string> cells(const std::vector<DeviceRun>& runs, F&& f) {
  std::vector<std::string> out;
  for (const DeviceRun& r : runs) out.push_back(f(r));
  return out;
}

// Ranges of adjacent limits tried with the same answer, as "1.000-1.040" x peak live.
std::string limit_ranges(const core::LimitScan& m, bool completes, std::uint64_t live) {
  std::string out;
  for (std::size_t i = 0; i < m.points.size();) {
    if (m.points[i].completes != completes) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j + 1 < m.points.size() && m.points[j + 1].completes == completes) ++j;
    if (!out.empty()) out += ", ";
    out += fmt::format("{:.3f}", ratio(m.points[i].limit, live));
    if (j != i) out += fmt::format("-{:.3f}", ratio(m.points[j].limit, live));
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

// Which limits complete: one character per limit tried (# completes, . runs out), 50 to a
// line, then the ranges of each answer.
void print_limit_map(const std::string& label, const core::LimitScan& m, std::uint64_t live) {
  fmt::print("\n  memory_limit map ({}): limits from peak live, {:.3f} x peak live apart; # completes, . runs out\n",
             label, ratio(m.step, live));
  for (std::size_t i = 0; i < m.points.size(); i += 50) {
    std::string line;
    for (std::size_t k = i; k < std::min(i + 50, m.points.size()); ++k) line += m.points[k].completes ? '#' : '.';
    fmt::print("    {:.3f} x  {}\n", ratio(m.points[i].limit, live), line);
  }
  fmt::print("    runs out at (x peak live): {}\n", limit_ranges(m, false, live));
  fmt::print("    completes at (x peak live): {}\n", limit_ranges(m, true, live));
  if (m.top_is_unlimited)
    fmt::print("    from {:.3f} x up every limit gives the run without a limit (it never comes near it)\n",
               ratio(m.top, live));
  else
    fmt::print("    pressure_divisor 1: no limit is known above which the run is the unlimited one; nothing is "
               "claimed above {:.3f} x\n", ratio(m.top, live));
}

// With --repeat: the warm copies' driver calls under the limits from X to X + 0.05 x peak
// live, where the allocator may trade calls for memory (tight placement near a limit).
void print_warm_near_bound(const std::string& label, const core::LimitScan& m, std::uint64_t live) {
  if (m.bound == 0) return;
  fmt::print("\n  warm copies under the limits from X up ({}): limit x peak live: driver allocations, frees per 100\n",
             label);
  for (const core::LimitScan::Point& p : m.points) {
    if (p.limit < m.bound || ratio(p.limit - m.bound, live) > 0.05 + 1e-9) continue;
    fmt::print("    {:.3f} x: {:.2f}, {:.2f}\n", ratio(p.limit, live), per_100(p.warm.driver_allocations, p.warm.allocations),
               per_100(p.warm.driver_frees, p.warm.allocations));
  }
}

void print_text(const SimulateOptions& o, const std::string& format, const core::SimSequence& seq,
                const std::optional<TorchWindow>& torch, const std::vector<Column>& columns,
                const std::vector<DeviceRun>& runs, std::uint64_t latency) {
  const std::uint64_t span = seq.ops.empty() ? 0 : seq.ops.back().time_ns - seq.ops.front().time_ns;
  fmt::print("{}: {}, device {}: {} allocations, {} frees{}\n", o.input, format, seq.device,
             grouped(seq.allocations), grouped(seq.frees),
             seq.has_times ? fmt::format(" over {:.3f} s", double(span) / 1e9) : " (no clock)");
  if (torch)
    for (const std::string& line : window_lines(*torch)) fmt::print("{}\n", line);
  fmt::print("peak live {} B: the planner's lower bound, no allocator can hold less\n", grouped(seq.peak_live));
  if (torch)
    fmt::print("PyTorch's recorded peak reserved {} B ({:.3f} x peak live): what its caching allocator held for "
               "these allocations\n",
               grouped(torch->recorded_peak_reserved), ratio(torch->recorded_peak_reserved, seq.peak_live));
  // The free path of each column (the rule's, from the recording, unless --free-path).
  bool any_fenced = false;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::vector<core::PathSpan>& spans = runs[i].result.paths;
    for (const core::PathSpan& p : spans) any_fenced |= p.path == core::FreePath::fenced;
    fmt::print("free path{}: {}\n", runs.size() > 1 ? " (" + columns[i].label + ")" : std::string(),
               paths_text(spans));
  }
  if (!any_fenced)
    fmt::print("fence latency: no fence is waited for on these paths (a freed block is reusable at once, or "
               "after a legacy-stream barrier)\n");
  else if (latency == 0)
    fmt::print("fence latency 0: a freed block is reusable as soon as it is fenced (the policy alone)\n");
  else
    fmt::print("fence latency {}: on the fenced path a fence is done {} ns of recorded time after it is "
               "recorded\n", o.fence_latency, grouped(latency));
  std::size_t width = 16;
  for (const Column& c : columns) width = std::max(width, c.label.size());
  std::string header = fmt::format("  {:<38}", "");
  for (const Column& c : columns) header += fmt::format(" {:>{}}", c.label, width);
  fmt::print("\n{}\n", header);
  const std::uint64_t live = seq.peak_live;
  row("peak reserved (B)", cells(runs, [](const DeviceRun& r) { return grouped(r.result.peak_reserved); }), width);
  row("  x peak live", cells(runs, [&](const DeviceRun& r) {
        return fmt::format("{:.3f}", ratio(r.result.peak_reserved, live));
      }), width);
  if (torch)
    row("  x PyTorch's recorded peak", cells(runs, [&](const DeviceRun& r) {
          return fmt::format("{:.3f}", ratio(r.result.peak_reserved, torch->recorded_peak_reserved));
        }), width);
  row("driver allocations (segments reserved)", cells(runs, [](const DeviceRun& r) { return grouped(r.result.reserves); }), width);
  row("  per 100 allocations", cells(runs, [&](const DeviceRun& r) {
        return fmt::format("{:.2f}", per_100(r.result.reserves, seq.allocations));
      }), width);
  row("driver frees (segments released)", cells(runs, [](const DeviceRun& r) { return grouped(r.result.releases); }), width);
  row("driver time, estimated (ms)", cells(runs, [](const DeviceRun& r) {
        return fmt::format("{:.3f}", double(r.result.driver_ns) / 1e6);
      }), width);
  if (o.copies > 1) {
    const auto copy_rows = [&](const std::string& title, const core::CopyFigures core::SimResult::*which) {
      fmt::print("  {}:\n", title);
      const auto per_copy = [&](const DeviceRun& r, std::uint64_t v) {
        const core::CopyFigures& f = r.result.*which;
        return f.copies == 0 ? std::string("-") : fmt::format("{:.2f}", per_100(v, f.allocations));
      };
      using F = core::CopyFigures;
      for (const auto& [label, field] : {std::pair{"  driver allocations per 100", &F::driver_allocations},
                                         std::pair{"  driver frees per 100", &F::driver_frees},
                                         std::pair{"  maps per 100", &F::maps},
                                         std::pair{"  unmaps per 100", &F::unmaps}})
        row(label, cells(runs, [&](const DeviceRun& r) { return per_copy(r, (r.result.*which).*field); }), width);
      row("  peak reserved, x peak live", cells(runs, [&](const DeviceRun& r) {
            const core::CopyFigures& f = r.result.*which;
            return f.copies == 0 ? std::string("-") : fmt::format("{:.3f}", ratio(f.peak_reserved, live));
          }), width);
      row("  driver time per copy, estimated (ms)", cells(runs, [&](const DeviceRun& r) {
            const core::CopyFigures& f = r.result.*which;
            return f.copies == 0 ? std::string("-")
                                 : fmt::format("{:.3f}", double(f.driver_ns) / 1e6 / double(f.copies));
          }), width);
    };
    copy_rows("first copy of the window", &core::SimResult::first);
    copy_rows(fmt::format("warm copies (2-{}, per 100 of their allocations)", o.copies), &core::SimResult::warm);
  }
  if (latency != 0)
    row("fence waits (stalled, ms)", cells(runs, [](const DeviceRun& r) {
          return fmt::format("{} ({:.3f})", grouped(r.result.fence_waits), double(r.result.fence_wait_ns) / 1e6);
        }), width);
  bool any_failed = false;
  for (const DeviceRun& r : runs) any_failed |= !r.result.completed;
  if (any_failed)
    row("runs out at allocation", cells(runs, [](const DeviceRun& r) {
          return r.result.completed ? std::string("-")
                                    : fmt::format("#{} ({})", grouped(r.result.allocations), mib(r.result.failed_bytes));
        }), width);
  fmt::print("  at the peak of reserved:\n");
  using A = core::PeakAttribution;
  auto part = [&](const std::string& label, std::uint64_t A::*field) {
    row(label, cells(runs, [&](const DeviceRun& r) { return r.result.attributed ? mib(r.result.at_peak.*field) : "-"; }), width);
  };
  row("  after allocation (number: bytes)", cells(runs, [](const DeviceRun& r) {
        return r.result.attributed ? fmt::format("#{}: {}", grouped(r.result.at_peak.allocation), mib(r.result.at_peak.request))
                                   : std::string("-");
      }), width);
  if (torch && !torch->stages.empty())
    row("  in stage", cells(runs, [&](const DeviceRun& r) {
          if (!r.result.attributed || r.result.at_peak.op >= seq.ops.size()) return std::string("-");
          const std::vector<std::string> names = stages_at(*torch, seq.ops[r.result.at_peak.op].time_ns);
          std::string t;
          for (const std::string& n : names) t += (t.empty() ? "" : " > ") + n;
          return names.empty() ? std::string("(none)") : t;
        }), width);
  part("  live (requested)", &A::live_requested);
  part("  rounding (rounded - requested)", &A::rounding);
  part("  rests not split off", &A::unsplit);
  part("  waiting for a fence", &A::pending);
  part("  free: rest of the new segment", &A::new_segment_rest);
  part("  free: pieces smaller than the request", &A::free_pieces_too_small);
  part("  free: segments smaller than it", &A::free_segments_too_small);
  part("  free: in the other pool", &A::free_other_pool);
  part("  free: large enough, kept whole", &A::free_fitting);
  row("  (live below the run's peak live)", cells(runs, [](const DeviceRun& r) {
        return r.result.attributed ? "-" + mib(r.result.at_peak.live_below_peak) : std::string("-");
      }), width);
  if (any_failed) {
    fmt::print("  where it ran out (the refused allocation):\n");
    auto fpart = [&](const std::string& label, std::uint64_t A::*field) {
      row(label, cells(runs, [&](const DeviceRun& r) { return r.result.completed ? "-" : mib(r.result.at_failure.*field); }), width);
    };
    fpart("  reserved", &A::reserved);
    fpart("  live (requested)", &A::live_requested);
    fpart("  rounding and rests not split off", &A::unsplit);
    fpart("  waiting for a fence", &A::pending);
    fpart("  free: pieces smaller than the request", &A::free_pieces_too_small);
    fpart("  free: segments smaller than it", &A::free_segments_too_small);
    fpart("  free: in the other pool", &A::free_other_pool);
    fpart("  free: large enough, kept whole", &A::free_fitting);
  }
  if (o.min_limit) {
    const auto x = [&](std::uint64_t b) { return fmt::format("{:.3f} x", ratio(b, live)); };
    row("memory_limit from which all complete", cells(runs, [&](const DeviceRun& r) {
          return r.limits->bound == 0 ? std::string("none") : x(r.limits->bound);
        }), width);
    row("  (B)", cells(runs, [](const DeviceRun& r) { return grouped(r.limits->bound); }), width);
    row("least memory_limit that completes", cells(runs, [&](const DeviceRun& r) {
          return r.limits->least == 0 ? std::string("none") : x(r.limits->least);
        }), width);
    row("limits tried", cells(runs, [&](const DeviceRun& r) {
          return fmt::format("{}, to {}", r.limits->points.size(), x(r.limits->top));
        }), width);
    for (std::size_t i = 0; i < runs.size(); ++i) print_limit_map(columns[i].label, *runs[i].limits, live);
    if (o.copies > 1)
      for (std::size_t i = 0; i < runs.size(); ++i) print_warm_near_bound(columns[i].label, *runs[i].limits, live);
  }
}

nlohmann::json attribution_json(const core::PeakAttribution& a) {
  return {{"op", a.op},
          {"allocation", a.allocation},
          {"request_bytes", a.request},
          {"rounded_bytes", a.rounded},
          {"reserved_bytes", a.reserved},
          {"live_requested_bytes", a.live_requested},
          {"rounding_bytes", a.rounding},
          {"unsplit_bytes", a.unsplit},
          {"pending_bytes", a.pending},
          {"free_new_segment_rest_bytes", a.new_segment_rest},
          {"free_pieces_too_small_bytes", a.free_pieces_too_small},
          {"free_segments_too_small_bytes", a.free_segments_too_small},
          {"free_other_pool_bytes", a.free_other_pool},
          {"free_fitting_bytes", a.free_fitting},
          {"live_below_peak_bytes", a.live_below_peak}};
}

// One or more copies of the window (--repeat): counts, and per 100 of their allocations.
nlohmann::json copy_json(const core::CopyFigures& f, std::uint64_t peak_live) {
  return {{"copies", f.copies},
          {"allocations", f.allocations},
          {"driver_allocations", f.driver_allocations},
          {"driver_frees", f.driver_frees},
          {"maps", f.maps},
          {"unmaps", f.unmaps},
          {"driver_allocations_per_100", per_100(f.driver_allocations, f.allocations)},
          {"driver_frees_per_100", per_100(f.driver_frees, f.allocations)},
          {"maps_per_100", per_100(f.maps, f.allocations)},
          {"unmaps_per_100", per_100(f.unmaps, f.allocations)},
          {"peak_reserved_bytes", f.peak_reserved},
          {"peak_reserved_over_peak_live", ratio(f.peak_reserved, peak_live)},
          {"driver_time_estimated_ns", f.driver_ns}};
}

nlohmann::json paths_json(const std::vector<core::PathSpan>& spans) {
  nlohmann::json out = nlohmann::json::array();
  for (const core::PathSpan& p : spans)
    out.push_back({{"from_op", p.from_op}, {"path", core::free_path_name(p.path)}, {"why", p.why}});
  return out;
}

nlohmann::json device_json(const core::SimSequence& seq, const std::optional<TorchWindow>& torch,
                           const std::vector<Column>& columns, const std::vector<DeviceRun>& runs) {
  // What a PyTorch snapshot recorded beside the replayed allocations; null for other formats.
  const auto recorded = [&](auto value) { return torch ? nlohmann::json(value) : nlohmann::json(nullptr); };
  nlohmann::json out = {{"device", seq.device},
                        {"allocations", seq.allocations},
                        {"recorded_peak_reserved_bytes", recorded(torch ? torch->recorded_peak_reserved : 0)},
                        {"incomplete", recorded(torch && torch->incomplete)},
                        {"window_notes", recorded(torch ? torch->notes : std::vector<std::string>{})},
                        {"blocks_before_window", recorded(torch ? torch->blocks_before_window : 0)},
                        {"frees", seq.frees},
                        {"has_clock", seq.has_times},
                        {"peak_live_bytes", seq.peak_live},
                        {"runs", nlohmann::json::array()}};
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const core::SimResult& r = runs[i].result;
    nlohmann::json j = {{"conf", columns[i].label},
                        {"completed", r.completed},
                        {"allocations_served", r.allocations},
                        {"peak_reserved_bytes", r.peak_reserved},
                        {"peak_reserved_over_peak_live", ratio(r.peak_reserved, seq.peak_live)},
                        {"driver_allocations", r.reserves},
                        {"driver_frees", r.releases},
                        {"fences", r.fences},
                        {"fence_waits", r.fence_waits},
                        {"fence_wait_ns", r.fence_wait_ns},
                        {"free_paths", paths_json(r.paths)},
                        {"driver_time_estimated_ns", r.driver_ns},
                        {"first_copy", copy_json(r.first, seq.peak_live)},
                        {"warm_copies", r.warm.copies == 0 ? nlohmann::json(nullptr) : copy_json(r.warm, seq.peak_live)},
                        {"at_peak", r.attributed ? attribution_json(r.at_peak) : nlohmann::json(nullptr)}};
    // A snapshot's recorded stages under way at the peak (null without stages).
    if (r.attributed && torch && !torch->stages.empty() && r.at_peak.op < seq.ops.size())
      j["at_peak"]["stages"] = stages_at(*torch, seq.ops[r.at_peak.op].time_ns);
    if (!r.completed) j["failed"] = {{"op", r.failed_op}, {"bytes", r.failed_bytes}};
    if (const auto& m = runs[i].limits) {
      nlohmann::json points = nlohmann::json::array();
      for (const core::LimitScan::Point& p : m->points)
        points.push_back({{"limit_bytes", p.limit}, {"over_peak_live", ratio(p.limit, seq.peak_live)},
                          {"completes", p.completes},
                          {"warm_copies", p.warm.copies == 0 ? nlohmann::json(nullptr) : copy_json(p.warm, seq.peak_live)}});
      j["limit_scan"] = {{"bound_bytes", m->bound},
                         {"bound_over_peak_live", ratio(m->bound, seq.peak_live)},
                         {"least_completing_bytes", m->least},
                         {"least_completing_over_peak_live", ratio(m->least, seq.peak_live)},
                         {"step_bytes", m->step},
                         {"top_bytes", m->top},
                         {"top_is_unlimited", m->top_is_unlimited},
                         {"unlimited_peak_bytes", m->unlimited_peak},
                         {"simulations", m->runs},
                         {"points", std::move(points)}};
    }
    out["runs"].push_back(std::move(j));
  }
  return out;
}

// The x of each op on the picture: seconds on the recorded clock, else the allocation number
// (the allocations before it, and it).
std::vector<double> op_x(const core::SimSequence& seq) {
  std::vector<double> x(seq.ops.size());
  std::uint64_t allocations = 0;
  for (std::size_t i = 0; i < seq.ops.size(); ++i) {
    if (!seq.ops[i].is_free) ++allocations;
    x[i] = seq.has_times ? double(seq.ops[i].time_ns) / 1e9 : double(allocations);
  }
  return x;
}

// The picture's first series: the bytes live (requested) after each op, and for a PyTorch
// snapshot the bytes it recorded reserved after each segment entry (its peak as a line
// where the window has no segment entry).
MemoryPicture picture_of(const std::string& input, const RecordedInput& in, const core::SimSequence& seq,
                         const std::vector<double>& x) {
  MemoryPicture pic;
  pic.title = fmt::format("{}: device {} - luma simulate", input, seq.device);
  pic.clock = seq.has_times;
  MemorySeries live{MemorySeries::Kind::live, "live (requested bytes)", {}, false};
  std::vector<std::uint64_t> bytes(seq.allocations, 0);
  std::uint64_t now = 0;
  for (std::size_t i = 0; i < seq.ops.size(); ++i) {
    const core::SimOp& op = seq.ops[i];
    if (op.id < bytes.size()) {
      if (op.is_free) {
        now -= std::min(now, bytes[op.id]);
        bytes[op.id] = 0;
      } else {
        bytes[op.id] = op.bytes;
        now += op.bytes;
      }
    }
    live.points.push_back({x[i], now});
  }
  pic.series.push_back(std::move(live));
  const core::TorchDevice* device = nullptr;
  if (in.snapshot)
    for (const core::TorchDevice& d : in.snapshot->devices)
      if (d.sequence.device == seq.device) device = &d;
  if (device != nullptr && !seq.ops.empty()) {
    MemorySeries rec{MemorySeries::Kind::recorded, "PyTorch's reserved (recorded)", {}, false};
    if (device->reserved.empty()) {
      rec.label = "PyTorch's recorded peak reserved (no segment entry in the window: a line)";
      rec.constant = true;
      rec.points.push_back({x.front(), device->recorded_peak_reserved_bytes});
    } else {
      // An entry between ops op-1 and op: on the clock at its own time, else at op-1's number.
      rec.points.push_back({x.front(), device->recorded_reserved_start_bytes});
      for (const core::TorchReservedStep& st : device->reserved) {
        const double at = seq.has_times ? double(st.time_ns) / 1e9 : st.op == 0 ? x.front() : x[std::min(st.op, x.size()) - 1];
        rec.points.push_back({std::max(at, rec.points.back().x), st.bytes});
      }
    }
    pic.series.push_back(std::move(rec));
    if (seq.has_times)
      pic.stages = snapshot_stages(*in.snapshot, seq.device, seq.ops.back().time_ns);
  }
  return pic;
}

// --repeat's copies: a whole number from 1 to 1000.
unsigned parse_repeat(const std::string& text) {
  std::size_t used = 0;
  unsigned long v = 0;
  try {
    v = std::stoul(text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || text.front() == '-' || text.front() == '+' || v < 1 || v > 1000)
    fail(kExitUsage, "--repeat '" + text + "': expected the number of copies of the recorded window, 1 to 1000");
  return static_cast<unsigned>(v);
}

// --limit's bytes ("8G", "1500M", "123456").
std::uint64_t parse_limit(const std::string& text) {
  std::string why;
  const std::optional<std::uint64_t> v = core::parse_size(text, &why);
  if (!v) fail(kExitUsage, "--limit '" + text + "': " + why);
  if (*v == 0) fail(kExitUsage, "--limit '" + text + "': a limit of 0 serves nothing");
  return *v;
}

void run_simulate(const SimulateOptions& given) {
  SimulateOptions o = given;
  // The combinations refused: --tune chooses the settings and finds X itself.
  if (o.tune) {
    if (o.conf_option->count() != 0)
      fail(kExitUsage, "--conf cannot be combined with --tune: --tune searches the settings itself");
    if (!o.svg.empty()) fail(kExitUsage, "--svg cannot be combined with --tune: it draws one replayed run");
    if (o.min_limit)
      fail(kExitUsage, "--min-limit cannot be combined with --tune: --tune finds X for the recommendation and "
                       "the defaults itself (--limit-step sets its step)");
  } else {
    for (const CLI::Option* opt : {o.objective_option, o.limit_option, o.jobs_option, o.budget_option})
      if (opt->count() != 0) fail(kExitUsage, opt->get_name() + " needs --tune");
    if (o.inputs.size() > 1)
      fail(kExitUsage, fmt::format("{} inputs: luma simulate replays one run (several runs: --tune)", o.inputs.size()));
  }
  const std::optional<std::uint64_t> latency = parse_duration(o.fence_latency);
  if (!latency)
    fail(kExitUsage, "--fence-latency '" + o.fence_latency +
                         "': expected 0 or a number with a unit ns, us, ms or s (e.g. 50us)");
  o.copies = parse_repeat(o.repeat);
  if (!o.svg.empty() && o.copies > 1)
    fail(kExitUsage, "--svg draws one copy of the recorded window: leave --repeat at 1");
  std::optional<core::FreePath> free_path;
  if (!o.free_path.empty()) {
    free_path = core::parse_free_path(o.free_path);
    if (!free_path) fail(kExitUsage, "--free-path '" + o.free_path + "': expected at-once, legacy or fenced");
  }
  std::optional<std::uint64_t> limit;
  if (o.tune && !o.limit.empty()) limit = parse_limit(o.limit);
  const std::vector<Column> columns = o.tune ? std::vector<Column>{} : columns_of(o, *latency, free_path);
  std::vector<RecordedInput> inputs;
  for (const std::string& path : o.inputs) {
    try {
      inputs.push_back(read_recorded_input(path));
    } catch (const std::exception& e) {
      fail(kExitFailure, e.what());
    }
  }
  // The sequences to replay: each input's devices (--device: that one).
  struct Picked {
    std::size_t input;
    std::size_t device;  // in the input's sim.devices
  };
  std::vector<Picked> picked;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::size_t found = 0;
    for (std::size_t k = 0; k < inputs[i].sim.devices.size(); ++k)
      if (!o.device || *o.device == inputs[i].sim.devices[k].device) {
        picked.push_back({i, k});
        ++found;
      }
    if (found == 0)
      fail(kExitFailure, o.device ? fmt::format("{}: no allocations on device {}", o.inputs[i], *o.device)
                                  : o.inputs[i] + ": no allocations");
  }
  for (const Picked& p : picked) {
    const core::SimSequence& seq = inputs[p.input].sim.devices[p.device];
    if (o.copies > 1 && seq.unmatched_frees != 0)
      fail(kExitUsage, fmt::format("--repeat {}: {}, device {}: {} frees of blocks the recording never showed "
                                   "allocated (made before it began), so a copy of it would free what it never "
                                   "made: record from the program's start to repeat it",
                                   o.copies, o.inputs[p.input], seq.device, grouped(seq.unmatched_frees)));
  }
  if (!o.tune && !o.svg.empty() && picked.size() > 1)
    fail(kExitUsage, fmt::format("--svg draws one device and {} devices allocate in {}: pick one with --device",
                                 picked.size(), o.inputs.front()));
  for (const Picked& p : picked)
    if (*latency != 0 && !inputs[p.input].sim.devices[p.device].has_times)
      fail(kExitUsage, fmt::format("{}: a {} records no clock, so --fence-latency has nothing to add to: "
                                   "leave it at 0", o.inputs[p.input], inputs[p.input].sim.format));
  const auto torch_of = [&](const Picked& p) {
    const RecordedInput& in = inputs[p.input];
    return in.torch.empty() ? std::optional<TorchWindow>() : in.torch[p.device];
  };
  if (o.tune) {
    std::vector<TuneRun> runs;
    for (const Picked& p : picked)
      runs.push_back({o.inputs[p.input], inputs[p.input].sim.format, &inputs[p.input].sim.devices[p.device],
                      torch_of(p)});
    TuneOptions t;
    t.objective = o.objective == "calls"         ? TuneObjective::calls
                  : o.objective == "driver-time" ? TuneObjective::driver_time
                                                 : TuneObjective::peak;
    t.limit = limit;
    t.limit_step = o.limit_step;
    t.fence_latency_ns = *latency;
    t.free_path = free_path;
    t.json = o.json;
    t.jobs = o.jobs;
    if (o.repeat_option->count() != 0) t.repeat = o.copies;  // (else --tune's own default)
    const std::optional<std::uint64_t> budget = parse_duration(o.driver_budget);
    if (!budget)
      fail(kExitUsage, "--driver-budget '" + o.driver_budget + "': expected 0 or a number with a unit ns, us, ms or s");
    t.driver_budget_ns = *budget;
    run_tune(runs, t);
    return;
  }
  o.input = o.inputs.front();
  const RecordedInput& input = inputs.front();
  nlohmann::json json = {{"input", o.input},
                         {"format", input.sim.format},
                         {"fence_latency_ns", *latency},
                         {"repeat", o.copies},
                         {"devices", nlohmann::json::array()}};
  bool first = true;
  for (const Picked& p : picked) {
    const core::SimSequence* seq = &input.sim.devices[p.device];
    std::vector<DeviceRun> runs;
    const std::vector<double> x = o.svg.empty() ? std::vector<double>{} : op_x(*seq);
    MemoryPicture picture;
    if (!o.svg.empty()) picture = picture_of(o.input, input, *seq, x);
    for (const Column& c : columns) {
      DeviceRun run;
      core::SimOptions options = c.options;
      MemorySeries reserved{MemorySeries::Kind::simulated, "luma's reserved (" + c.label + ")", {}, false};
      if (!o.svg.empty())
        options.on_op = [&](std::size_t op, std::uint64_t held) { reserved.points.push_back({x[op], held}); };
      try {
        run.result = core::simulate(*seq, options);
        if (o.min_limit) run.limits = core::scan_limits(*seq, c.options, o.limit_step);
      } catch (const std::invalid_argument& e) {
        fail(kExitUsage, "--conf '" + c.label + "': " + e.what());
      }
      if (!run.result.check_errors.empty())  // a bug in the allocator: say so loudly
        fail(kExitFailure,
             "the allocator's invariant check failed (" + c.label + "): " + run.result.check_errors.front());
      runs.push_back(std::move(run));
      if (!o.svg.empty()) picture.series.push_back(std::move(reserved));
    }
    if (!o.svg.empty()) {
      try {
        write_memory_svg(o.svg, picture);
      } catch (const std::exception& e) {
        fail(kExitFailure, e.what());
      }
    }
    if (o.json) {
      json["devices"].push_back(device_json(*seq, torch_of(p), columns, runs));
    } else {
      if (!first) fmt::print("\n");
      print_text(o, input.sim.format, *seq, torch_of(p), columns, runs, *latency);
    }
    first = false;
  }
  if (o.json) fmt::print("{}\n", json.dump(2));
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Replay a recorded run through luma's allocator under chosen settings: peak reserved, "
                  "driver calls, where the excess lies; or search the settings for one or several runs (--tune)");
  cmd->add_option("TRACE", o->inputs,
                  "luma trace, RMM log (Thread,Time,Action,Pointer,Size,Stream), planner CSV "
                  "(id,lower,upper,size[,alignment]) or PyTorch memory snapshot (a pickle); with --tune, one or "
                  "several")
      ->required();
  o->conf_option = cmd->add_option("--conf", o->confs,
                                   "allocator settings in LUMA_CONF syntax (key:value,...); repeat to compare several "
                                   "side by side (default: luma's defaults)");
  cmd->add_option("--fence-latency", o->fence_latency,
                  "on the fenced path, how long after its fence is recorded a freed block becomes reusable, "
                  "on the recorded clock: 0 (default: at once, the policy alone) or a number with ns, us, ms "
                  "or s");
  cmd->add_option("--free-path", o->free_path,
                  "the free path for the whole run: at-once, legacy (after a legacy-stream barrier) or fenced "
                  "(default: the one libluma.so would take, decided from the recording's threads, streams and "
                  "contexts)");
  cmd->add_flag("--min-limit", o->min_limit,
                "also replay under memory limits from peak live up, a step apart: the limit from which every "
                "larger one serves every allocation, the least that does, and a map of which complete");
  cmd->add_option("--limit-step", o->limit_step,
                  "the step of the memory limits scanned (--min-limit, and --tune's X), x peak live (default 0.005)")
      ->check(CLI::Range(0.0001, 1.0));
  o->repeat_option = cmd->add_option("--repeat", o->repeat,
                  "replay the recorded window this many times in a row, as a step repeats (blocks live before it "
                  "stay live; each copy's blocks still live at its end are freed before the next): the first copy "
                  "and the warm ones are reported apart (default 1; with --tune 3)");
  o->budget_option = cmd->add_option("--driver-budget", o->driver_budget,
                                     "--tune --objective peak: the most driver time per warm copy (estimated) a "
                                     "recommended setting may spend, as 0 or a number with ns, us, ms or s "
                                     "(default 1ms)");
  cmd->add_option("--device", o->device, "simulate only this device");
  cmd->add_flag("--tune", o->tune,
                "search luma's placement settings on the runs given and recommend a LUMA_CONF: the best by "
                "--objective on the worst run, the Pareto front of peak reserved against driver allocations, and "
                "X for the recommendation and the defaults");
  o->objective_option = cmd->add_option("--objective", o->objective,
                                        "--tune: peak (default: the least peak reserved within --driver-budget of "
                                        "warm driver time per copy), calls (the fewest driver allocations per 100 "
                                        "allocations) or driver-time (the least warm driver time per copy); ties "
                                        "broken by peak")
                            ->check(CLI::IsMember({"peak", "calls", "driver-time"}));
  o->limit_option = cmd->add_option("--limit", o->limit,
                                    "--tune: the best setting that completes every run under this memory_limit "
                                    "(bytes, with K, M or G)");
  o->jobs_option = cmd->add_option("--jobs", o->jobs,
                                   "--tune: threads replaying (default: one per CPU; the answer is the same on any "
                                   "number)")
                       ->check(CLI::Range(1u, 1024u));
  cmd->add_flag("--json", o->json, "print JSON instead of text");
  cmd->add_option("--svg", o->svg,
                  "also draw the run as SVG to this file: bytes live, PyTorch's recorded reserved (a snapshot) and "
                  "luma's reserved under each --conf over time, peaks marked, a snapshot's stages shaded");
  cmd->callback([o] { run_simulate(*o); });
}

}  // namespace luma::tools
