// export_command.cpp - `luma export TRACE --format memviz|chrome|rmm|csv -o FILE`: writes
// the run in a format other tools read. FILE is written through core::OutputFile (a
// temporary renamed over it), so a failed export never leaves a half-written FILE and
// never touches what was there; `-o -` writes to standard output. An output that names
// the input is refused before anything is read or written.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "exports.h"
#include "output_file.h"

namespace luma::tools {

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Convert a trace (or RMM log) for PyTorch's memory viewer, Perfetto, RMM "
                "or the planner");
  struct Options {
    std::string input, format, output;
    std::optional<int> device;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("TRACE", o->input, "a luma trace or an RMM log")->required();
  cmd->add_option("--format,-f", o->format,
                  "memviz (memory_viz snapshot pickle), chrome (Trace Event JSON), "
                  "rmm (RMM log CSV), csv (planner lifetimes id,lower,upper,size)")
      ->required()
      ->check(CLI::IsMember({"memviz", "chrome", "rmm", "csv"}));
  cmd->add_option("-o,--output", o->output, "the file to write (-: standard output)")->required();
  cmd->add_option("--device", o->device, "csv: the device whose buffers to write");
  cmd->callback([o] {
    try {
      core::check_outputs_distinct({o->input}, {o->output});
      RecordedRun run(o->input);
      core::OutputFile file(o->output);
      std::ostream& out = file.stream();
      if (o->format == "memviz") {
        std::unique_ptr<Symbolizer> sym;
        if (!run.header().mappings.empty())
          sym = std::make_unique<Symbolizer>(run.header().mappings);
        export_memviz(run, out, sym.get());
      } else if (o->format == "chrome") {
        export_chrome(run, out);
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
