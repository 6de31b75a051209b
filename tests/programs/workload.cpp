// workload.cpp - the test workload: one program, compiled once per way of reaching CUDA
// (api.h), that a test runs with or without LD_PRELOAD=libluma.so and judges by its exit
// code and output. Each mode checks its own results:
//   exit 0 success, 1 wrong result (message on stderr), 2 bad usage or setup,
//   3 hazard observed (CORRUPTED), 4 out of memory (replay-rmm), 77 skipped (not enough
//   devices; Meson's skip code).
// Modes are deterministic and fast under the stand-ins' defaults. A mode never trusts
// luma: it checks what a CUDA program would check.
// This file holds the table of modes (name, arguments, function) and main; the modes are
// in modes_*.cpp by area (modes.h), the helpers they share in support.*.
#include <cstdio>
#include <cstring>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

struct Mode {
  const char* name;
  const char* args;
  int (*run)(int argc, char** argv);
};

const Mode kModes[] = {
    {"loop", "N SIZE", mode_loop},
    {"loop-mixed", "N", mode_loop_mixed},
    {"stress", "THREADS N", mode_stress},
    {"loop-contexts", "N K SIZE", mode_loop_contexts},
    {"hazard", "", mode_hazard},
    {"stream-order", "[ROUNDS [second-stream]]", mode_stream_order},
    {"stream-order-ends", "thread|stream", mode_stream_order_ends},
    {"stream-order-threads", "ROUNDS [nonblocking]", mode_stream_order_threads},
    {"hazard-streams", "STREAMS", mode_hazard_streams},
    {"oom", "[CHUNK]", mode_oom},
    {"limit", "[CHUNK]", mode_limit},
    {"hold", "CHUNK K READY_FD HOLD_FD", mode_hold},
    {"group-share", "CHUNK K", mode_group_share},
    {"exec-after-alloc", "CHUNK PROGRAM [ARGS]", mode_exec_after_alloc},
    {"invalid-free", "", mode_invalid_free},
    {"two-devices", "", mode_two_devices},
    {"meminfo", "", mode_meminfo},
    {"exit-main", "", mode_exit_main},
    {"exit-thread", "", mode_exit_thread},
    {"atexit", "", mode_atexit},
    {"exit-while-busy", "", mode_exit_while_busy},
    {"fork", "", mode_fork},
    {"fork-before-serving", "", mode_fork_before_serving},
    {"fork-exec", "", mode_fork_exec},
    {"threads-first", "[THREADS]", mode_threads_first},
    {"async", "[ROUNDS]", mode_async},
    {"host-managed", "[ROUNDS]", mode_host_managed},
    {"pool-vmm", "[ROUNDS]", mode_pool_vmm},
    {"reset", "", mode_reset},
    {"contexts", "", mode_contexts},
    {"many-contexts", "N", mode_many_contexts},
    {"context-destroy-race", "ROUNDS [primary]", mode_context_destroy_race},
    {"lifetimes", "contexts|streams|captures|threads N", mode_lifetimes},
    {"grace-period", "", mode_grace_period},
    {"destroy-while-freeing", "ROUNDS THREADS", mode_destroy_while_freeing},
    {"address-range", "", mode_address_range},
    {"free-async-cached", "", mode_free_async_cached},
    {"ipc-ranges", "[N]", mode_ipc_ranges},
    {"ipc-ranges-peer", "(stdin: HANDLE OFFSET LENGTH ID lines)", mode_ipc_ranges_peer},
    {"ipc-simple", "SIZE", mode_ipc_simple},
    {"ipc-simple-peer", "(stdin: HANDLE LENGTH ID)", mode_ipc_simple_peer},
    {"pages", "[ROUNDS [peers]]", mode_pages},
    {"ipc-answer", "SIZE", mode_ipc_answer},
    {"graph-pattern", "[LAUNCHES]", mode_graph_pattern},
    {"capture-global", "", mode_capture_global},
    {"capture-free-async", "", mode_capture_free_async},
    {"capture-other-threads", "", mode_capture_other_threads},
    {"capture-invalidated-free", "", mode_capture_invalidated_free},
    {"capture-blocking", "", mode_capture_blocking},
    {"capture-to-graph", "", mode_capture_to_graph},
    {"capture-race", "ROUNDS global|thread-local|relaxed|to-graph", mode_capture_race},
    {"capture-end-refused", "", mode_capture_end_refused},
    {"capture-probe-race", "", mode_capture_probe_race},
    {"train", "(LUMA_TEST_STEPS, LUMA_TEST_DIVERGE_AT, LUMA_TEST_ADDR_LOG)", mode_train},
    {"train-streams", "(LUMA_TEST_STEPS, LUMA_TEST_DATA)", mode_train_streams},
    {"replay-rmm", "FILE (an RMM log; exit 4: out of memory)", mode_replay_rmm},
};

int usage() {
  std::fprintf(stderr, "usage: %s MODE [ARGS]  (%s API)\n", g_prog, A.name);
  for (const Mode& m : kModes) std::fprintf(stderr, "  %s %s\n", m.name, m.args);
  return kExitUsage;
}

}  // namespace
}  // namespace luma::programs

int main(int argc, char** argv) {
  using namespace luma::programs;
  g_prog = argc > 0 ? argv[0] : "prog";
  if (const char* slash = std::strrchr(g_prog, '/')) g_prog = slash + 1;
  if (argc < 2) return usage();
  for (const Mode& m : kModes) {
    if (std::strcmp(argv[1], m.name) == 0) {
      int rc = m.run(argc - 2, argv + 2);
      if (rc == kExitUsage) return usage();
      return rc;
    }
  }
  std::fprintf(stderr, "%s: unknown mode '%s'\n", g_prog, argv[1]);
  return usage();
}
