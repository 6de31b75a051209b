// call_context.h - what the hook now running on this thread knows and the allocator does
// not: which entry point the program called, the stream, and (with LUMA_TRACE_STACKS) the
// program's call stack and its Python frames (python_frames.h), captured at hook entry before any lock is taken. The trace
// recorder reads it when the allocator reports an event (inside the allocator's lock).
// Thread-local with the initial-exec model (libluma.so is preloaded), so a read is one
// instruction; it must never allocate.
#pragma once

#include <cstdint>

#include "python/python_frames.h"
#include "config/settings.h"
#include "trace/trace_format.h"

namespace luma::shim {

struct CallContext {
  core::trace::EntryPoint entry = core::trace::EntryPoint::internal;
  std::uint64_t stream = 0;
  std::uint32_t depth = 0;  // frames in stack (0: none captured for this call)
  std::uint64_t stack[kMaxTraceStacks] = {};
  std::uint32_t python_depth = 0;  // frames in python (0: none)
  PythonFrameRef python[kMaxPythonFramesSetting] = {};
};

// This thread's context: constant-initialised TLS, so no constructor or guard runs.
inline thread_local CallContext t_call_context [[gnu::tls_model("initial-exec")]];
inline CallContext& call_context() noexcept { return t_call_context; }

// Marks the scope of one hook: the entry point is restored (to internal) on exit.
class CallScope {
 public:
  explicit CallScope(core::trace::EntryPoint entry, std::uint64_t stream = 0) noexcept
      : c_(call_context()) {
    c_.entry = entry;
    c_.stream = stream;
    c_.depth = 0;
    c_.python_depth = 0;
  }
  ~CallScope() {
    c_.entry = core::trace::EntryPoint::internal;
    c_.depth = 0;
    c_.python_depth = 0;
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  CallContext& c_;
};

}  // namespace luma::shim
