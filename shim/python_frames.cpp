// python_frames.cpp - see python_frames.h. The CPython functions are declared here by
// their C signatures with PyObject as an opaque type: no Python header is needed, and
// nothing ties libluma.so to one Python version.
#include "python_frames.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "log.h"
#include "real_driver.h"

namespace luma::shim {
namespace {

using PyObj = void;
constexpr PythonSite kUnknownSite{"<unknown>", "<unknown>"};

}  // namespace

// Every function the walk needs; all or nothing. The X-macro is the one list of names.
#define LUMA_PYTHON_API(X)                                        \
  X(Py_IsInitialized, int, ())                                  \
  X(PyGILState_Check, int, ())                                  \
  X(PyGILState_GetThisThreadState, void*, ())                   \
  X(PyEval_GetFrame, PyObj*, ())                                \
  X(PyFrame_GetBack, PyObj*, (PyObj*))                          \
  X(PyFrame_GetCode, PyObj*, (PyObj*))                          \
  X(PyFrame_GetLineNumber, int, (PyObj*))                       \
  X(PyObject_GetAttrString, PyObj*, (PyObj*, const char*))      \
  X(PyUnicode_AsUTF8AndSize, const char*, (PyObj*, long*))      \
  X(Py_IncRef, void, (PyObj*))                                  \
  X(Py_DecRef, void, (PyObj*))                                  \
  X(PyErr_Fetch, void, (PyObj**, PyObj**, PyObj**))             \
  X(PyErr_Restore, void, (PyObj*, PyObj*, PyObj*))              \
  X(PyErr_Clear, void, ())                                      \
  X(PyGC_Disable, int, ())                                      \
  X(PyGC_Enable, int, ())

struct PythonFrames::Api {
#define LUMA_FIELD(name, ret, args) ret(*name) args = nullptr;
  LUMA_PYTHON_API(LUMA_FIELD)
#undef LUMA_FIELD
  // Optional: the thread state attached to this thread (names differ by version), and
  // whether the interpreter is shutting down.
  void* (*current_thread_state)() = nullptr;
  int (*is_finalizing)() = nullptr;
  int (*frame_lasti)(PyObj*) = nullptr;  // PyFrame_GetLasti, 3.11+: the line cache's key
};

namespace {

PythonFrames::Api g_api;  // filled once, at the one-time initialisation

}  // namespace

void PythonFrames::configure(unsigned depth) noexcept {
  depth_ = depth < kMaxPythonFramesSetting ? depth : kMaxPythonFramesSetting;
  if (depth_ == 0) return;
  const DlsymFn sym = real_dlsym();
  if (sym == nullptr) return;
  Api& a = g_api;
  bool all = true;
#define LUMA_FIND(name, ret, args) \
  a.name = reinterpret_cast<decltype(a.name)>(sym(RTLD_DEFAULT, #name)); \
  all = all && a.name != nullptr;
  LUMA_PYTHON_API(LUMA_FIND)
#undef LUMA_FIND
  if (a.Py_IsInitialized == nullptr) return;  // not a Python process: say nothing
  if (!all) {
    log().info("Python found without the C API of CPython 3.10+; allocations record native "
               "frames only");
    return;
  }
  // 3.13 made it public; 3.5-3.12 export the underscored name.
  for (const char* name : {"PyThreadState_GetUnchecked", "_PyThreadState_UncheckedGet"}) {
    if (a.current_thread_state == nullptr)
      a.current_thread_state = reinterpret_cast<void* (*)()>(sym(RTLD_DEFAULT, name));
  }
  for (const char* name : {"Py_IsFinalizing", "_Py_IsFinalizing"}) {
    if (a.is_finalizing == nullptr)
      a.is_finalizing = reinterpret_cast<int (*)()>(sym(RTLD_DEFAULT, name));
  }
  a.frame_lasti = reinterpret_cast<int (*)(PyObj*)>(sym(RTLD_DEFAULT, "PyFrame_GetLasti"));
  api_ = &a;
  log().debug("Python frames: CPython found, up to {} frames per allocation", depth_);
}

bool PythonFrames::may_call_python() const noexcept {
  const Api& a = *api_;
  // Before Py_Initialize PyGILState_Check answers 1 for any thread: ask it only after.
  if (a.Py_IsInitialized() == 0) return false;
  if (a.is_finalizing != nullptr && a.is_finalizing() != 0) return false;
  if (a.PyGILState_Check() != 1) return false;
  // PyGILState_Check answers 1 whenever its check is off (a sub-interpreter was made):
  // the thread state now current must also be this thread's own.
  if (a.current_thread_state != nullptr) {
    void* now = a.current_thread_state();
    if (now == nullptr || now != a.PyGILState_GetThisThreadState()) return false;
  }
  return true;
}

const PythonSite* PythonFrames::site_of(void* code) noexcept {
  const Api& a = *api_;
  constexpr std::uint32_t kSlots = kMaxSites * 2;
  if (slots_ == nullptr) {
    if (table_failed_) return &kUnknownSite;
    slots_ = static_cast<Slot*>(std::calloc(kSlots, sizeof(Slot)));
    lines_ = static_cast<LineSlot*>(
        std::calloc(std::size_t{1} << kLineCacheSlotsLog2, sizeof(LineSlot)));
    if (slots_ == nullptr || lines_ == nullptr) {
      std::free(slots_);
      std::free(lines_);
      slots_ = nullptr;
      lines_ = nullptr;
      table_failed_ = true;
      log().warn("Python frames: no memory for the site table; Python frames are unnamed");
      return &kUnknownSite;
    }
  }
  auto h = static_cast<std::uint32_t>((reinterpret_cast<std::uintptr_t>(code) >> 4) *
                                      0x9E3779B1u);
  std::uint32_t i = h & (kSlots - 1);
  for (; slots_[i].code != nullptr; i = (i + 1) & (kSlots - 1)) {
    if (slots_[i].code == code) return slots_[i].site;
  }
  if (sites_ >= kMaxSites) return &kUnknownSite;
  // A new code object: its names, copied once.
  auto text = [&](const char* attr, const char* fallback) -> std::string_view {
    PyObj* s = a.PyObject_GetAttrString(code, attr);
    if (s == nullptr && fallback != nullptr) {
      a.PyErr_Clear();
      s = a.PyObject_GetAttrString(code, fallback);
    }
    if (s == nullptr) return {};
    long n = 0;
    const char* p = a.PyUnicode_AsUTF8AndSize(s, &n);
    std::string_view out;
    if (p != nullptr && n >= 0) {
      if (auto* copy = new (std::nothrow) char[static_cast<std::size_t>(n) + 1]) {
        std::memcpy(copy, p, static_cast<std::size_t>(n));
        out = {copy, static_cast<std::size_t>(n)};
      }
    }
    a.Py_DecRef(s);
    return out;
  };
  const std::string_view file = text("co_filename", nullptr);
  const std::string_view function = text("co_qualname", "co_name");  // co_qualname: 3.11+
  a.PyErr_Clear();
  auto* site = new (std::nothrow) PythonSite{file.empty() ? kUnknownSite.file : file,
                                             function.empty() ? kUnknownSite.function : function};
  if (site == nullptr) return &kUnknownSite;
  a.Py_IncRef(code);  // kept: the address stays this code object's
  slots_[i] = {code, site};
  ++sites_;
  return site;
}

std::uint32_t PythonFrames::line_of(void* frame, void* code, bool code_kept) noexcept {
  const Api& a = *api_;
  auto computed = [&] {
    const int line = a.PyFrame_GetLineNumber(frame);
    return line > 0 ? static_cast<std::uint32_t>(line) : 0u;
  };
  if (!code_kept || a.frame_lasti == nullptr || lines_ == nullptr) return computed();
  const int lasti = a.frame_lasti(frame);
  const auto key = (reinterpret_cast<std::uintptr_t>(code) >> 4) ^
                   static_cast<std::uintptr_t>(static_cast<std::uint32_t>(lasti)) << 20;
  LineSlot& slot = lines_[static_cast<std::uint32_t>(key * 0x9E3779B97F4A7C15ull >>
                                                     (64 - kLineCacheSlotsLog2))];
  if (slot.code == code && slot.lasti == lasti) return slot.line;
  slot = {code, lasti, computed()};
  return slot.line;
}

std::uint32_t PythonFrames::capture_slow(PythonFrameRef* out) noexcept {
  if (!may_call_python()) return 0;
  std::unique_lock<std::mutex> lock(sites_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  const Api& a = *api_;
  PyObj *type = nullptr, *value = nullptr, *traceback = nullptr;
  a.PyErr_Fetch(&type, &value, &traceback);
  const int gc_was_on = a.PyGC_Disable();
  std::uint32_t n = 0;
  PyObj* frame = a.PyEval_GetFrame();  // borrowed
  if (frame != nullptr) a.Py_IncRef(frame);
  while (frame != nullptr && n < depth_) {
    PyObj* code = a.PyFrame_GetCode(frame);  // new reference
    if (code != nullptr) {
      const PythonSite* site = site_of(code);
      out[n++] = {site, line_of(frame, code, site != &kUnknownSite)};
      a.Py_DecRef(code);
    }
    PyObj* back = a.PyFrame_GetBack(frame);  // new reference
    a.Py_DecRef(frame);
    frame = back;
  }
  if (frame != nullptr) a.Py_DecRef(frame);
  if (gc_was_on != 0) a.PyGC_Enable();
  a.PyErr_Clear();
  a.PyErr_Restore(type, value, traceback);
  return n;
}

}  // namespace luma::shim
