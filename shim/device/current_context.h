// current_context.h - the context current on each thread, as luma saw it made current, so
// that an allocation costs no driver call to learn it. On a real driver cuCtxGetCurrent
// is an API entry like any other (the H200 measured every luma driver call at 200-300 ns,
// the pair at 281 ns against 75-85 ns on the stand-in, where the query is nearly free):
// per allocation it was most of luma's cost.
//
// A thread's current context changes only through the calls that set, push, pop, create,
// attach or detach a context, or destroy one (cuda.h, "Context Management"); luma hooks
// every ABI of each (entry_points.h) and keeps what each leaves current:
//   cuCtxSetCurrent, cuCtxPushCurrent(_v2)        -> that context (remembered)
//   cuCtxPopCurrent(_v2), cuCtxCreate(_v2/_v3/_v4) -> this thread's entry forgotten: the
//       next allocation asks the driver once
//   cuCtxDestroy(_v2), cuCtxAttach, cuCtxDetach, a primary context's reset or last
//       release -> every thread's entry forgotten (a context current elsewhere may be gone)
// A thread that never made a context current through luma asks the driver, once. A
// request for a context call at an ABI luma does not hook (a newer one than it knows)
// turns tracking off for the process (every allocation asks the driver, as before): luma
// never trusts what it could not have seen.
#pragma once

#include <atomic>
#include <cstdint>

#include "driver/cuda_abi.h"

namespace luma::shim {

class CurrentContext {
 public:
  // The calling thread's current context if luma knows it (true), else false.
  [[gnu::always_inline]] static bool known(CUcontext* ctx) noexcept {
    const Entry& e = entry();
    if (!e.valid || e.generation != generation_.load(std::memory_order_acquire)) return false;
    *ctx = e.ctx;
    return true;
  }
  // The driver said, or a hook made, `ctx` current on this thread.
  static void remember(CUcontext ctx) noexcept {
    if (!tracking_.load(std::memory_order_relaxed)) return;
    Entry& e = entry();
    e.ctx = ctx;
    e.generation = generation_.load(std::memory_order_acquire);
    e.valid = true;
  }
  // This thread's current context changed in a way luma does not follow (a pop, a create).
  static void forget_here() noexcept { entry().valid = false; }
  // Some thread's current context may have become another, or a destroyed one.
  static void forget_everywhere() noexcept { generation_.fetch_add(1, std::memory_order_acq_rel); }
  // A context call luma does not see could be made: ask the driver from now on.
  static void stop_tracking() noexcept {
    tracking_.store(false, std::memory_order_relaxed);
    forget_everywhere();
  }
  static bool tracking() noexcept { return tracking_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    CUcontext ctx = nullptr;
    std::uint64_t generation = 0;
    bool valid = false;
  };
  static Entry& entry() noexcept;
  static std::atomic<std::uint64_t> generation_;
  static std::atomic<bool> tracking_;
};

// Whether `name` is a driver call that may change a thread's current context (the list
// above): a request for it at an ABI luma does not hook stops the tracking.
bool changes_current_context(const char* name) noexcept;

}  // namespace luma::shim
