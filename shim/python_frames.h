// python_frames.h - the Python call site of an allocation: when the program is a CPython
// interpreter (or embeds one) and the allocating thread holds the GIL, the file, function
// and line of each of its Python frames, innermost first, recorded with the native stack
// (LUMA_TRACE_STACKS, LUMA_TRACE_PYTHON; docs/trace-format.md).
//
// CPython is found at the one-time initialisation through dlsym(RTLD_DEFAULT, ...): no link
// to libpython, and a process without those symbols pays one predictable branch per
// allocation. Only public C API functions of CPython 3.10+ are called.
//
// Safety (docs/architecture.md, "Python call sites"):
// - frames are taken only when Py_IsInitialized(), the interpreter is not finalizing, and
//   this thread holds the GIL (PyGILState_Check() == 1 and, where CPython exports it, the
//   thread's current thread state is its own): the C API may then be called, and luma
//   never asks for the GIL, so it cannot deadlock. A thread without the GIL (ctypes.CDLL
//   releases it around a foreign call, a C++ worker thread) gets native frames only;
// - the garbage collector is paused while frames are read (reading a frame may create a
//   frame object, and a collection could run finalizers inside the hook);
// - any Python exception already set is kept and restored, any the walk raises cleared;
// - the site table is taken with try_lock (it is already serialised by the GIL; the lock
//   covers an interpreter without one): a busy table means no Python frames, never a wait.
// Sites - one per code object, its file and qualified function name - are copied once and
// kept with a reference to the code object (so its address is never reused for another
// one), at most kMaxSites; later code objects are named "<unknown>" (the line still
// recorded). CPython computes a frame's line by walking its code's line table (90% of the
// cost of a capture, measured: docs/performance.md), so the line of a kept code object at
// an instruction offset (PyFrame_GetLasti, 3.11+) is remembered in a direct-mapped cache.
// Every failure means no Python frames and at most one log line.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string_view>

#include "trace/trace_format.h"

namespace luma::shim {

// A code object's file and function name, interned for the life of the process.
struct PythonSite {
  std::string_view file;
  std::string_view function;
};

// One captured frame: its code's site and the line being run.
struct PythonFrameRef {
  const PythonSite* site = nullptr;
  std::uint32_t line = 0;
};

// The most Python frames LUMA_TRACE_PYTHON may ask for (the trace format's limit).
inline constexpr unsigned kMaxPythonFramesSetting = 64;
static_assert(kMaxPythonFramesSetting == core::trace::kMaxPythonFrames);

class PythonFrames {
 public:
  // Code objects remembered (each pinned by a reference); the table has twice the slots.
  static constexpr std::uint32_t kMaxSites = 1u << 15;
  static constexpr std::uint32_t kLineCacheSlotsLog2 = 14;

  // At the one-time initialisation: `depth` frames per capture (0: off). Looks CPython up;
  // when it is not there (not a Python process, or a CPython before 3.10) captures nothing.
  void configure(unsigned depth) noexcept;
  // Whether CPython was found (and depth > 0).
  bool available() const noexcept { return api_ != nullptr; }

  // Up to the configured depth of this thread's Python frames into out (room for
  // kMaxPythonFramesSetting), innermost first; returns how many (0: none, or not allowed
  // now: see the top of this file).
  std::uint32_t capture(PythonFrameRef* out) noexcept {
    if (api_ == nullptr) [[likely]] return 0;
    return capture_slow(out);
  }

  struct Api;  // the CPython functions found (python_frames.cpp)

 private:
  std::uint32_t capture_slow(PythonFrameRef* out) noexcept;
  const PythonSite* site_of(void* code) noexcept;
  std::uint32_t line_of(void* frame, void* code, bool code_kept) noexcept;
  bool may_call_python() const noexcept;

  const Api* api_ = nullptr;
  unsigned depth_ = 0;
  std::mutex sites_mutex_;
  struct Slot {
    void* code;
    const PythonSite* site;
  };
  Slot* slots_ = nullptr;  // kMaxSites * 2, made at the first capture (sites_mutex_)
  std::uint32_t sites_ = 0;
  struct LineSlot {
    void* code;  // a kept code object (its address is never reused)
    int lasti;
    std::uint32_t line;
  };
  LineSlot* lines_ = nullptr;  // 2^kLineCacheSlotsLog2, made with slots_
  bool table_failed_ = false;
};

}  // namespace luma::shim
