// footprint.h - what luma itself holds now: its records (contexts, thread records, streams,
// captures, sinks) and the host bytes behind them. Bounded by what is alive, never by what
// ever lived (docs/architecture.md, "What luma holds"); tests read it through the exported
// luma_footprint() (hooks.cpp) before and after many lifetimes, and the JSON statistics at
// exit carry it.
#pragma once

#include <cstddef>
#include <string>

namespace luma::shim {

class ContextTable;
class StreamRegistry;
class CaptureRegistry;
class TraceRecorder;
class OomWatch;

struct Footprint {
  std::size_t contexts_made = 0;       // ever (a count, not a record)
  std::size_t contexts_live = 0;
  std::size_t contexts_graveyard = 0;  // ended, waiting for their grace period
  std::size_t devices_folded = 0;      // one record per device for the ended ones
  std::size_t context_bytes = 0;       // entries held: the entry and its allocator's records
  std::size_t contexts_busy = 0;       // entries whose allocator stayed locked (not in the bytes)
  std::size_t thread_records = 0;      // in use (threads alive that entered luma)
  std::size_t thread_records_made = 0; // the most alive at once
  std::size_t streams = 0;             // non-blocking streams tracked
  std::size_t captures = 0;            // captures (and context ends) announced, not ended
  std::size_t trace_sinks = 0;         // made (in use or spare)
  std::size_t oom_sinks = 0;
  std::size_t bytes = 0;               // all of the above, in host bytes
};

// What the process's registries hold now (a grace section and the table's lock are taken
// inside: the caller holds no lock of luma's).
Footprint footprint(const ContextTable& contexts, const StreamRegistry& streams,
                    const CaptureRegistry& captures, const TraceRecorder& recorder,
                    const OomWatch& oom) noexcept;
std::string footprint_json(const Footprint& f);

}  // namespace luma::shim
