// python_frames.cpp - see python_frames.h. The CPython symbols are looked up by name and
// called through their C signatures: no Python header is needed, and nothing ties
// libluma.so to one Python version.
#include "python/python_frames.h"

#include <dlfcn.h>
#include <pthread.h>

#include <cstring>
#include <optional>

#include "config/log.h"
#include "python/python_layouts.h"
#include "driver/real_driver.h"

namespace luma::shim {

// The CPython functions called per capture; each reads a field or two (docs/python-internals.md).
struct PythonFrames::Api {
  int (*is_initialized)() = nullptr;       // Py_IsInitialized
  int (*is_finalizing)() = nullptr;        // Py_IsFinalizing (3.13), _Py_IsFinalizing (3.10-3.12)
  void* (*this_thread_state)() = nullptr;  // PyGILState_GetThisThreadState
};

namespace {

PythonFrames::Api g_api;  // filled once, at the one-time initialisation

struct Version {
  unsigned major = 0, minor = 0;
};

// The running interpreter's version: Py_Version (PY_VERSION_HEX, 3.11+), else the text of
// Py_GetVersion() ("3.10.13 (main, ...)": a static buffer, nothing allocated).
std::optional<Version> interpreter_version(DlsymFn sym) noexcept {
  if (const auto* hex = static_cast<const unsigned long*>(sym(RTLD_DEFAULT, "Py_Version")))
    return Version{static_cast<unsigned>(*hex >> 24 & 0xFF), static_cast<unsigned>(*hex >> 16 & 0xFF)};
  auto* get = reinterpret_cast<const char* (*)()>(sym(RTLD_DEFAULT, "Py_GetVersion"));
  const char* text = get != nullptr ? get() : nullptr;
  if (text == nullptr) return std::nullopt;
  Version v;
  const char* p = text;
  auto number = [&p](unsigned& out) {
    if (*p < '0' || *p > '9') return false;
    for (out = 0; *p >= '0' && *p <= '9' && out < 1000; ++p) out = out * 10 + unsigned(*p - '0');
    return true;
  };
  if (!number(v.major) || *p++ != '.' || !number(v.minor)) return std::nullopt;
  return v;
}

const char* problem_text(python::DebugOffsetsProblem p) noexcept {
  switch (p) {
    case python::DebugOffsetsProblem::cookie: return " (its _PyRuntime has no debug offsets)";
    case python::DebugOffsetsProblem::version: return " (its debug offsets are of another version)";
    case python::DebugOffsetsProblem::free_threaded: return " (a free-threaded build)";
    case python::DebugOffsetsProblem::range: return " (its debug offsets are out of range)";
    case python::DebugOffsetsProblem::none: break;
  }
  return "";
}

}  // namespace

void PythonFrames::configure(unsigned depth) noexcept {
  if (depth == 0) return;
  const DlsymFn sym = real_dlsym();
  if (sym == nullptr) return;
  auto find = [sym](const char* name) { return sym(RTLD_DEFAULT, name); };
  Api& a = g_api;
  a.is_initialized = reinterpret_cast<int (*)()>(find("Py_IsInitialized"));
  if (a.is_initialized == nullptr) return;  // not a Python process: say nothing
  a.this_thread_state = reinterpret_cast<void* (*)()>(find("PyGILState_GetThisThreadState"));
  for (const char* name : {"Py_IsFinalizing", "_Py_IsFinalizing"}) {
    if (a.is_finalizing == nullptr) a.is_finalizing = reinterpret_cast<int (*)()>(find(name));
  }

  const std::optional<Version> v = interpreter_version(sym);
  std::optional<python::Layout> layout;
  auto problem = python::DebugOffsetsProblem::none;
  if (v && v->major == 3 && v->minor == 13) {
    if (const void* runtime = find("_PyRuntime"))
      layout = python::layout_from_debug_offsets(
          *static_cast<const python::DebugOffsets313*>(runtime), &problem);
    else
      problem = python::DebugOffsetsProblem::cookie;
  } else if (v && v->major == 3) {
    if (const python::Layout* row = python::table_layout(v->minor)) layout = *row;
  }
  if (!layout) {
    if (v)
      log_noexcept(LogLevel::warn,
                   "Python frames: CPython {}.{}{} is not a version luma reads (3.10 to 3.13); "
                   "allocations record native frames only",
                   v->major, v->minor, problem_text(problem));
    else
      log_noexcept(LogLevel::warn,
                   "Python frames: the Python interpreter's version is unknown (no Py_Version, "
                   "no Py_GetVersion); allocations record native frames only");
    return;
  }

  PythonTypes types;
  types.code = reinterpret_cast<std::uintptr_t>(find("PyCode_Type"));
  types.str = reinterpret_cast<std::uintptr_t>(find("PyUnicode_Type"));
  types.bytes = reinterpret_cast<std::uintptr_t>(find("PyBytes_Type"));
  types.frame = reinterpret_cast<std::uintptr_t>(find("PyFrame_Type"));
  if (a.this_thread_state == nullptr || types.code == 0 || types.str == 0 || types.bytes == 0 ||
      types.frame == 0) {
    log_noexcept(LogLevel::warn,
                 "Python frames: CPython 3.{} found without PyGILState_GetThisThreadState or its "
                 "type objects; allocations record native frames only",
                 layout->minor);
    return;
  }
  // The thread state of this thread, if it has one, must name this thread: a check of the
  // layout against the interpreter actually running.
  if (a.is_initialized() != 0) {
    if (void* ts = a.this_thread_state()) {
      std::uintptr_t id = 0;
      std::memcpy(&id, static_cast<const char*>(ts) + layout->tstate_thread_id, sizeof id);
      if (id != static_cast<std::uintptr_t>(pthread_self())) {
        log_noexcept(LogLevel::warn,
                     "Python frames: CPython 3.{}'s thread state does not have the layout luma "
                     "knows; allocations record native frames only",
                     layout->minor);
        return;
      }
    }
  }
  if (!reader_.configure(*layout, types, depth)) {
    log_noexcept(LogLevel::warn,
                 "Python frames: no memory for the site table; allocations record native "
                 "frames only");
    return;
  }
  api_ = &a;
  log_noexcept(LogLevel::debug, "Python frames: CPython 3.{} found, up to {} frames per "
               "allocation", layout->minor, depth);
}

std::uint32_t PythonFrames::capture_slow(PythonFrameRef* out) noexcept {
  const Api& a = *api_;
  // Before Py_Initialize and once finalization began, thread states may not exist or may
  // be torn down: no frames.
  if (a.is_initialized() == 0) return 0;
  if (a.is_finalizing != nullptr && a.is_finalizing() != 0) return 0;
  void* tstate = a.this_thread_state();
  if (tstate == nullptr) return 0;  // not a Python thread
  return reader_.read(reinterpret_cast<std::uintptr_t>(tstate),
                      static_cast<std::uintptr_t>(pthread_self()), out);
}

}  // namespace luma::shim
