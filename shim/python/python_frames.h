// python_frames.h - the Python call site of an allocation: when the program is a CPython
// interpreter (or embeds one), the file, function and line of each Python frame of the
// allocating thread, innermost first, recorded with the native stack (LUMA_TRACE_STACKS,
// LUMA_TRACE_PYTHON; docs/trace-format.md), whether the thread holds the GIL or released
// it around the call (ctypes.CDLL, cuda-bindings' nogil driver calls, PyTorch's and
// CuPy's bindings).
//
// CPython is found at the one-time initialisation through dlsym(RTLD_DEFAULT, ...): no link
// to libpython, and a process without it pays one predictable branch per allocation. The
// interpreter's version (Py_Version, or Py_GetVersion before 3.11) picks the layout of its
// structures (python_layouts.h: 3.10, 3.11, 3.12 from a table, 3.13 from the debug offsets
// at the start of _PyRuntime); any other version gets no Python frames and one log line.
//
// Each allocation then reads the thread's frames from memory (python_frame_reader.h), only
// when Py_IsInitialized() and the interpreter is not finalizing, starting from the thread
// state CPython keeps for this thread in thread-specific storage
// (PyGILState_GetThisThreadState: pthread_getspecific, whether or not the GIL is held).
// The only CPython functions called per allocation are those three, each a few loads that
// neither allocate, lock nor run Python code (docs/python-internals.md). The GIL is never
// taken or needed, so a thread that released it cannot deadlock on it.
// Every failure means no Python frames (or an "<unknown>" name) and at most one log line.
#pragma once

#include <cstdint>

#include "python/python_frame_reader.h"

namespace luma::shim {

class PythonFrames {
 public:
  // At the one-time initialisation: `depth` frames per capture (0: off). Looks CPython up;
  // when it is not there, or its version has no layout, captures nothing.
  void configure(unsigned depth) noexcept;
  // Whether a CPython luma can read was found (and depth > 0).
  bool available() const noexcept { return api_ != nullptr; }

  // Up to the configured depth of this thread's Python frames into out (room for
  // kMaxPythonFramesSetting), innermost first; returns how many (0: none).
  std::uint32_t capture(PythonFrameRef* out) noexcept {
    if (api_ == nullptr) [[likely]] return 0;
    return capture_slow(out);
  }

  struct Api;  // the CPython functions called per capture (python_frames.cpp)

 private:
  std::uint32_t capture_slow(PythonFrameRef* out) noexcept;

  const Api* api_ = nullptr;
  PythonFrameReader reader_;
};

}  // namespace luma::shim
