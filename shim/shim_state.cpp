// shim_state.cpp - the one-time initialisation (see shim_state.h): read LUMA_*, start the
// logger, load the real driver, register the fork handler and the SIGTERM/SIGINT flush.
// Nothing here runs before the program's first CUDA call, so a process that never uses
// CUDA never sees luma.
#include "shim_state.h"

#include <pthread.h>

#include <cstdlib>
#include <new>

#include "config/log.h"
#include "threads/recursion_guard.h"
#include "signal_flush.h"

namespace luma::shim {
namespace {

std::atomic<State*> g_state{nullptr};
pthread_once_t g_once = PTHREAD_ONCE_INIT;

// Storage that is never destroyed (see shim_state.h).
alignas(State) unsigned char g_storage[sizeof(State)];

void initialise() noexcept {
  RecursionGuard guard;  // luma's own dlopen/dlsym calls below must not come back in
  State* s = new (g_storage) State();
  try {
    LoadedSettings loaded = read_settings([](const char* name) { return std::getenv(name); });
    s->settings = loaded.settings;
    s->table = std::move(loaded.table);
    s->settings_text = core::format_settings(s->settings.core);
    init_logging(s->settings.log_level, s->settings.log_file);
    for (const std::string& e : loaded.errors) log_noexcept(LogLevel::warn, "{}", e);
    s->recorder.configure(s->settings, s->settings_text);
    s->oom.configure(s->settings, s->recorder.wanted());
    s->plans.configure(s->settings.plan);
    s->live.configure(s->settings);
  } catch (...) {
    s->settings = ShimSettings{};
  }
  s->driver_loaded = load_real_driver(s->driver);
  s->serving = s->driver_loaded && s->driver.can_serve() && !s->settings.disable &&
               s->settings.core.caching;
  s->stream_order.set_enabled(s->serving && s->settings.core.stream_ordered_reuse &&
                              s->settings.core.free_sync == core::FreeSync::event);
  if (!s->driver_loaded)
    log_noexcept(LogLevel::debug, "libcuda.so.1 could not be loaded; every call is forwarded");
  else if (!s->serving && !s->settings.disable && s->settings.core.caching)
    log_noexcept(LogLevel::warn, "the driver lacks an entry point luma needs; allocations are not cached");
  if (s->serving && s->settings.core.host_cache) {
    try {
      s->host_cache = std::make_unique<PinnedHostCache>(s->driver, s->contexts, s->streams,
                                                        s->captures, s->settings.core.host_cache_limit);
    } catch (...) {  // no memory for it: pinned host memory is forwarded, as before
    }
  }
  pthread_atfork(nullptr, nullptr, [] { on_fork_child(); });
  // SIGTERM/SIGINT flush the statistics and the trace (only when serving; signal_flush.h).
  install_signal_flush(*s);
  g_state.store(s, std::memory_order_release);
}

}  // namespace

State& state() noexcept {
  State* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  pthread_once(&g_once, [] { initialise(); });
  return *g_state.load(std::memory_order_acquire);
}

State* state_if_ready() noexcept { return g_state.load(std::memory_order_acquire); }

}  // namespace luma::shim
