// python_layouts.h - where CPython keeps what luma's Python frame reader reads: byte offsets
// into a thread state, a frame, a code object, a str and a bytes object, per interpreter
// version. The one table of these facts (docs/python-internals.md says what each field is
// and why reading it without the GIL is safe).
//
// 3.10, 3.11 and 3.12: rows taken from each version's headers (offsetof on x86-64 Linux,
// the GIL build; Include/cpython/pystate.h, Include/cpython/frameobject.h (3.10),
// Include/internal/pycore_frame.h (3.11+), Include/cpython/code.h,
// Include/cpython/unicodeobject.h, Include/cpython/bytesobject.h). The layouts do not change
// within a minor version (CPython keeps them for the tools that read them: py-spy, austin);
// tests/shim/python_layouts_check.py compares every row with the headers installed.
// 3.13: CPython publishes the offsets itself: `_PyRuntime` begins with `_Py_DebugOffsets`
// (Include/internal/pycore_runtime.h of 3.13), read at run time by layout_from_debug_offsets;
// the few facts it does not carry are written there once.
// A version not here (3.9 and before, 3.14 and after) has no layout: no Python frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace luma::shim::python {

// How a thread state leads to its innermost frame.
enum class FrameChain : std::uint8_t {
  frame_object,  // 3.10: PyThreadState.frame, a PyFrameObject chained by f_back
  cframe,        // 3.11, 3.12: PyThreadState.cframe->current_frame, a _PyInterpreterFrame
  direct,        // 3.13: PyThreadState.current_frame, a _PyInterpreterFrame
};

// The format of a code object's co_linetable.
enum class LineFormat : std::uint8_t {
  pep626,     // 3.10: (byte delta, signed line delta) pairs (Objects/lnotab_notes.txt)
  locations,  // 3.11+: the location table (Objects/locations.md)
};

inline constexpr std::uint16_t kNoField = 0xFFFF;
inline constexpr std::uint8_t kNoOwner = 0xFF;

// PyASCIIObject.state bits (the same from 3.10 to 3.13: interned:2, kind:3, compact:1,
// ascii:1, then flags luma does not read; GCC's bit-field order on x86-64).
inline constexpr std::uint32_t kUnicodeKindShift = 2;
inline constexpr std::uint32_t kUnicodeKindMask = 0x1C;
inline constexpr std::uint32_t kUnicodeCompact = 0x20;
inline constexpr std::uint32_t kUnicodeAscii = 0x40;

struct Layout {
  unsigned minor;  // 3.minor
  FrameChain chain;
  LineFormat lines;
  // PyThreadState
  std::uint16_t tstate_frame;      // .frame (3.10), .cframe (3.11, 3.12), .current_frame (3.13)
  std::uint16_t cframe_current;    // _PyCFrame.current_frame (FrameChain::cframe only)
  std::uint16_t tstate_thread_id;  // .thread_id: the pthread_t of the thread it belongs to
  // The frame: PyFrameObject (3.10) or _PyInterpreterFrame (3.11+)
  std::uint16_t frame_previous;  // .f_back / .previous
  std::uint16_t frame_code;      // .f_code / .f_executable (3.13): a strong reference
  std::uint16_t frame_instr;     // .f_lasti (3.10: int, code units) / .prev_instr / .instr_ptr
  std::uint16_t frame_owner;     // .owner (char; 3.11+), kNoField in 3.10
  std::uint8_t owner_cstack;     // FRAME_OWNED_BY_CSTACK (3.12+: a shim frame), else kNoOwner
  // PyCodeObject
  std::uint16_t code_filename;
  std::uint16_t code_name;
  std::uint16_t code_qualname;  // 3.11+, kNoField in 3.10
  std::uint16_t code_linetable;
  std::uint16_t code_firstlineno;  // int
  std::uint16_t code_adaptive;     // co_code_adaptive: the instructions (3.11+), else kNoField
  // PyObject / PyVarObject
  std::uint16_t ob_type;
  std::uint16_t ob_size;  // a code object's ob_size counts its code units (3.11+)
  // str (PyASCIIObject, PyCompactUnicodeObject)
  std::uint16_t unicode_length;  // Py_ssize_t, in code points
  std::uint16_t unicode_state;   // uint32 bit-field word (kUnicode* above)
  std::uint16_t ascii_size;      // sizeof(PyASCIIObject): a compact ASCII str's data
  std::uint16_t compact_size;    // sizeof(PyCompactUnicodeObject): other compact data
  // bytes
  std::uint16_t bytes_size;  // ob_size
  std::uint16_t bytes_sval;  // ob_sval
};

// clang-format off
inline constexpr Layout kLayouts[] = {
  // minor chain                     lines                  tstate: frame cframe thread_id
  //   frame: previous code instr owner cstack   code: filename name qualname linetable
  //   firstlineno adaptive   ob_type ob_size   str: length state ascii compact   bytes: size sval
  {10, FrameChain::frame_object, LineFormat::pep626,    24, kNoField, 176,
     24, 32, 96, kNoField, kNoOwner,   104, 112, kNoField, 120,
     40, kNoField,   8, 16,   16, 32, 48, 72,   16, 32},
  {11, FrameChain::cframe,       LineFormat::locations, 56, 8, 152,
     48, 32, 56, 69, kNoOwner,         112, 120, 128, 136,
     72, 184,        8, 16,   16, 32, 48, 72,   16, 32},
  {12, FrameChain::cframe,       LineFormat::locations, 56, 0, 136,
     8, 0, 56, 70, 3,                  112, 120, 128, 136,
     68, 192,        8, 16,   16, 32, 40, 56,   16, 32},
};
// clang-format on

// The row of CPython 3.minor, or nullptr (3.13 comes from its debug offsets instead).
inline const Layout* table_layout(unsigned minor) noexcept {
  for (const Layout& l : kLayouts)
    if (l.minor == minor) return &l;
  return nullptr;
}

// CPython 3.13's _Py_DebugOffsets, field for field (Include/internal/pycore_runtime.h; the
// struct is fixed within 3.13 and changes between minor versions). All uint64 after cookie.
struct DebugOffsets313 {
  char cookie[8];  // "xdebugpy"
  std::uint64_t version;  // PY_VERSION_HEX
  std::uint64_t free_threaded;
  struct { std::uint64_t size, finalizing, interpreters_head; } runtime_state;
  struct {
    std::uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins,
        ceval_gil, gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
        gil_runtime_state_holder;
  } interpreter_state;
  struct {
    std::uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
        datastack_chunk, status;
  } thread_state;
  struct { std::uint64_t size, previous, executable, instr_ptr, localsplus, owner; } interpreter_frame;
  struct {
    std::uint64_t size, filename, name, qualname, linetable, firstlineno, argcount,
        localsplusnames, localspluskinds, co_code_adaptive;
  } code_object;
  struct { std::uint64_t size, ob_type; } pyobject;
  struct { std::uint64_t size, tp_name, tp_repr, tp_flags; } type_object;
  struct { std::uint64_t size, ob_item, ob_size; } tuple_object;
  struct { std::uint64_t size, ob_item, ob_size; } list_object;
  struct { std::uint64_t size, ma_keys, ma_values; } dict_object;
  struct { std::uint64_t size, ob_fval; } float_object;
  struct { std::uint64_t size, lv_tag, ob_digit; } long_object;
  struct { std::uint64_t size, ob_size, ob_sval; } bytes_object;
  struct { std::uint64_t size, state, length, asciiobject_size; } unicode_object;
  struct { std::uint64_t size, collecting; } gc;
};
static_assert(sizeof(DebugOffsets313) == 8 + 8 * 72);

// Why a 3.13 runtime's debug offsets were refused (for the one log line).
enum class DebugOffsetsProblem : std::uint8_t { none, cookie, version, free_threaded, range };

// The layout of a CPython 3.13 from the debug offsets at the start of its _PyRuntime, or
// nullopt with the reason: not the cookie, not 3.13, a free-threaded build (another object
// header), or an offset out of the structure it belongs to.
std::optional<Layout> layout_from_debug_offsets(const DebugOffsets313& d,
                                                DebugOffsetsProblem* problem) noexcept;

}  // namespace luma::shim::python
