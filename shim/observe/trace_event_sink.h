// trace_event_sink.h - the EventSink libluma.so attaches to each allocator when LUMA_TRACE
// is on: the hot path of recording. One virtual call from the allocator (under its
// per-device lock) lands in on_event, which does everything else inline: the exit gate,
// this thread's call context (entry point, stream, stack), the thread id, the clock, and
// TraceWriter::write's common case. Kept apart from trace_recorder.h (which opens and
// closes the trace) so tests/bench/bench_trace can measure exactly what the shim runs.
//
// The exit gate: each sink marks itself busy around every event (events of one allocator
// arrive one at a time, under its lock, so a plain flag per sink is enough). The closer
// raises `stopping`, then waits until no sink is busy. Writer: store busy, load stopping;
// closer: store stopping, load busy - a Dekker pair that needs a full fence on both sides.
// The writer's side is made free with membarrier(PRIVATE_EXPEDITED): the closer's one
// system call fences every running thread, so the hot path needs only a compiler barrier.
// Without membarrier the writer pays a real fence (a sequentially consistent exchange).
//
// Must never: block, allocate, make a system call (but the first event of a thread, which
// asks the kernel for its id), or call into the allocator.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>

#include "observe/call_context.h"
#include "base/event.h"
#include "device/event_clock.h"
#include "trace/trace_writer.h"

namespace luma::shim {

// The OS thread id, cached per thread (initial-exec TLS: libluma.so is preloaded).
inline thread_local std::uint64_t t_trace_thread_id [[gnu::tls_model("initial-exec")]] = 0;
inline std::uint64_t trace_thread_id() noexcept {
  if (t_trace_thread_id == 0) [[unlikely]]
    t_trace_thread_id = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  return t_trace_thread_id;
}

// Shared by every sink of one trace: raised once, at exit (or in a fork child).
struct TraceGate {
  std::atomic<bool> stopping{false};
  bool membarrier = false;  // registered for MEMBARRIER_CMD_PRIVATE_EXPEDITED
};

class TraceEventSink final : public core::EventSink {
 public:
  TraceEventSink(core::TraceWriter& writer, const EventClock& clock,
                 const TraceGate& gate) noexcept
      : writer_(writer), clock_(clock), gate_(gate) {}

  TraceEventSink* next = nullptr;  // the sink made before this one (TraceRecorder's list)

  void on_event(const core::Event& e) noexcept override {
    bool stopping;
    if (gate_.membarrier) [[likely]] {
      busy_.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the closer's membarrier fences
      stopping = gate_.stopping.load(std::memory_order_relaxed);
    } else {
      busy_.exchange(1, std::memory_order_seq_cst);  // a store with a full fence
      stopping = gate_.stopping.load(std::memory_order_seq_cst);
    }
    if (!stopping) [[likely]] {
      const CallContext& c = call_context();
      if ((c.depth | c.python_depth) > 0 && e.kind == core::EventKind::alloc) [[unlikely]]
        write_with_call_site(e, c);
      else
        writer_.write(e, trace_thread_id(), c.stream, c.entry, clock_.now());
    }
    busy_.store(0, std::memory_order_release);
  }

  // An alloc with its native stack and Python frames (the names are interned for the
  // life of the process: python_frames.h).
  [[gnu::noinline]] void write_with_call_site(const core::Event& e, const CallContext& c) noexcept {
    core::PythonFrame python[kMaxPythonFramesSetting];
    const std::uint32_t n = std::min<std::uint32_t>(c.python_depth, kMaxPythonFramesSetting);
    for (std::uint32_t k = 0; k < n; ++k)
      python[k] = {c.python[k].site->file, c.python[k].site->function, c.python[k].line};
    writer_.write(e, trace_thread_id(), c.stream, c.entry, clock_.now(), {c.stack, c.depth},
                  {python, n});
  }

  // True while an event is being recorded (the closer waits for it).
  bool busy() const noexcept { return busy_.load(std::memory_order_seq_cst) != 0; }

 private:
  core::TraceWriter& writer_;
  const EventClock& clock_;
  const TraceGate& gate_;
  std::atomic<std::uint32_t> busy_{0};
};

}  // namespace luma::shim
