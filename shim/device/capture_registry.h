// capture_registry.h - the stream captures underway in the process (CUDA graphs), as luma
// saw them begin and end, and the driver's rules for which calls a capture forbids
// (docs/cuda-facts.md, "Stream capture"). luma asks it before every call of its own that
// a capture could refuse or be invalidated by (an event record or query, a
// synchronization, a segment release) and before serving the program's cuMemAlloc /
// cuMemFree, which the driver refuses in some captures. A context being destroyed is
// announced here too: no call of luma's may name it from then on (docs/architecture.md,
// "Contexts destroyed by another thread"), and every check that keeps luma's calls out of
// a capturing context keeps them out of that one.
//
// Pure: no driver calls, no CUDA headers beyond opaque handles, so tests/shim can check
// the rules alone. The common case - no capture anywhere - is one relaxed atomic load, and
// a shared lock around each of luma's own capture-sensitive driver calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "driver/cuda_abi.h"

namespace luma::shim {

// CUstreamCaptureMode's values (cuda.h).
enum class CaptureMode : int { global = 0, thread_local_mode = 1, relaxed = 2 };

class CaptureRegistry {
 public:
  class Hold;

  // A capture is about to begin on `stream` of `ctx` in `mode`, on the calling thread
  // `thread`: announced BEFORE the driver is asked to begin it, so no call of luma's lands
  // in a capture luma has not seen begin (docs/architecture.md, "Stream capture"). Waits
  // until no other thread is inside a Hold: every call luma decided to make without knowing
  // of this capture has landed before the capture can start. Returns a ticket for
  // withdraw(). Throws std::bad_alloc. Nothing about the stream is asked of the driver: a
  // query about a capturing stream (cuStreamGetFlags) is refused and invalidates the
  // capture (docs/cuda-facts.md), and luma needs no more than this - it makes no fence,
  // wait or release in a context while any of its streams captures, blocking or not.
  std::uint64_t announce(CUcontext ctx, CUstream stream, CaptureMode mode, std::uint64_t thread);
  // The driver refused to begin the announced capture: it never was.
  void withdraw(std::uint64_t ticket) noexcept;
  // The capture on `stream` ended (cuStreamEndCapture returned, whatever it answered) or
  // the stream went away: its oldest announcement goes (a capture begun on the stream by
  // another thread once this one ended is announced after it, and stays). Unknown streams
  // are ignored.
  void end(CUstream stream) noexcept;
  // The context is gone, its captures with it (and its announced end, below).
  void end_context(CUcontext ctx) noexcept;
  // ctx is about to be destroyed (cuCtxDestroy, a primary context's reset or release):
  // announced BEFORE the driver is asked, as a capture is, and waiting in the same way for
  // every Hold to end. From then until end_context(ctx) (the destruction succeeded, after
  // luma forgot the context) or withdraw() (refused), any_in(ctx) is true, so luma makes no
  // fence, query, synchronization or release there; capturing(), end() and
  // forbids_unsafe_call() do not see it (no stream captures). Throws std::bad_alloc.
  std::uint64_t announce_context_end(CUcontext ctx);

  // Held across every call luma makes on its own that a capture could refuse or be
  // invalidated by, from the check of this registry that decided it to the driver's
  // answer: announce() waits for every Hold to end, so the check and the call see the same
  // captures. Re-entrant on a thread (a nested Hold of the same registry costs nothing).
  [[nodiscard]] Hold hold() const noexcept;

  // Whether any capture is underway (or announced) in the process: the fast check.
  bool any() const noexcept { return count_.load(std::memory_order_acquire) != 0; }
  // Captures (and context destructions) announced and not yet ended: luma's records.
  std::size_t tracked() const noexcept { return count_.load(std::memory_order_acquire); }
  // Whether a capture is underway in ctx, or ctx is being destroyed (luma then records no
  // fence, makes no synchronization and releases no segment there).
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
    std::uint64_t ticket;
    bool context_ending;  // not a capture: ctx is being destroyed (announce_context_end)
  };
  std::uint64_t add(const Capture& c);
  // Shared by Holds, exclusive for an announcement. glibc's default read-write lock
  // prefers readers: a Hold taken while an announcement waits never blocks, so a thread
  // that holds the allocator's lock and then a Hold cannot deadlock against one that
  // holds a Hold and wants the allocator's lock.
  mutable std::shared_mutex gate_;
  mutable std::mutex mutex_;  // guards captures_
  std::vector<Capture> captures_;  // few: a flat list, in the order announced
  std::uint64_t next_ticket_ = 0;
  std::atomic<std::size_t> count_{0};
};

class [[nodiscard]] CaptureRegistry::Hold {
 public:
  explicit Hold(const CaptureRegistry& r) noexcept;
  ~Hold();
  Hold(const Hold&) = delete;  // made in place (hold() returns a prvalue): never moved
  Hold& operator=(const Hold&) = delete;

 private:
  std::shared_mutex* gate_ = nullptr;  // locked shared by this Hold; nullptr: nested
  bool outermost_ = false;             // this Hold started the thread's holding of r
};

inline CaptureRegistry::Hold CaptureRegistry::hold() const noexcept { return Hold(*this); }

// The calling thread's capture mode as the program set it (cuThreadExchangeStreamCaptureMode
// is hooked to keep it); global until changed. Thread-local, initial-exec.
CaptureMode& thread_capture_mode() noexcept;
// An id of the calling thread that stays valid while it runs (its TLS block's address).
std::uint64_t this_thread_id() noexcept;

}  // namespace luma::shim
