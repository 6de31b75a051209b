// trace_recorder.h - LUMA_TRACE: records every allocator event of the process into one
// trace file (core::TraceWriter, docs/trace-format.md) through a TraceEventSink per
// allocator (trace_event_sink.h: the hot path), which adds the thread, stream, entry
// point, time and (LUMA_TRACE_STACKS) call stack of the hook being served.
//
// The file is opened when the first context's allocator is built (so cuInit has run and
// the header can name the devices, and a process that never allocates writes no file).
// Each allocator gets its own gated sink, attached before the allocator is published.
// At exit the gate closes (no new event is recorded) and the writer is closed once every
// event in flight finished; a fork child forked after the trace opened never writes or
// closes the parent's file; a name in use by another live process (no %p in the pattern,
// an exec'd child) is never truncated: this process writes NAME.PID instead.
// Never throws; a trace that cannot be opened logs one line and the program runs on.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/event_clock.h"
#include "python/python_frames.h"
#include "driver/real_driver.h"
#include "config/settings.h"
#include "observe/stack_capture.h"
#include "trace/trace_writer.h"
#include "observe/trace_event_sink.h"

namespace luma::shim {

class TraceRecorder {
 public:
  // At the one-time initialisation: what to record. Warms glibc's backtrace() (its first
  // call loads libgcc_s, which must not happen inside a hook) when stacks are wanted
  // (stack_capture.h).
  void configure(const ShimSettings& settings, const std::string& settings_text) noexcept;
  bool wanted() const noexcept { return !pattern_.empty(); }
  unsigned stack_depth() const noexcept { return stack_depth_; }

  // For a context's allocator being built (ContextTable's lock held): opens the trace on
  // the first call and returns the sink to attach, or nullptr when nothing is recorded.
  // A sink an ended context's allocator no longer calls (its grace period passed) is
  // given back and serves the next allocator: sinks are bounded by the contexts alive.
  core::EventSink* sink_for_new_allocator(const RealDriver& driver) noexcept;
  void give_back(core::EventSink* sink) noexcept;
  // Sinks made (alive at once, at most) and given back (waiting for a new allocator).
  std::size_t sinks_made() const noexcept { return sinks_made_.load(std::memory_order_relaxed); }
  std::size_t sinks_spare() const noexcept;

  // A call luma forwarded to the driver (forwarded_calls.h): recorded with this thread and
  // the time; opens the trace on the first call when no allocator opened it (a program
  // luma serves nothing for still gets its trace).
  void record_forwarded(const RealDriver& driver, core::trace::ForwardedCall call) noexcept;

  // In an allocating hook, before the allocator is called: the program's return
  // addresses into call_context() (frames inside libluma.so skipped), and its Python
  // frames, GIL held or not (python_frames.h).
  void capture_stack() noexcept;

  // At exit (after the statistics): stop recording, wait for events in flight, close.
  void close_at_exit() noexcept;
  // In a forked child: the parent's trace is not the child's; never touch it again.
  void detach_in_child() noexcept;

  // The file written ("" when none).
  const std::string& path() const noexcept { return path_; }

 private:
  bool open(const RealDriver& driver) noexcept;
  core::TraceHeader make_header(const RealDriver& driver) const;

  std::string pattern_;
  std::string settings_text_;
  unsigned stack_depth_ = 0;
  mutable std::mutex open_mutex_;  // open(): taken inside ContextTable's lock, never around it
  bool tried_ = false;     // open() ran (open_mutex_)
  // writer_ once open() made it: what forwarded calls write to without the mutex.
  std::atomic<core::TraceWriter*> open_writer_{nullptr};
  // Forwarded calls being recorded (the exit gate's count for them, like a sink's busy).
  std::atomic<std::uint32_t> forwarded_busy_{0};
  std::string path_;
  EventClock clock_;
  std::unique_ptr<core::TraceWriter> writer_;
  // Every sink made, newest first (one per allocator alive, or spare; never freed: the
  // exit gate walks them without a lock).
  std::atomic<TraceEventSink*> sinks_{nullptr};
  std::atomic<std::size_t> sinks_made_{0};
  std::vector<TraceEventSink*> spare_;  // given back (open_mutex_)
  TraceGate gate_;  // stopping + membarrier (see trace_event_sink.h)
  std::atomic<bool> detached_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> open_failed_{false};  // no trace this process: capture no stacks
  StackCapture stacks_;  // LUMA_TRACE_STACKS
  PythonFrames python_;  // LUMA_TRACE_PYTHON (with LUMA_TRACE_STACKS)
};

}  // namespace luma::shim
