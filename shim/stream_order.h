// stream_order.h - whether every use of the process's device memory is, so far, in the
// order of one stream: then a freed block may be reused at once, as PyTorch reuses a block
// freed on a stream for later work on that stream, and no fence is needed
// (docs/architecture.md, "Stream-ordered reuse", has the rule and its proof).
//
// Two orders. The one-thread order holds while the process has one context, the program
// made no stream of its own (cuStreamCreate, cuStreamCreateWithPriority,
// cuGreenCtxStreamCreate) and one thread only has made a context current: every operation is then on that context's legacy
// stream or on that thread's per-thread default stream, which synchronize with each other
// (a per-thread default stream is a blocking stream), so all of them run in the order
// they were issued. A second thread could use a per-thread default stream of its own
// through entry points luma does not hook (every launch and copy has a _ptsz twin), and
// two per-thread streams are not ordered: so a second thread ends the order too. The
// legacy order drops the one-thread condition and allows blocking streams: a barrier on
// the legacy stream then orders every use before it before every use after it (legacy()).
// The
// first observation that breaks it ends it for good (one log line at info level); every
// allocator then fences its frees as before, and the context is synchronized before the
// hook that saw the end returns, so that work issued before the frees of blocks reused at
// once has run before any work of the new kind exists (serve.cpp, stream_order_ended).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>

#include "cuda_abi.h"

namespace luma::shim {

class StreamOrder {
 public:
  // `enabled`: LUMA_CONF stream_ordered_reuse (and free_sync:event; other modes need none).
  void set_enabled(bool enabled) noexcept {
    single_.store(enabled, std::memory_order_release);
    legacy_.store(enabled, std::memory_order_release);
  }
  // Whether a free may be reused at once now, with no driver call (the one-thread order).
  bool single() const noexcept { return single_.load(std::memory_order_acquire); }
  // Whether the legacy order holds: one context, and no stream of the program's that takes
  // no part in the legacy stream's synchronization (a non-blocking or a green context's
  // stream), whatever the threads. A free is then reusable once one action on the legacy
  // stream was issued after it (DriverDevice::record_fence): docs/architecture.md,
  // "Stream-ordered reuse", "Several threads".
  bool legacy() const noexcept { return legacy_.load(std::memory_order_acquire); }

  // Held by a legacy barrier from its check of legacy() to the driver's answer: the end of
  // the legacy order waits for it, so the synchronization that follows the end covers
  // every barrier's work (shared; re-entrancy not needed: a barrier takes no other Hold).
  [[nodiscard]] std::shared_lock<std::shared_mutex> hold() const noexcept {
    return std::shared_lock<std::shared_mutex>(gate_);
  }

  // Both orders end, for `why` (a non-blocking stream, a green context's stream, a capture):
  // true the first time either ended here (the caller then turns every allocator's reuse
  // off and synchronizes: serve.cpp, stream_order_ended), false after.
  bool end(const char* why) noexcept;
  // Only the one-thread order ends (a blocking stream of the program's, a second thread):
  // the legacy order goes on. True the first time.
  bool end_single(const char* why) noexcept;
  // The calling thread `thread` has `ctx` current (made so, or found so): a second context
  // ends both orders, a second thread the one-thread order.
  bool saw_current(CUcontext ctx, std::uint64_t thread) noexcept;
  // A number for the calling thread, never reused in the process (a TLS address can be).
  static std::uint64_t thread_number() noexcept;

 private:
  std::atomic<bool> single_{false};
  std::atomic<bool> legacy_{false};
  mutable std::shared_mutex gate_;  // legacy barriers (shared) against the legacy order's end
  std::atomic<CUcontext> first_ctx_{nullptr};
  std::atomic<std::uint64_t> first_thread_{0};
};

}  // namespace luma::shim
