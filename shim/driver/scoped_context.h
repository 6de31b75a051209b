// scoped_context.h - makes a context current on the calling thread for a scope, when another
// one (or none) is: a free may come from any thread with any current device, and luma's own
// driver calls for a context (its allocations, events, synchronizations) must run in it.
// The previous context is current again at the end of the scope.
#pragma once

#include "driver/real_driver.h"

namespace luma::shim {

class ScopedContext {
 public:
  ScopedContext(const RealDriver& d, CUcontext ctx) noexcept : d_(d) {
    CUcontext current = nullptr;
    if (d_.ctx_get_current(&current) == CUDA_SUCCESS && current == ctx) return;
    error_ = d_.ctx_push_current(ctx);
    ok_ = error_ == CUDA_SUCCESS;
    pushed_ = ok_;
  }
  ~ScopedContext() {
    if (!pushed_) return;
    CUcontext popped = nullptr;
    d_.ctx_pop_current(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

  // False when ctx could not be made current (a destroyed context, a lost device).
  bool ok() const noexcept { return ok_; }
  int error() const noexcept { return static_cast<int>(error_); }  // when !ok()

 private:
  const RealDriver& d_;
  bool pushed_ = false;
  bool ok_ = true;
  CUresult error_ = CUDA_SUCCESS;
};

}  // namespace luma::shim
