// modes.h - the workload's modes, declared by the file that defines them; the table in
// workload.cpp names them. Each takes the arguments after its name and returns the
// program's exit code (support.h).
#pragma once

namespace luma::programs {

// modes_basic.cpp: allocation and free as most programs use them
int mode_loop(int argc, char** argv);
int mode_loop_mixed(int argc, char** argv);
int mode_stress(int argc, char** argv);
int mode_invalid_free(int argc, char** argv);
int mode_two_devices(int argc, char** argv);
int mode_meminfo(int argc, char** argv);
int mode_threads_first(int argc, char** argv);

// modes_streams.cpp: streams, stream order and fences
int mode_hazard(int argc, char** argv);
int mode_stream_order(int argc, char** argv);
int mode_stream_order_ends(int argc, char** argv);
int mode_stream_order_threads(int argc, char** argv);
int mode_hazard_streams(int argc, char** argv);
int mode_async(int argc, char** argv);
int mode_free_async_cached(int argc, char** argv);

// modes_limits.cpp: out of memory, memory limits and limit groups
int mode_oom(int argc, char** argv);
int mode_limit(int argc, char** argv);
int mode_hold(int argc, char** argv);
int mode_group_share(int argc, char** argv);

// modes_lifecycle.cpp: process lifecycle: exit, atexit, fork, exec
int mode_exec_after_alloc(int argc, char** argv);
int mode_exit_main(int argc, char** argv);
int mode_exit_thread(int argc, char** argv);
int mode_exit_while_busy(int argc, char** argv);
int mode_atexit(int argc, char** argv);
int mode_fork_before_serving(int argc, char** argv);
int mode_fork(int argc, char** argv);
int mode_fork_exec(int argc, char** argv);

// modes_contexts.cpp: contexts and device reset
int mode_loop_contexts(int argc, char** argv);
int mode_reset(int argc, char** argv);
int mode_contexts(int argc, char** argv);
int mode_many_contexts(int argc, char** argv);
int mode_context_destroy_race(int argc, char** argv);

// modes_lifetimes.cpp: many lifetimes, luma's own records before and after
int mode_lifetimes(int argc, char** argv);
int mode_grace_period(int argc, char** argv);
int mode_destroy_while_freeing(int argc, char** argv);

// modes_ipc.cpp: IPC and address ranges
int mode_address_range(int argc, char** argv);
int mode_ipc_ranges(int argc, char** argv);
int mode_ipc_ranges_peer(int argc, char** argv);
int mode_ipc_simple(int argc, char** argv);
int mode_ipc_simple_peer(int argc, char** argv);

// modes_forwarded.cpp: allocation paths forwarded to the driver
int mode_host_managed(int argc, char** argv);
int mode_pool_vmm(int argc, char** argv);

// modes_pages.cpp: blocks across device pages (expandable segments), the IPC answer
int mode_pages(int argc, char** argv);
int mode_ipc_answer(int argc, char** argv);

// modes_capture.cpp: stream capture and CUDA graphs
int mode_graph_pattern(int argc, char** argv);
int mode_capture_global(int argc, char** argv);
int mode_capture_free_async(int argc, char** argv);
int mode_capture_other_threads(int argc, char** argv);
int mode_capture_race(int argc, char** argv);
int mode_capture_end_refused(int argc, char** argv);
int mode_capture_probe_race(int argc, char** argv);
int mode_capture_blocking(int argc, char** argv);
int mode_capture_invalidated_free(int argc, char** argv);
int mode_capture_to_graph(int argc, char** argv);

// modes_train.cpp: training loops
int mode_train(int argc, char** argv);
int mode_train_streams(int argc, char** argv);

// modes_replay.cpp: a recorded program's allocations replayed from an RMM log
int mode_replay_rmm(int argc, char** argv);

}  // namespace luma::programs
