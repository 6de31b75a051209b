// luma.cpp - the luma program: reads traces and logs, plans memory. Dispatches to the
// subcommands registered in kCommands; maps errors to exit codes (0 ok, 1 failure,
// 2 usage). It must never let an exception escape main.
#include <cstdio>
#include <exception>

#include "commands/commands.h"

namespace {

using Register = void (*)(CLI::App&);
// One row per subcommand (see commands.h).
constexpr Register kCommands[] = {
    luma::tools::add_plan_command,
    luma::tools::add_stats_command,
    luma::tools::add_export_command,
    luma::tools::add_run_command,
    luma::tools::add_simulate_command,
    luma::tools::add_top_command,
#ifdef LUMA_EXPORTER
    luma::tools::add_exporter_command,
#endif
};

}  // namespace

int main(int argc, char** argv) {
  using namespace luma::tools;
  CLI::App app{"luma: read allocation traces, plan device memory, watch running processes", "luma"};
  app.set_version_flag("--version", LUMA_VERSION);
  app.require_subcommand(1);
  for (Register add : kCommands) add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  } catch (const ExitCode& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "luma: %s\n", e.what());
    return kExitFailure;
  }
  return kExitOk;
}
