// stream_order.h - the process's free path (core/free_path: at once, after a legacy-stream
// barrier, or fenced), kept from what the hooks observe: the facts go in, the one rule
// (core::decide_free_path, also `luma simulate`'s) says which path holds, and the hot path
// reads the answer from two flags (docs/architecture.md, "Stream-ordered reuse", has the
// rule and its proof).
//
// At once (single()): one context, no stream of the program's own (cuStreamCreate,
// cuStreamCreateWithPriority, cuGreenCtxStreamCreate), and one thread only has made a
// context current: every operation is then on that context's legacy stream or on that
// thread's per-thread default stream, which synchronize with each other, so all of them
// run in the order they were issued. A second thread could use a per-thread default
// stream of its own through entry points luma does not hook (every launch and copy has a
// _ptsz twin), and two per-thread streams are not ordered: so a second thread ends it.
// Legacy (legacy()): drops the one-thread condition and allows blocking streams: a barrier
// on the legacy stream then orders every use before it before every use after it.
// A path once left is never taken again (one log line at info level); when a path ends,
// every allocator fences its frees as the new path says, and the context is synchronized
// before the hook that saw the end returns, so that work issued before the frees of blocks
// reused at once has run before any work of the new kind exists (serve.cpp,
// stream_order_ended).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>

#include "driver/cuda_abi.h"
#include "free_path/free_path.h"

namespace luma::shim {

class StreamOrder {
 public:
  // `enabled`: LUMA_CONF stream_ordered_reuse (and free_sync:event; other modes need none).
  void set_enabled(bool enabled) noexcept;
  // Whether a free may be reused at once now, with no driver call (the at-once path).
  bool single() const noexcept { return single_.load(std::memory_order_acquire); }
  // Whether the legacy order holds (the at-once or the legacy path): one context, and no
  // stream of the program's that takes no part in the legacy stream's synchronization,
  // whatever the threads. A free is then reusable once one action on the legacy stream was
  // issued after it (DriverDevice::record_fence): docs/architecture.md,
  // "Stream-ordered reuse", "Several threads".
  bool legacy() const noexcept { return legacy_.load(std::memory_order_acquire); }
  // The path now, and why (the rule's answer for the facts seen so far).
  core::FreePathDecision decision() const noexcept;

  // Held by a legacy barrier from its check of legacy() to the driver's answer: the end of
  // the legacy order waits for it, so the synchronization that follows the end covers
  // every barrier's work (shared; re-entrancy not needed: a barrier takes no other Hold).
  [[nodiscard]] std::shared_lock<std::shared_mutex> hold() const noexcept {
    return std::shared_lock<std::shared_mutex>(gate_);
  }

  // The program showed `fact`: true when the path changed (the caller then turns every
  // allocator's reuse at once off and synchronizes: serve.cpp, stream_order_ended).
  bool observe(core::FreePathFact fact) noexcept;
  // The calling thread `thread` has `ctx` current (made so, or found so; nullptr: a
  // context, not known which): a second context or a second thread is a fact.
  bool saw_current(CUcontext ctx, std::uint64_t thread) noexcept;
  // A number for the calling thread, never reused in the process (a TLS address can be).
  static std::uint64_t thread_number() noexcept;

 private:
  // Sets the flags from the rule's answer for facts_; under facts_m_. True when changed.
  bool apply(core::FreePathDecision was) noexcept;

  std::atomic<bool> single_{false};
  std::atomic<bool> legacy_{false};
  mutable std::shared_mutex gate_;  // legacy barriers (shared) against the legacy order's end
  mutable std::mutex facts_m_;      // observations are rare: one lock keeps facts and flags together
  core::FreePathFacts facts_{false, 0};
  std::atomic<CUcontext> first_ctx_{nullptr};
  std::atomic<std::uint64_t> first_thread_{0};
};

}  // namespace luma::shim
