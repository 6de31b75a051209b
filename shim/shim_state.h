// shim_state.h - everything libluma.so holds for the process: the settings, the real
// driver, the allocators per context, the streams. Built once, on the first intercepted
// CUDA call of any thread (pthread_once), and never destroyed: hooks may still be called
// from other libraries' destructors after luma's would have run.
// Must never be initialised from inside a hook that already holds the RecursionGuard of
// the initialising thread (pthread_once would deadlock): hooks check the guard first.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "device/capture_registry.h"
#include "device/context_table.h"
#include "observe/forwarded_paths.h"
#include "pinned/host_cache_driver.h"
#include "observe/live_publisher.h"
#include "program/plan_loader.h"
#include "program/program_cache.h"
#include "driver/real_driver.h"
#include "config/settings.h"
#include "device/stream_order.h"
#include "device/stream_registry.h"
#include "observe/oom_watch.h"
#include "observe/trace_recorder.h"

namespace luma::shim {

struct State {
  ShimSettings settings;
  std::vector<SettingRow> table;
  // core::format_settings(settings.core), made at initialisation: at exit the core's
  // function-local statics it uses are already destroyed (exit runs every __cxa_atexit
  // handler, this library's included, before the destructors of loaded objects).
  std::string settings_text;
  RealDriver driver;
  bool driver_loaded = false;
  // Allocations are served by the cache (else every call is forwarded untouched).
  bool serving = false;
  StreamRegistry streams;
  // Stream captures underway (CUDA graphs): what they forbid, for the hooks and the fences.
  CaptureRegistry captures;
  ContextTable contexts;
  // The program's allocations luma forwards (stream-ordered, managed, pinned host), counted.
  ForwardedCounters forwarded;
  // Pinned host memory served from luma's cache (LUMA_CONF host_cache); nullptr: forwarded.
  std::unique_ptr<PinnedHostCache> host_cache;
  // LUMA_TRACE: the event trace (attached to each allocator as it is built).
  TraceRecorder recorder;
  // LUMA_TRACE_STACKS / LUMA_OOM_SNAPSHOT: the evidence kept for an out-of-memory error.
  OomWatch oom;
  // Whether every use of device memory is still in one stream's order: frees are then
  // reused at once (stream_order.h).
  StreamOrder stream_order;
  // A caching allocator of the program's own (PyTorch's), recognised: its allocations get
  // driver allocations of their own (program_cache.h).
  ProgramCacheWatch program_cache;
  // LUMA_LIVE_DIR: the live statistics `luma top` and `luma exporter` read.
  LivePublisher live;
  // LUMA_PLAN: the plan every context's allocator follows, and the log of divergences.
  PlanLoader plans;
  DivergenceLog divergence_log;
  // Set in a child forked after the parent served CUDA: the parent's cache is not the
  // child's to use or report, so the child forwards everything and prints nothing.
  std::atomic<bool> inherited{false};
  // Set in a child forked before the parent served anything: the child is a process of
  // its own, but fork took luma's SIGTERM/SIGINT handler and flusher thread away; they are
  // put back at its first served allocation (threads cannot be started in a fork handler).
  std::atomic<bool> signal_flush_after_fork{false};

  bool serves() const noexcept { return serving && !inherited.load(std::memory_order_relaxed); }
};

// The state, initialised on first use. Never nullptr.
State& state() noexcept;
// The state if some thread has initialised it, else nullptr; never initialises.
State* state_if_ready() noexcept;

// process.cpp: registered by the initialisation.
void on_fork_child() noexcept;

}  // namespace luma::shim
