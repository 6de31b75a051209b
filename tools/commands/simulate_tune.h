// simulate_tune.h - `luma simulate --tune RUN...`: luma's placement settings searched on
// recorded runs, a LUMA_CONF recommended (docs/simulate.md, "--tune"). The command line
// and the inputs are simulate_command.cpp's; the search, its report and its JSON are here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "free_path/free_path.h"
#include "inputs/recorded_input.h"
#include "simulate/sim_sequence.h"

namespace luma::tools {

// One sequence the search replays: one device of one input.
struct TuneRun {
  std::string input;   // the path as given
  std::string format;  // core::SimInput::format
  const core::SimSequence* sequence = nullptr;
  std::optional<TorchWindow> torch;  // a PyTorch snapshot's device
};

// Each run is replayed TuneOptions::repeat times in a row (core::SimOptions::repeat): the
// warm copies are the program's steady state, and their driver time (estimated,
// core/simulate/driver_costs.h) is what a setting costs while it runs.
enum class TuneObjective : std::uint8_t {
  // The least peak reserved among the settings whose warm copies spend at most the driver
  // budget per copy on every run (only if none does, among all); ties: the least warm
  // driver time.
  peak,
  calls,        // the fewest driver allocations per 100 allocations (every copy); ties: the least peak
  driver_time,  // the least warm driver time per copy; ties: the least peak
};

struct TuneOptions {
  TuneObjective objective = TuneObjective::peak;
  // --limit: every setting replayed under memory_limit L; only those that complete every
  // run may be recommended, and the recommendation carries the limit.
  std::optional<std::uint64_t> limit;
  double limit_step = 0.005;  // X's scan, x peak live
  std::uint64_t fence_latency_ns = 0;
  std::optional<core::FreePath> free_path;  // --free-path; none: each run's own
  bool json = false;
  unsigned jobs = 0;  // threads; 0: one per CPU. The result never depends on it.
  unsigned repeat = 3;  // --repeat: copies of each window (core::SimOptions::repeat)
  std::uint64_t driver_budget_ns = 1'000'000;  // --driver-budget: per warm copy, the peak objective's bound
};

// Searches, prints the report (text or JSON) on stdout; a failure prints its message and
// throws ExitCode (commands.h).
void run_tune(const std::vector<TuneRun>& runs, const TuneOptions& options);

}  // namespace luma::tools
