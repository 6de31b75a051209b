// recursion_guard.h - a thread-local "luma is already working on this thread" flag.
// Every hook takes the guard before doing anything; a hook entered while the guard is held
// (the real driver calling back through an exported symbol, a logger calling dlsym, luma's
// own initialisation) forwards straight to the real driver and never re-enters the cache.
// The outermost guard of a thread is also its read section for grace periods
// (grace_periods.h): a context entry this hook may load is not freed until it returns.
// Must never allocate or call anything (but a thread's first entry, which takes its grace
// record): it is read on every intercepted call.
#pragma once

#include "threads/grace_periods.h"

namespace luma::shim {

class RecursionGuard {
 public:
  [[gnu::always_inline]] RecursionGuard() noexcept : was_active_(active_) {
    active_ = true;
    if (!was_active_) GracePeriods::enter();
  }
  [[gnu::always_inline]] ~RecursionGuard() {
    if (!was_active_) GracePeriods::leave();
    active_ = was_active_;
  }
  RecursionGuard(const RecursionGuard&) = delete;
  RecursionGuard& operator=(const RecursionGuard&) = delete;

  // True when this thread is already inside luma (so the caller must forward).
  static bool active() noexcept { return active_; }

 private:
  // initial-exec: libluma.so is preloaded, so its TLS lives in the static block and a read
  // is one instruction, with no __tls_get_addr call (which could itself allocate).
  static inline thread_local bool active_ [[gnu::tls_model("initial-exec")]] = false;
  bool was_active_;
};

}  // namespace luma::shim
