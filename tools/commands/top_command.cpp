// top_command.cpp - `luma top`: what each of this user's processes under luma holds on
// each device while it runs (allocated, reserved, peak, pending-free bytes, its limit and
// group, OOMs), read from the live records (docs/live-record.md), largest reserved first,
// refreshed like top. `--once` prints one table, `--json` the same as JSON.
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "commands/commands.h"
#include "live/live_view.h"
#include "inputs/live_directory.h"

namespace luma::tools {

namespace {

struct TopOptions {
  bool once = false;
  bool json = false;
  bool exact_bytes = false;
  double interval_s = 2.0;
  std::string dir;
};

// One refresh: the table (or JSON) on stdout; each skipped file's line on stderr, once
// for the life of the command (`said` remembers them), not at every refresh.
void print_once(const TopOptions& o, bool clear, std::set<std::pair<std::string, std::string>>& said) {
  const LiveScan scan = scan_live_directory(o.dir);
  for (const core::live::SkippedFile& s : scan.skipped)
    if (said.insert({s.path, s.reason}).second)
      std::fprintf(stderr, "luma top: %s\n", skipped_line(s).c_str());
  const std::vector<core::live::DeviceRow> rows = rows_of(scan);
  const std::vector<core::live::GroupRow> groups = core::live::group_rows(rows);
  std::string out;
  if (o.json) {
    out = core::live::format_top_json(rows, groups, scan.skipped);
  } else {
    if (clear) out += "\x1b[H\x1b[2J";  // home, clear: the next table in place, as top does
    if (!o.once) {
      const std::time_t now = std::time(nullptr);
      char at[16] = {};
      std::strftime(at, sizeof at, "%H:%M:%S", std::localtime(&now));
      out += fmt::format("luma top - {} - {} (every {} s; Ctrl-C quits)\n", at, o.dir, o.interval_s);
    }
    out += core::live::format_top_text(rows, groups, core::live::TopFormat{o.exact_bytes});
    if (!clear && !o.once) out += "\n";
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_top_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "top", "Device memory of this user's processes under luma, live: allocated, reserved, peak, "
             "limit and group, OOMs (largest reserved first), refreshed like top");
  auto o = std::make_shared<TopOptions>();
  o->dir = default_live_dir();
  cmd->add_flag("--once", o->once, "print one table and exit");
  cmd->add_flag("--json", o->json, "print JSON instead of the table");
  cmd->add_flag("--bytes", o->exact_bytes, "sizes as byte counts instead of KiB/MiB/GiB");
  cmd->add_option("--interval", o->interval_s, "seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--dir", o->dir, "the directory of the live records (LUMA_LIVE_DIR of the programs)")
      ->capture_default_str();
  cmd->callback([o] {
    std::set<std::pair<std::string, std::string>> said;
    const bool clear = !o->once && !o->json && isatty(STDOUT_FILENO) != 0;
    try {
      for (;;) {
        print_once(*o, clear, said);
        if (o->once) return;
        std::this_thread::sleep_for(std::chrono::duration<double>(o->interval_s));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "luma top: %s\n", e.what());
      throw ExitCode{kExitFailure};
    }
  });
}

}  // namespace luma::tools
