// trace_sink.h - for tests: an EventSink that writes every allocator event to a
// TraceWriter, asking an EventContextSource (the test's: thread id, stream, entry point,
// clock, call-site stack) for what the allocator does not know. The shim's own seam is
// shim/observe/trace_event_sink.h; this one lets core-only tests record traces without the shim.
// Adds no locking and no allocation of its own.
#pragma once

#include <cstdint>
#include <span>

#include "base/event.h"
#include "trace/trace_writer.h"

namespace luma::core {

struct EventContext {
  std::uint64_t thread = 0;
  std::uint64_t stream = 0;
  trace::EntryPoint entry = trace::EntryPoint::unknown;
  std::uint64_t time_ns = 0;                // on the clock of the header's clock_base_ns
  std::span<const std::uint64_t> stack{};   // allocs only; must stay valid during on_event
};

class EventContextSource {
 public:
  virtual ~EventContextSource() = default;
  // The context of the call now being served on this thread. Called inside the
  // allocator's lock: must be fast and must not call into the allocator.
  virtual EventContext current(const Event& event) noexcept = 0;
};

class TraceSink final : public EventSink {
 public:
  TraceSink(TraceWriter& writer, EventContextSource& context) noexcept
      : writer_(writer), context_(context) {}
  void on_event(const Event& event) noexcept override {
    const EventContext c = context_.current(event);
    writer_.write(event, c.thread, c.stream, c.entry, c.time_ns, c.stack);
  }

 private:
  TraceWriter& writer_;
  EventContextSource& context_;
};

}  // namespace luma::core
