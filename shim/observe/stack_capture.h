// stack_capture.h - LUMA_TRACE_STACKS: the program's return addresses at an allocating
// hook, taken with glibc's backtrace() (libgcc's DWARF unwinder: no frame pointers needed,
// nothing beyond the C runtime), with libluma.so's own frames on top skipped. Header-only
// so that tests/bench/bench_trace measures exactly what the shim runs.
//
// Cost: backtrace() unwinds every frame it returns, about 0.2 us each on the VM of the
// figures in docs/trace-format.md, so the capture asks for the N frames wanted plus only
// as many of libluma.so's frames as were ever seen on top (plus one, to notice a deeper
// path), not a fixed allowance. libunwind's unw_backtrace is several times faster but
// Debian ships it only as a shared library or a non-PIC archive, which cannot be linked
// into libluma.so: it would be a new run-time dependency of every traced program.
//
// Must never: allocate, lock, or be called before configure() (its first backtrace() call
// loads libgcc_s, which must not happen inside a hook).
#pragma once

#include <execinfo.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "observe/call_context.h"
#include "config/settings.h"

namespace luma::shim {

class StackCapture {
 public:
  // libluma.so's own frames above the program's: at most this many are skipped.
  static constexpr int kOwnFramesMax = 8;

  // `depth`: frames kept per capture (0: off); [own_lo, own_hi): the addresses of the
  // library whose frames are skipped (libluma.so; empty in the benchmark).
  void configure(unsigned depth, std::uintptr_t own_lo, std::uintptr_t own_hi) noexcept {
    depth_ = std::min(depth, kMaxTraceStacks);
    own_lo_ = own_lo;
    own_hi_ = own_hi;
    if (depth_ > 0) {
      void* frames[4];
      (void)backtrace(frames, 4);  // loads libgcc_s now
    }
  }
  unsigned depth() const noexcept { return depth_; }

  // Fills c.stack / c.depth with up to depth() return addresses, innermost first. Always
  // inlined: the caller's frame is the first one backtrace() reports, so the code asking
  // for the stack is where the range check starts.
  [[gnu::always_inline]] void capture(CallContext& c) noexcept {
    c.depth = 0;
    if (depth_ == 0) return;
    const int seen = own_seen_.load(std::memory_order_relaxed);
    const int own = seen == 0 && own_hi_ > own_lo_ ? kOwnFramesMax
                                                   : std::min(seen + 1, kOwnFramesMax);
    void* frames[kMaxTraceStacks + kOwnFramesMax];
    const int n = backtrace(frames, static_cast<int>(depth_) + own);
    // The program's frames start after the last of our own among the first `own`: a
    // sanitizer's backtrace() interceptor reports a frame of its own before ours.
    int i = 0;
    for (int k = 0; k < n && k < own; ++k) {
      const auto a = reinterpret_cast<std::uintptr_t>(frames[k]);
      if (a >= own_lo_ && a < own_hi_) i = k + 1;
    }
    if (i > seen) own_seen_.store(i, std::memory_order_relaxed);  // races are benign
    std::uint32_t k = 0;
    for (; i < n && k < depth_; ++i, ++k) c.stack[k] = reinterpret_cast<std::uintptr_t>(frames[i]);
    c.depth = k;
  }

 private:
  unsigned depth_ = 0;
  std::uintptr_t own_lo_ = 0, own_hi_ = 0;
  std::atomic<int> own_seen_{0};  // most of our own frames seen atop a stack so far
};

}  // namespace luma::shim
