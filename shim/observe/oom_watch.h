// oom_watch.h - the out-of-memory evidence beyond the report's numbers
// (core/stats/oom_report.h): with LUMA_TRACE_STACKS, the report's top call sites by live
// bytes; with LUMA_OOM_SNAPSHOT=PATTERN, a snapshot of the allocator in PyTorch's
// memory-viewer format (core/io/oom_snapshot.h) written to the pattern (%p pid, %h host,
// %r rank, %e executable, %% a percent sign). Each allocator's events reach an
// OomWatchSink (oom_watch_sink.h) when a trace is on.
//
// The snapshot is written once per process, at its first out-of-memory error: the one
// the program did not expect (a program that catches the error and retries smaller makes
// more, each like the first); later errors still get their report.
//
// At an out-of-memory error (serve.cpp's report_oom, after the allocator returned and
// released its lock): never allocates device memory (only host memory for the copies and
// the text), takes each lock alone (the sink's, then the allocator's for its snapshot),
// never throws; a snapshot that cannot be written logs one line.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "observe/oom_watch_sink.h"
#include "config/settings.h"
#include "stats/oom_report.h"

namespace luma::shim {

// How many call sites the report lists.
inline constexpr std::size_t kOomTopSites = 5;

class OomWatch {
 public:
  // At the one-time initialisation. `trace_on`: LUMA_TRACE records (stacks and events
  // reach allocators only then).
  void configure(const ShimSettings& settings, bool trace_on) noexcept;
  bool wanted() const noexcept { return watch_; }

  // For a context's allocator being built (ContextTable's lock held): the sink to attach
  // in place of `trace_sink` (which it calls on), or `trace_sink` itself when nothing is
  // watched. `key` names the allocator at report time.
  // The sink returned, when it is not `trace_sink`, is the caller's to free (with its
  // allocator, after forget(key)).
  core::EventSink* sink_for_new_allocator(const void* key, core::EventSink* trace_sink) noexcept;
  // The allocator `key` ended: its sink is no longer found (the caller frees it later).
  void forget(const void* key) noexcept;
  std::size_t sinks() const noexcept;  // sinks of live allocators

  // What was kept of the allocator `key` (empty without a sink).
  struct Evidence {
    OomWatchSink::Copy kept;
  };
  Evidence gather(const void* key) const noexcept;

  // The top sites (LUMA_TRACE_STACKS) into the report, symbolized in-process.
  void add_top_sites(const Evidence& ev, core::OomReport& r) const noexcept;

  // LUMA_OOM_SNAPSHOT: the snapshot of `cache`, on the first call of the process only.
  // Returns the path written ("" when none).
  std::string write_snapshot(const Evidence& ev, const core::CachingAllocator& cache,
                             const core::OomReport& r, const std::string& settings_text,
                             std::uint64_t stream) noexcept;

 private:
  bool watch_ = false;          // a sink per allocator
  unsigned depth_ = 0;          // LUMA_TRACE_STACKS
  std::string pattern_;         // LUMA_OOM_SNAPSHOT
  std::atomic<bool> written_{false};
  mutable std::mutex mu_;       // sinks_
  std::vector<std::pair<const void*, OomWatchSink*>> sinks_;  // one per live allocator
};

// "symbol+0xOFF" (demangled) for a return address, "module+0xOFF" when it has no dynamic
// symbol, or the address when it lies in no module; `module` gets the object's path. dladdr only: the dynamic symbols (a program's own functions need
// -rdynamic to be named).
std::string symbolize_return_address(std::uint64_t address, std::string* module);

}  // namespace luma::shim
