// stats_compare.h - `luma stats A B --compare`: how B's peak differs from A's, per device
// (matched by number; a device one run lacks counts as 0 there), and what accounts for it.
// The peaks: allocated (the bytes live at the peak, as stats counts them), and reserved
// where the runs record it (a PyTorch snapshot: PyTorch's own), B minus A in bytes and in %
// of A. Then the bytes live at each run's peak of allocated, split by call site (the sites
// stats shows: call_sites.h, matched across the runs by their frames) and, for snapshots
// with stages, by the stage each live allocation was made in (the innermost stage open
// then; "(outside every stage)" else, and all of a run without stages): B's bytes minus
// A's per site and per stage, largest difference first, the top 10 sites (--full: every
// one; the stages all). Every live byte is in one site and one
// stage ("(no call site recorded)" for allocations without one), so with --full each list
// sums to the difference of the peaks of allocated. Text, or one JSON document (--json).
#pragma once

#include "report/call_sites.h"
#include "inputs/recorded_run.h"
#include "report/run_stats.h"

namespace luma::tools {

// One side of the comparison: its run, its call sites and the stats already computed.
struct CompareSide {
  RecordedRun* run = nullptr;
  CallSites* sites = nullptr;
  const RunStats* stats = nullptr;
  bool symbolized = false;  // its sites' addresses were named (a trace with mappings)
};

// Bytes as luma stats prints them: "512 B", "1.50 MiB" (two decimals, binary units).
std::string bytes_text(std::uint64_t bytes);

// Prints the comparison of B against A on standard output.
void print_comparison(CompareSide a, CompareSide b, bool json, bool full);

}  // namespace luma::tools
