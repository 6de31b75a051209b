// plan_command.cpp - `luma plan INPUT`: read a planner CSV or an RMM log (format detected by
// content), plan each device, print the strategies' table, write the requested files.
// Every plan written has passed the planner's checker.
#include <fmt/core.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "device_plan.h"
#include "plan_files.h"
#include "planner/lifetime_reader.h"
#include "planner/planner.h"
#include "planner/planner_constants.h"

namespace luma::tools {

namespace {

struct PlanOptions {
  std::string input;
  std::string strategy = "best";
  std::string json, csv, svg;
  std::optional<int> device;
  double time_limit = core::planner::kDefaultTimeLimitSeconds;
};

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

void run_plan(const PlanOptions& o) {
  std::vector<core::Lifetime> all;
  try {
    all = core::read_lifetimes_file(o.input, core::builtin_readers());
  } catch (const core::PlanInputError& e) {
    fail(e.what());
  }
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
  auto strategy = core::parse_strategy(o.strategy);
  core::SearchOptions search;
  search.time_limit_seconds = o.time_limit;
  search.seed = core::planner::kSearchSeed;
  std::vector<DevicePlan> plans;
  for (int d : devices) {
    DevicePlan dp;
    dp.device = d;
    dp.lifetimes = core::lifetimes_of_device(all, d);
    dp.report = core::plan_lifetimes(dp.lifetimes, *strategy, search);
    print_table(o.input, dp);
    plans.push_back(std::move(dp));
  }
  if (devices.empty()) fmt::print("{}: no buffers\n", o.input);
  try {
    if (!o.json.empty()) write_plan_json(o.json, o.input, plans);
    if (!o.csv.empty()) write_plan_csv(o.csv, plans);
    if (!o.svg.empty()) write_plan_svg(o.svg, plans);
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Plan device memory offline for a luma trace, an RMM log or a planner CSV");
  cmd->add_option("INPUT", options->input,
                  "planner CSV (id,lower,upper,size[,alignment]) or RMM log "
                  "(Thread,Time,Action,Pointer,Size,Stream)")
      ->required();
  cmd->add_option("--strategy", options->strategy,
                  "tlsf: tinygrad's TLSF replay; greedy: greedy-by-size family; best: both "
                  "plus the improvement search (default)")
      ->check(CLI::IsMember({"tlsf", "greedy", "best"}));
  cmd->add_option("-o,--output", options->json, "write the plan as JSON");
  cmd->add_option("--csv", options->csv, "write the input rows with an offset column");
  cmd->add_option("--svg", options->svg, "draw the plan as SVG");
  cmd->add_option("--device", options->device, "plan only this device");
  cmd->add_option("--time-limit", options->time_limit,
                  "seconds the improvement search may take per device (default " +
                      fmt::format("{}", core::planner::kDefaultTimeLimitSeconds) + ")")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->callback([options] { run_plan(*options); });
}

}  // namespace luma::tools
