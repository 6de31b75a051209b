// export_command.cpp - `luma export TRACE --format memviz|chrome|rmm|csv -o FILE`: writes
// the run in a format other tools read (memviz and chrome: --last N, --from S, --to S
// keep part of it). FILE is written through core::OutputFile (a temporary renamed over it), so a
// failed export never leaves a half-written FILE and never touches what was there;
// `-o -` writes to standard output. An output that names the input is refused before
// anything is read or written.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "commands/commands.h"
#include "exports/exports.h"
#include "io/output_file.h"

namespace luma::tools {

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Convert a trace (or RMM log) for PyTorch's memory viewer, Perfetto, RMM "
                "or the planner");
  struct Options {
    std::string input, format, output;
    std::optional<int> device;
    std::optional<std::uint64_t> last;
    std::optional<double> from_s, to_s;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("TRACE", o->input, "a luma trace, an RMM log or a PyTorch memory snapshot")->required();
  cmd->add_option("--format,-f", o->format,
                  "memviz (memory_viz snapshot pickle), chrome (Trace Event JSON), "
                  "rmm (RMM log CSV), csv (planner lifetimes id,lower,upper,size)")
      ->required()
      ->check(CLI::IsMember({"memviz", "chrome", "rmm", "csv"}));
  cmd->add_option("-o,--output", o->output, "the file to write (-: standard output)")->required();
  cmd->add_option("--device", o->device, "csv: the device whose buffers to write");
  cmd->add_option("--last", o->last,
                  "memviz: keep each device's last N trace entries (PyTorch's max_entries); "
                  "chrome: the run's last N events")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--from", o->from_s,
                  "memviz, chrome: keep the events from SECONDS after the trace started")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--to", o->to_s,
                  "memviz, chrome: keep the events up to SECONDS after the trace started "
                  "(memviz: the segments are the state then)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o] {
    try {
      if (o->format != "memviz" && o->format != "chrome" && (o->last || o->from_s || o->to_s))
        throw std::runtime_error("--last, --from and --to apply to --format memviz and chrome only");
      core::check_outputs_distinct({o->input}, {o->output});
      RecordedRun run(o->input);
      core::OutputFile file(o->output);
      std::ostream& out = file.stream();
      WindowOptions window;
      window.last_events = o->last;
      auto ns = [](double seconds) { return static_cast<std::uint64_t>(seconds * 1e9 + 0.5); };
      if (o->from_s) window.from_ns = ns(*o->from_s);
      if (o->to_s) window.to_ns = ns(*o->to_s);
      if (o->format == "memviz") {
        std::unique_ptr<Symbolizer> sym;
        if (!run.header().mappings.empty())
          sym = std::make_unique<Symbolizer>(run.header().mappings);
        export_memviz(run, out, sym.get(), window);
      } else if (o->format == "chrome") {
        export_chrome(run, out, window);
      } else if (o->format == "rmm") {
        export_rmm(run, out);
      } else {
        export_lifetimes_csv(run, out, o->device);
      }
      file.commit();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "luma export: %s\n", e.what());
      throw ExitCode{kExitFailure};
    }
  });
}

}  // namespace luma::tools
