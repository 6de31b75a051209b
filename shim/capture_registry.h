// capture_registry.h - the stream captures underway in the process (CUDA graphs), as luma
// saw them begin and end, and the driver's rules for which calls a capture forbids
// (docs/cuda-facts.md, "Stream capture"). luma asks it before every call of its own that
// a capture could refuse or be invalidated by (an event record or query, a
// synchronization, a segment release) and before serving the program's cuMemAlloc /
// cuMemFree, which the driver refuses in some captures.
//
// Pure: no driver calls, no CUDA headers beyond opaque handles, so tests/shim can check
// the rules alone. The common case - no capture anywhere - is one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "cuda_abi.h"

namespace luma::shim {

// CUstreamCaptureMode's values (cuda.h).
enum class CaptureMode : int { global = 0, thread_local_mode = 1, relaxed = 2 };

class CaptureRegistry {
 public:
  // A capture began on `stream` of `ctx` in `mode`, on the calling thread `thread`.
  // Nothing about the stream is asked of the driver: a query about a capturing stream
  // (cuStreamGetFlags) is refused and invalidates the capture (docs/cuda-facts.md), and
  // luma needs no more than this - it makes no fence, wait or release in a context while
  // any of its streams captures, blocking or not.
  void begin(CUcontext ctx, CUstream stream, CaptureMode mode, std::uint64_t thread);
  // The capture on `stream` ended (cuStreamEndCapture, whatever it returned) or the stream
  // went away. Unknown streams are ignored.
  void end(CUstream stream) noexcept;
  // The context is gone, its captures with it.
  void end_context(CUcontext ctx) noexcept;

  // Whether any capture is underway in the process: the fast check.
  bool any() const noexcept { return count_.load(std::memory_order_acquire) != 0; }
  // Whether a capture is underway in ctx (luma then records no fence, makes no
  // synchronization and releases no segment there).
  bool any_in(CUcontext ctx) const;
  // Whether `stream` is capturing.
  bool capturing(CUstream stream) const;
  // Whether the driver refuses a "potentially unsafe" call (cuMemAlloc, cuMemFree, a
  // synchronization, an event query) made now by `thread`, whose own mode
  // (cuThreadExchangeStreamCaptureMode) is `thread_mode`: a global-mode thread is refused
  // while any global-mode capture is underway or while it has a thread-local capture of
  // its own; a thread-local-mode thread only for its own global or thread-local captures;
  // a relaxed thread never.
  bool forbids_unsafe_call(std::uint64_t thread, CaptureMode thread_mode) const;

 private:
  struct Capture {
    CUcontext ctx;
    CUstream stream;
    CaptureMode mode;
    std::uint64_t thread;
  };
  mutable std::mutex mutex_;
  std::vector<Capture> captures_;  // few: a flat list
  std::atomic<std::size_t> count_{0};
};

// The calling thread's capture mode as the program set it (cuThreadExchangeStreamCaptureMode
// is hooked to keep it); global until changed. Thread-local, initial-exec.
CaptureMode& thread_capture_mode() noexcept;
// An id of the calling thread that stays valid while it runs (its TLS block's address).
std::uint64_t this_thread_id() noexcept;

}  // namespace luma::shim
