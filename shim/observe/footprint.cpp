// footprint.cpp - luma's own records counted (footprint.h), as one JSON object.
#include "observe/footprint.h"

#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "device/capture_registry.h"
#include "device/context_table.h"
#include "device/stream_registry.h"
#include "observe/oom_watch.h"
#include "observe/trace_recorder.h"
#include "threads/grace_periods.h"

namespace luma::shim {

Footprint footprint(const ContextTable& contexts, const StreamRegistry& streams,
                    const CaptureRegistry& captures, const TraceRecorder& recorder,
                    const OomWatch& oom) noexcept {
  GracePeriods::Section reading;
  Footprint f;
  const ContextCounts c = contexts.counts();
  f.contexts_made = c.made;
  f.contexts_live = c.live;
  f.contexts_graveyard = c.graveyard;
  f.devices_folded = c.folded;
  try {
    // An allocator's lock may be held for good (a fence wait on work that never ends):
    // waited for a short while, then left out and counted as busy.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    contexts.for_each_held([&](const ContextEntry& e) {
      std::size_t bytes = 0;
      if (e.allocator.cache().try_host_bytes(&bytes, deadline)) f.context_bytes += sizeof(ContextEntry) + bytes;
      else ++f.contexts_busy;
    });
  } catch (...) {  // the table's lock could not be taken: counts only
  }
  f.thread_records = GracePeriods::records_in_use();
  f.thread_records_made = GracePeriods::records_made();
  f.streams = streams.size();
  f.captures = captures.tracked();
  f.trace_sinks = recorder.sinks_made();
  f.oom_sinks = oom.sinks();
  f.bytes = f.context_bytes + f.thread_records_made * sizeof(ThreadRecord) +
            f.streams * 2 * sizeof(void*) + f.captures * 48 + f.trace_sinks * 64 +
            c.folded * sizeof(core::DeviceStats);
  return f;
}

std::string footprint_json(const Footprint& f) {
  return fmt::format(
      "{{\"contexts_made\": {}, \"contexts_live\": {}, \"contexts_graveyard\": {}, "
      "\"devices_folded\": {}, \"context_bytes\": {}, \"contexts_busy\": {}, \"thread_records\": {}, "
      "\"thread_records_made\": {}, \"streams\": {}, \"captures\": {}, \"trace_sinks\": {}, "
      "\"oom_sinks\": {}, \"bytes\": {}}}",
      f.contexts_made, f.contexts_live, f.contexts_graveyard, f.devices_folded, f.context_bytes,
      f.contexts_busy, f.thread_records, f.thread_records_made, f.streams, f.captures, f.trace_sinks, f.oom_sinks,
      f.bytes);
}

}  // namespace luma::shim
