// commands.h - the luma program's subcommands. Each subcommand lives in its own file and
// registers itself on the app with one add_*_command function; luma.cpp calls them from a
// table, so adding a subcommand is one declaration here and one row there.
// A subcommand's callback throws ExitCode to finish with a status other than 0.
#pragma once

#include <CLI/CLI.hpp>

namespace luma::tools {

// Exit statuses of the luma program.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // bad input, an unwritable output, a failed plan
inline constexpr int kExitUsage = 2;    // bad command line

// Thrown by a subcommand that has already printed its error.
struct ExitCode {
  int code;
};

void add_plan_command(CLI::App& app);
void add_stats_command(CLI::App& app);   // stats_command.cpp (trace work)
void add_export_command(CLI::App& app);  // export_command.cpp (trace work)
void add_run_command(CLI::App& app);     // run_command.cpp: luma run
void add_simulate_command(CLI::App& app);  // simulate_command.cpp: luma simulate
void add_top_command(CLI::App& app);     // top_command.cpp: luma top (live records)
void add_exporter_command(CLI::App& app);  // exporter_command.cpp: luma exporter (with prometheus-cpp)

}  // namespace luma::tools
