// footprint.cpp - luma's own records counted (footprint.h), and the exported
// luma_footprint() that hands them to a program as one JSON object.
#include "footprint.h"

#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "grace_periods.h"
#include "recursion_guard.h"
#include "shim_state.h"

namespace luma::shim {

Footprint footprint(const State& s) noexcept {
  Footprint f;
  const ContextCounts c = s.contexts.counts();
  f.contexts_made = c.made;
  f.contexts_live = c.live;
  f.contexts_graveyard = c.graveyard;
  f.devices_folded = c.folded;
  try {
    // An allocator's lock may be held for good (a fence wait on work that never ends):
    // waited for a short while, then left out and counted as busy.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    s.contexts.for_each_held([&](const ContextEntry& e) {
      std::size_t bytes = 0;
      if (e.allocator.cache().try_host_bytes(&bytes, deadline)) f.context_bytes += sizeof(ContextEntry) + bytes;
      else ++f.contexts_busy;
    });
  } catch (...) {  // the table's lock could not be taken: counts only
  }
  f.thread_records = GracePeriods::records_in_use();
  f.thread_records_made = GracePeriods::records_made();
  f.streams = s.streams.size();
  f.captures = s.captures.tracked();
  f.trace_sinks = s.recorder.sinks_made();
  f.oom_sinks = s.oom.sinks();
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

// luma_footprint(buf, size): luma's records now, as a JSON object, written into buf
// (NUL-terminated, cut to size); returns the length the whole text needs, like snprintf,
// or 0 before luma served anything. A program asks it through dlsym(RTLD_DEFAULT, ...).
extern "C" [[gnu::visibility("default")]] std::size_t luma_footprint(char* buf, std::size_t size) noexcept {
  using namespace luma::shim;
  State* s = state_if_ready();
  if (s == nullptr) return 0;
  RecursionGuard guard;  // a grace section, and no hook of this thread comes back in
  try {
    const std::string text = footprint_json(footprint(*s));
    if (buf != nullptr && size > 0) {
      const std::size_t n = std::min(size - 1, text.size());
      std::memcpy(buf, text.data(), n);
      buf[n] = '\0';
    }
    return text.size();
  } catch (...) {
    return 0;
  }
}
