// plan_command.cpp - `luma plan INPUT`: read a luma trace, a planner CSV, an RMM log or a
// PyTorch memory snapshot (format detected by content), plan each device, print the
// strategies' table, write the requested files. Every plan written has passed the
// planner's checker. With --periodic, each device's repeating period is found and the
// warm-up plus one period is planned (core/planner/periodic.h); a device without one is an
// error (exit 1). Plans made from a luma trace are fence-aware by default
// (core/planner/fence_slack.h): a freed buffer's bytes are kept out of reuse for
// --fence-slack allocations, so replay does not wait for the free's fence; --fence-aware
// off plans the bare lifetimes.
#include <fmt/core.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "commands/commands.h"
#include "exports/device_plan.h"
#include "io/output_file.h"
#include "exports/plan_files.h"
#include "inputs/recorded_input.h"
#include "planner/input/trace_lifetime_reader.h"
#include "planner/fence_slack.h"
#include "planner/input/lifetime_reader.h"
#include "planner/lower_bound.h"
#include "planner/periodic.h"
#include "planner/planner.h"
#include "planner/planner_constants.h"
#include "stats/stats_format.h"
#include "trace/trace_header.h"

namespace luma::tools {

namespace {

struct PlanOptions {
  std::string input;
  std::string strategy = "best";
  std::string json, csv, svg;
  SvgOptions svg_options;
  std::optional<int> device;
  double time_limit = core::planner::kDefaultTimeLimitSeconds;
  bool periodic = false;
  std::string fence_aware = "auto";  // auto: on for luma traces, off for other inputs
  std::string fence_slack = "auto";  // allocations, or auto (the largest within the budget)
};

struct PlanInput {
  std::vector<core::Lifetime> lifetimes;
  std::vector<std::uint64_t> requested;  // parallel to lifetimes; empty when unknown
  std::optional<core::RunFingerprint> fingerprint;
  std::vector<std::string> notes;  // said before the tables (a snapshot's incomplete window)
};

// A PyTorch snapshot: its devices' allocations as lifetimes on each op's position, and a
// note for each device whose window did not see the run's start or is not a whole device's.
PlanInput snapshot_input(const core::TorchSnapshot& snapshot, const std::string& path) {
  PlanInput in;
  in.lifetimes = torch_snapshot_lifetimes(snapshot);
  for (const core::TorchDevice& d : snapshot.devices)
    if (!d.sequence.ops.empty())
      for (const std::string& line : window_lines(torch_window(d, snapshot.note)))
        in.notes.push_back(fmt::format("{}: device {}: {}", path, d.sequence.device, line));
  return in;
}

// Whether the file at `path` starts as a PyTorch snapshot (or another pickle, which the
// snapshot reader then refuses by name).
bool is_snapshot_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(core::kHeadBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return is_torch_snapshot(head) || (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80);
}

// The input's bytes when it is not a regular file (a pipe: `luma plan <(zcat x.csv.gz)`):
// read once, since the format check would otherwise consume what the reader needs.
// nullopt for a regular file, which the readers open themselves.
std::optional<std::string> read_unless_regular(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;  // the reader names the error
  if (S_ISDIR(st.st_mode)) throw core::PlanInputError(path + ": is a directory");
  if (S_ISREG(st.st_mode)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::PlanInputError(path + ": cannot open the file");
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw core::PlanInputError(path + ": read error");
  return bytes;
}

// A luma trace carries what replay needs beyond lifetimes (requested bytes, fingerprint).
bool is_luma_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[16] = {};
  in.read(head, sizeof head);
  return core::trace::has_trace_magic(std::string_view(head, static_cast<std::size_t>(in.gcount())));
}

PlanInput read_input(const std::string& path) {
  PlanInput in;
  std::optional<std::string> bytes = read_unless_regular(path);
  core::TraceAllocations run;
  if (bytes && !bytes->empty() && static_cast<unsigned char>((*bytes)[0]) == 0x80) {
    return snapshot_input(core::TorchSnapshotReader::read(*bytes, path), path);
  } else if (!bytes && is_snapshot_file(path)) {
    return snapshot_input(core::TorchSnapshotReader::read_file(path), path);
  } else if (bytes && core::trace::has_trace_magic(std::string_view(*bytes).substr(0, 16))) {
    run = core::read_trace_allocations(std::move(*bytes), path, /*for_replay=*/true);
  } else if (bytes) {
    in.lifetimes = core::read_lifetimes_text(*bytes, path, core::builtin_readers());
    return in;
  } else if (is_luma_trace(path)) {
    run = core::read_trace_allocations_file(path, /*for_replay=*/true);
  } else {
    in.lifetimes = core::read_lifetimes_file(path, core::builtin_readers());
    return in;
  }
  in.lifetimes = std::move(run.lifetimes);
  in.requested = std::move(run.requested);
  in.fingerprint = std::move(run.fingerprint);
  return in;
}

std::vector<std::uint64_t> requested_of_device(const PlanInput& in, int device) {
  std::vector<std::uint64_t> out;
  if (in.requested.empty()) return out;
  for (std::size_t i = 0; i < in.lifetimes.size(); ++i)
    if (in.lifetimes[i].device == device) out.push_back(in.requested[i]);
  return out;
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "luma plan: %s\n", message.c_str());
  throw ExitCode{kExitFailure};
}

void print_table(const std::string& input, const DevicePlan& dp) {
  const auto& r = dp.report;
  fmt::print("{}: device {}: {} buffers, lower bound {} B\n", input, dp.device,
             dp.lifetimes.size(), r.lower_bound);
  fmt::print("  {:<36} {:>14} {:>9} {:>10}\n", "strategy", "arena (B)", "arena/LB", "time (s)");
  for (const auto& run : r.runs)
    fmt::print("  {:<36} {:>14} {:>9.4f} {:>10.3f}\n", run.plan.strategy, run.plan.arena,
               arena_ratio(run.plan.arena, r.lower_bound), run.seconds);
  fmt::print("  chosen: {} (arena {} B, {:.4f} x LB)\n", r.chosen.strategy, r.chosen.arena,
             arena_ratio(r.chosen.arena, r.lower_bound));
}

// --periodic: the device's warm-up + one period, planned to repeat. No period: exit 1, or
// false when `quiet` (an automatic fence slack then tries a smaller one).
bool plan_device_periodic(const PlanOptions& o, DevicePlan& dp, core::Strategy strategy,
                          const core::SearchOptions& search, bool quiet = false) {
  const core::AllocationSequence seq = core::allocation_sequence(dp.lifetimes, dp.requested);
  const core::PeriodSearch found = core::find_period(seq);
  if (!found.found) {
    if (quiet) return false;
    fail(fmt::format("{}: device {}: {} (--periodic needs a pattern of allocations and frees that "
                     "repeats at least {} times to the end of the trace; plan without --periodic)",
                     o.input, dp.device,
                     found.budget_exhausted ? "no period found within the search budget"
                                            : "no repeating period in its allocations",
                     core::plan::kMinPeriodRepeats));
  }
  const core::PeriodicPlan pp = core::plan_periodic(dp.lifetimes, seq, *found.found, strategy, search);
  core::PeriodicLayout layout;
  layout.warmup = pp.warmup;
  layout.period = pp.period;
  layout.detected_warmup = pp.detected_warmup;
  layout.captured_iterations = pp.captured_iterations;
  layout.boundary_bytes = pp.boundary_bytes;
  dp.periodic = layout;
  dp.lifetimes = pp.slots;
  dp.requested = pp.slot_key;
  dp.report = pp.report;
  return true;
}

void run_plan(const PlanOptions& o) {
  // Before anything is read: an output naming the input would destroy it.
  std::vector<std::string> outputs;
  for (const std::string* out : {&o.json, &o.csv, &o.svg}) {
    if (out->empty()) continue;
    if (*out == "-") fail("-: luma plan prints its table on standard output; name a file to write");
    outputs.push_back(*out);
  }
  try {
    core::check_outputs_distinct({o.input}, outputs);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  PlanInput input;
  try {
    input = read_input(o.input);
  } catch (const core::PlanInputError& e) {
    fail(e.what());
  }
  for (const std::string& note : input.notes) fmt::print("{}\n", note);
  const std::vector<core::Lifetime>& all = input.lifetimes;
  std::vector<int> devices = core::devices_of(all);
  if (o.device) {
    if (std::find(devices.begin(), devices.end(), *o.device) == devices.end()) {
      std::string present;
      for (int d : devices) present += (present.empty() ? "" : ", ") + std::to_string(d);
      fail(o.input + ": no buffers on device " + std::to_string(*o.device) +
           " (devices present: " + (present.empty() ? "none" : present) + ")");
    }
    devices = {*o.device};
  }
  // Fence slack is about replay (which only plans made from a luma trace can drive), so it
  // is on by default for those only; a planner CSV or an RMM log is planned as given.
  const bool fence_aware = o.fence_aware == "on" || (o.fence_aware == "auto" && input.fingerprint.has_value());
  const bool auto_slack = o.fence_slack == "auto";
  const std::uint64_t max_slack = !fence_aware ? 0
                                  : auto_slack ? core::planner::kMaxAutoFenceSlack
                                               : std::stoull(o.fence_slack);
  auto strategy = core::parse_strategy(o.strategy);
  core::SearchOptions search;
  search.time_limit_seconds = o.time_limit;
  search.seed = core::planner::kSearchSeed;
  std::vector<DevicePlan> plans;
  for (int d : devices) {
    DevicePlan dp;
    dp.device = d;
    const std::vector<core::Lifetime> bare = core::lifetimes_of_device(all, d);
    const std::uint64_t run_lower_bound = core::lower_bound_bytes(bare);
    // Fence slack: the one asked for, or (auto) the largest up to kMaxAutoFenceSlack whose
    // arena stays within kFenceSlackArenaBudget of the run's own lower bound; else none.
    // Auto, when no L fits for every free: selectively, only for the frees where it costs
    // (almost) no live bytes above the run's peak (fence_slack.h), L = 16, 8, 4, 2, 1.
    std::vector<std::pair<std::uint64_t, bool>> attempts;  // (L, selective)
    for (std::uint64_t slack = max_slack; slack > 0; --slack) attempts.emplace_back(slack, false);
    if (auto_slack && max_slack > 0)
      for (std::uint64_t slack = core::planner::kMaxSelectiveFenceSlack; slack > 0; slack /= 2)
        attempts.emplace_back(slack, true);
    bool planned = false;
    std::uint64_t kept = 0;
    for (const auto& [slack, selective] : attempts) {
      if (planned) break;
      dp.lifetimes = selective ? core::with_selective_fence_slack(bare, slack, &kept)
                               : core::with_fence_slack(bare, slack);
      if (selective && kept == 0) continue;  // the plain plan below, then
      dp.requested = requested_of_device(input, d);
      dp.periodic.reset();
      if (o.periodic) {
        if (!plan_device_periodic(o, dp, *strategy, search, /*quiet=*/auto_slack)) continue;
      } else {
        dp.report = core::plan_lifetimes(dp.lifetimes, *strategy, search);
      }
      if (auto_slack && static_cast<double>(dp.report.chosen.arena) >
                            core::planner::kFenceSlackArenaBudget * static_cast<double>(run_lower_bound))
        continue;
      dp.fence_slack = core::FenceSlackLayout{slack, run_lower_bound, selective};
      planned = true;
    }
    if (!planned) {
      dp.lifetimes = bare;
      dp.requested = requested_of_device(input, d);
      dp.periodic.reset();
      if (o.periodic) plan_device_periodic(o, dp, *strategy, search);
      else dp.report = core::plan_lifetimes(dp.lifetimes, *strategy, search);
    }
    if (dp.periodic)
      fmt::print("{}: device {}: period of {} allocations after a warm-up of {} ({} full periods captured; cut "
                 "where {} are live across the period boundary)\n",
                 o.input, dp.device, dp.periodic->period, dp.periodic->warmup, dp.periodic->captured_iterations,
                 core::format_bytes(dp.periodic->boundary_bytes));
    print_table(o.input, dp);
    if (dp.fence_slack)
      fmt::print("  fence-aware: freed bytes kept {} allocations{}; the run's own lower bound is {} B, arena {:.4f} x that\n",
                 dp.fence_slack->allocations,
                 dp.fence_slack->selective ? fmt::format(" where that costs at most 1/{} of the peak ({} frees)",
                                                           core::planner::kSelectivePeakAllowanceDivisor, kept)
                                             : "",
                 run_lower_bound, arena_ratio(dp.report.chosen.arena, run_lower_bound));
    else if (fence_aware)
      fmt::print("  fence-aware: no slack of 1..{} allocations for every free{} keeps the arena within {:.2f} x the "
                 "lower bound; planned without\n",
                 max_slack,
                 auto_slack ? fmt::format(", nor of 1..{} for the frees where it costs at most 1/{} of the peak",
                                          core::planner::kMaxSelectiveFenceSlack,
                                          core::planner::kSelectivePeakAllowanceDivisor)
                            : "",
                 core::planner::kFenceSlackArenaBudget);
    plans.push_back(std::move(dp));
  }
  if (devices.empty()) fmt::print("{}: no buffers\n", o.input);
  try {
    if (!o.json.empty())
      write_plan_json(o.json, o.input, plans, input.fingerprint ? &*input.fingerprint : nullptr);
    if (!o.csv.empty()) write_plan_csv(o.csv, plans);
    if (!o.svg.empty()) write_plan_svg(o.svg, plans, o.svg_options);
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Plan device memory offline for a luma trace, an RMM log, a planner CSV or a PyTorch memory snapshot");
  cmd->add_option("INPUT", options->input,
                  "luma trace, planner CSV (id,lower,upper,size[,alignment]), RMM log "
                  "(Thread,Time,Action,Pointer,Size,Stream) or PyTorch memory snapshot (a pickle)")
      ->required();
  cmd->add_flag("--periodic", options->periodic,
                "find each device's repeating period and plan the warm-up plus one period, to be "
                "replayed for any number of iterations (exit 1 when there is none)");
  cmd->add_option("--fence-aware", options->fence_aware,
                  "on: keep each freed buffer's bytes out of reuse for --fence-slack allocations, so "
                  "that replay finds the free's fence completed instead of waiting for it; off: plan the "
                  "lifetimes as recorded; auto (default): on for a luma trace, off for other inputs")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--fence-slack", options->fence_slack,
                  "allocations of its device a freed buffer's bytes stay out of reuse in a fence-aware "
                  "plan, or auto (default): the largest up to " + std::to_string(core::planner::kMaxAutoFenceSlack) +
                  " whose arena stays within " + fmt::format("{:.2f}", core::planner::kFenceSlackArenaBudget) +
                  " x the run's lower bound (none when even 1 does not)")
      ->check([](const std::string& v) -> std::string {
        if (v == "auto") return "";
        if (v.empty() || v.size() > 7 || v.find_first_not_of("0123456789") != std::string::npos || std::stoull(v) == 0)
          return "must be auto or a number of allocations from 1 to 9999999";
        return "";
      });
  cmd->add_option("--strategy", options->strategy,
                  "tlsf: tinygrad's TLSF replay; greedy: greedy-by-size family; best: both "
                  "plus the improvement search (default)")
      ->check(CLI::IsMember({"tlsf", "greedy", "best"}));
  cmd->add_option("-o,--output", options->json, "write the plan as JSON");
  cmd->add_option("--csv", options->csv, "write the input rows with an offset column");
  cmd->add_option("--svg", options->svg, "draw the plan as SVG");
  cmd->add_option("--svg-max-buffers", options->svg_options.max_buffers,
                  "SVG: draw at most N buffers per device, the largest (default 100000)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--svg-from", options->svg_options.from,
                  "SVG: draw the run from this event index (the lifetimes' time)");
  cmd->add_option("--svg-to", options->svg_options.to,
                  "SVG: draw the run up to this event index");
  cmd->add_option("--device", options->device, "plan only this device");
  cmd->add_option("--time-limit", options->time_limit,
                  "seconds the improvement search may take per device (default " +
                      fmt::format("{}", core::planner::kDefaultTimeLimitSeconds) + ")")
      ->check(CLI::Range(0.0, 86400.0))
      // CLI::Range lets NaN through (every comparison with it is false).
      ->check([](const std::string& v) -> std::string {
        return std::isfinite(std::strtod(v.c_str(), nullptr)) ? "" : "must be a finite number of seconds";
      });
  cmd->callback([options] { run_plan(*options); });
}

}  // namespace luma::tools
