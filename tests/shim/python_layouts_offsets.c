/* python_layouts_offsets.c - printed by python_layouts_check.py, compiled against one
 * CPython's own headers (with Py_BUILD_CORE, for the internal ones): where that version
 * keeps each field shim/python/python_layouts.h names, as "field value" lines. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_runtime.h"
#endif

#define FIELD(name, value) printf("%s %lu\n", name, (unsigned long)(value))

static unsigned long state_bits(int which) {
  PyASCIIObject a;
  unsigned int word = 0;
  memset(&a, 0, sizeof a);
  if (which == 0) a.state.kind = 7;
  if (which == 1) a.state.compact = 1;
  if (which == 2) a.state.ascii = 1;
  memcpy(&word, &a.state, sizeof word);
  return word;
}

int main(void) {
#if PY_VERSION_HEX >= 0x030D0000
  FIELD("tstate_frame", offsetof(PyThreadState, current_frame));
#elif PY_VERSION_HEX >= 0x030B0000
  FIELD("tstate_frame", offsetof(PyThreadState, cframe));
  FIELD("cframe_current", offsetof(_PyCFrame, current_frame));
#else
  FIELD("tstate_frame", offsetof(PyThreadState, frame));
#endif
  FIELD("tstate_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
  FIELD("frame_previous", offsetof(_PyInterpreterFrame, previous));
#if PY_VERSION_HEX >= 0x030D0000
  FIELD("frame_code", offsetof(_PyInterpreterFrame, f_executable));
  FIELD("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#else
  FIELD("frame_code", offsetof(_PyInterpreterFrame, f_code));
  FIELD("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
#endif
  FIELD("frame_owner", offsetof(_PyInterpreterFrame, owner));
#if PY_VERSION_HEX >= 0x030C0000
  FIELD("owner_cstack", FRAME_OWNED_BY_CSTACK);
#endif
  FIELD("code_qualname", offsetof(PyCodeObject, co_qualname));
  FIELD("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#else
  FIELD("frame_previous", offsetof(PyFrameObject, f_back));
  FIELD("frame_code", offsetof(PyFrameObject, f_code));
  FIELD("frame_instr", offsetof(PyFrameObject, f_lasti));
#endif
  FIELD("code_filename", offsetof(PyCodeObject, co_filename));
  FIELD("code_name", offsetof(PyCodeObject, co_name));
  FIELD("code_linetable", offsetof(PyCodeObject, co_linetable));
  FIELD("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
  FIELD("ob_type", offsetof(PyObject, ob_type));
  FIELD("ob_size", offsetof(PyVarObject, ob_size));
  FIELD("unicode_length", offsetof(PyASCIIObject, length));
  FIELD("unicode_state", offsetof(PyASCIIObject, state));
  FIELD("ascii_size", sizeof(PyASCIIObject));
  FIELD("compact_size", sizeof(PyCompactUnicodeObject));
  FIELD("bytes_size", offsetof(PyBytesObject, ob_base.ob_size));
  FIELD("bytes_sval", offsetof(PyBytesObject, ob_sval));
  FIELD("unicode_kind_mask", state_bits(0));
  FIELD("unicode_compact", state_bits(1));
  FIELD("unicode_ascii", state_bits(2));
#if PY_VERSION_HEX >= 0x030D0000
  FIELD("debug_offsets_size", sizeof(_Py_DebugOffsets));
#endif
  return 0;
}
