// process.cpp - the process lifecycle: statistics printed once and the trace closed, at
// exit or on SIGTERM/SIGINT (signal_flush.h), and fork.
//
// Exit: the printer is a destructor of libluma.so (.fini_array). exit() - from main's
// return or from any thread - first runs every atexit handler, the program's and the CUDA
// runtime's teardown included, and only then the destructors of the loaded objects
// (_dl_fini); so the statistics come after the program's own atexit handlers, whatever
// they did. By then every static object with a destructor in this library is gone too
// (exit ran their __cxa_atexit handlers), so the printer uses only what the leaked State
// holds and core functions without such statics. The printer never calls CUDA (the runtime may be torn down already) and never
// frees segments (the driver reclaims them); it reads luma's own counters, formats one
// buffer and writes it with plain write(2) - no logger, no stdio locks.
//
// fork: a child forked after the parent served CUDA inherits the parent's cache, which is
// not its own (CUDA state does not survive fork); it forwards every call to the driver and
// prints nothing, so it neither duplicates nor overwrites the parent's statistics. A child
// forked before the parent touched CUDA starts with an empty state and is served (and
// reports, and records its own trace) like any process. exec'd children load luma afresh.
// The trace (LUMA_TRACE) is closed after the statistics; a child never touches the
// parent's trace (trace_recorder.h).
//
// Signals: the flusher thread of signal_flush.cpp calls flush_process_output() with the
// signal, then ends the process by it. Exit and the flusher may race (the program returns
// from main while the flusher writes): whichever comes second waits for the first to
// finish, so the output is never cut short by the other.
#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "observe/footprint.h"
#include "observe/run_identity.h"
#include "shim_state.h"
#include "signal_flush.h"
#include "host_cache/host_cache_format.h"
#include "replay/replay_stats_format.h"
#include "stats/stats_format.h"

namespace luma::shim {
namespace {

// How long a second flush_process_output() waits for the first one: the statistics and the
// trace close take milliseconds (the close itself waits at most 200 ms for events in
// flight); a flusher stuck longer than this is not waited for, so exit never hangs.
constexpr std::uint64_t kFlushWaitNs = 5'000'000'000;
// How long the statistics wait, in all, for allocator locks held by other calls (see
// format_output): an allocation holds its lock for microseconds, a fence wait for as long
// as the GPU work it waits for; half a second tells the two apart without a felt delay.
constexpr std::chrono::milliseconds kStatsLockWait{500};

std::atomic<bool> g_printed{false};
// 0: nobody flushed yet; 1: a thread is flushing; 2: flushed.
std::atomic<int> g_flush{0};

std::uint64_t monotonic_now_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(t.tv_nsec);
}

const char* signal_name(int signal) noexcept {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

void write_all(int fd, const std::string& text) noexcept {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// "legacy (a second thread uses CUDA)": the path and the fact that decided it.
std::string free_path_text(const core::FreePathDecision& d) {
  return std::string(core::free_path_name(d.path)) + " (" + d.why + ")";
}

std::string format_output(const State& s, int signal) {
  // Each allocator's lock is waited for until one shared deadline, never longer: a thread
  // may hold it for good (stuck in a fence wait on GPU work that never ends), or this very
  // thread may (a signal handler that called exit() inside an allocation). Such a device
  // is left out of the statistics, and the output says so, rather than hang the exit.
  const auto deadline = std::chrono::steady_clock::now() + kStatsLockWait;
  // The live entries are read inside a grace section: a context destroyed meanwhile by
  // another thread is not freed under this walk. Ended contexts come folded, one record
  // per device (context_table.h).
  GracePeriods::Section reading;
  std::vector<core::DeviceStats> devices;
  std::vector<core::ReplayStats> replay;
  std::vector<const ContextEntry*> live;
  s.contexts.snapshot(&devices, &replay, &live);
  std::string busy;
  for (const ContextEntry* e : live) {
    core::DeviceStats d;
    if (e->allocator.try_stats(&d, deadline)) {
      // One entry per device, as PyTorch reports: the contexts of a device (one per
      // reset, or the program's own) are added up (core::accumulate_context).
      auto same = std::find_if(devices.begin(), devices.end(),
                               [&](const core::DeviceStats& x) { return x.device == d.device; });
      if (same == devices.end()) devices.push_back(d);
      else core::accumulate_context(*same, d);
    } else {
      busy += (busy.empty() ? "" : ", ") + std::to_string(e->device);
    }
  }
  std::sort(devices.begin(), devices.end(),
            [](const core::DeviceStats& a, const core::DeviceStats& b) { return a.device < b.device; });
  for (core::DeviceStats& d : devices) core::report_pending_as_freed(d);
  std::vector<core::StatsExtra> extra = {
      core::StatsExtra::text("luma_version", LUMA_VERSION),
      core::StatsExtra::number("pid", static_cast<std::int64_t>(getpid())),
      core::StatsExtra::text("free_sync", core::free_sync_name(s.settings.core.free_sync)),
      // Which free path the process ended on (core/free_path): what a run's peak depends on.
      core::StatsExtra::text("free_path", free_path_text(s.stream_order.decision())),
      core::StatsExtra::text("settings", s.settings_text),
  };
  // Statistics written because a signal ends the process say so.
  if (signal != 0) extra.push_back(core::StatsExtra::text("ended_by", signal_name(signal)));
  if (!busy.empty())
    extra.push_back(core::StatsExtra::text(
        "left_out", "device " + busy + ": its allocator was held by a running call at exit"));
  // LUMA_PLAN: whether the run was served from its plan, how far it got, real allocations.
  if (s.plans.wanted())
    for (const ContextEntry* e : live) {
      core::ReplayStats r;
      if (e->allocator.try_replay_stats(&r, deadline)) replay.push_back(r);
    }
  const std::vector<core::ForwardedPathStats> forwarded = s.forwarded.snapshot();
  std::optional<core::HostCacheStats> host;
  if (s.host_cache != nullptr) host = s.host_cache->stats_for_exit();
  if (s.settings.stats == StatsFormat::json) {
    extra.push_back({"forwarded_allocations", core::format_forwarded_json(forwarded), false});
    extra.push_back({"footprint", footprint_json(footprint(s.contexts, s.streams, s.captures, s.recorder, s.oom)), false});  // luma's own records
    if (host) extra.push_back({"host_cache", core::format_host_cache_json(*host, s.host_cache->limit()), false});
    if (s.plans.wanted())
      extra.push_back({"plan", core::format_replay_json(s.plans.summary(), replay), false});
    return core::format_stats_json(devices, extra) + "\n";
  }
  std::string head = "luma: memory statistics at exit";
  if (signal != 0) head += std::string(" (") + signal_name(signal) + ")";
  std::string text = head + "\n";
  if (devices.empty() && !busy.empty()) {  // not "no memory was allocated": none could be read
    for (const core::StatsExtra& e : extra) text += e.key + ": " + e.value + "\n";
  } else {
    text += core::format_stats_text(devices, extra);
  }
  text += core::format_forwarded_text(forwarded);
  if (host) text += core::format_host_cache_text(*host, s.host_cache->limit());
  if (s.plans.wanted()) text += core::format_replay_text(s.plans.summary(), replay);
  return text;
}

void print_stats_once(int signal) noexcept {
  State* s = state_if_ready();
  if (s == nullptr || s->inherited.load() || s->settings.stats == StatsFormat::off) return;
  // Nothing to say for a process that never had an allocation served or forwarded (counted
  // in s->forwarded): it stays silent.
  if (s->contexts.empty() && !s->forwarded.any()) return;
  if (g_printed.exchange(true)) return;
  try {
    std::string text = format_output(*s, signal);
    if (s->settings.stats_file.empty()) {
      write_all(STDERR_FILENO, text);
      return;
    }
    const ProcessNames names = process_names();
    core::PathFields fields = names.fields();
    fields.exe.reset();  // LUMA_STATS_FILE knows %p %h %r
    std::string path = core::expand_path_pattern(s->settings.stats_file, fields);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      write_all(STDERR_FILENO, "luma: warning: LUMA_STATS_FILE '" + path +
                                   "' cannot be written; statistics follow on stderr\n");
      write_all(STDERR_FILENO, text);
      return;
    }
    write_all(fd, text);
    ::close(fd);
  } catch (const std::exception& e) {
    write_all(STDERR_FILENO, std::string("luma: error: no statistics: ") + e.what() + "\n");
  } catch (...) {
  }
}

// Runs after every atexit handler (see the header comment); also on dlclose.
[[gnu::destructor]] void at_unload() { flush_process_output(0); }

}  // namespace

void flush_process_output(int signal) noexcept {
  int expected = 0;
  if (!g_flush.compare_exchange_strong(expected, 1)) {
    const std::uint64_t deadline = monotonic_now_ns() + kFlushWaitNs;
    while (g_flush.load() == 1 && monotonic_now_ns() < deadline) {
      const timespec pause{0, 1'000'000};
      nanosleep(&pause, nullptr);
    }
    return;
  }
  // The trace is closed after the statistics (which read only the allocators' counters).
  print_stats_once(signal);
  if (State* s = state_if_ready()) {
    s->recorder.close_at_exit();
    s->live.close_at_exit();
  }
  g_flush.store(2);
}

void on_fork_child() noexcept {
  GracePeriods::after_fork_in_child();  // the parent's other threads are not here
  signal_flush_in_child();  // the parent's flusher thread is not here
  State* s = state_if_ready();
  if (s == nullptr) return;
  if (!s->contexts.empty()) s->inherited.store(true);
  else s->signal_flush_after_fork.store(true);
  s->recorder.detach_in_child();  // the parent's trace mapping is never written here
  s->live.detach_in_child();      // nor its live record
}

}  // namespace luma::shim
