// python_layouts.cpp - see python_layouts.h: the layout of CPython 3.13 from its own debug
// offsets.
#include "python/python_layouts.h"

#include <cstring>

namespace luma::shim::python {

std::optional<Layout> layout_from_debug_offsets(const DebugOffsets313& d,
                                                DebugOffsetsProblem* problem) noexcept {
  auto refuse = [&](DebugOffsetsProblem p) -> std::optional<Layout> {
    if (problem != nullptr) *problem = p;
    return std::nullopt;
  };
  if (std::memcmp(d.cookie, "xdebugpy", sizeof d.cookie) != 0)
    return refuse(DebugOffsetsProblem::cookie);
  if ((d.version >> 16) != 0x030D) return refuse(DebugOffsetsProblem::version);
  // A free-threaded build has another object header (and no GIL to reason about).
  if (d.free_threaded != 0) return refuse(DebugOffsetsProblem::free_threaded);

  // Every field read must lie inside the structure the offsets say it belongs to, and the
  // structures are small: anything else is not a 3.13 runtime's offsets.
  auto inside = [](std::uint64_t offset, std::uint64_t width, std::uint64_t size) {
    return size < 0x8000 && offset + width <= size;
  };
  const auto& ts = d.thread_state;
  const auto& fr = d.interpreter_frame;
  const auto& co = d.code_object;
  const auto& un = d.unicode_object;
  // PyCompactUnicodeObject is PyASCIIObject followed by Py_ssize_t utf8_length and char* utf8
  // (Include/cpython/unicodeobject.h, 3.12 and 3.13): the data of a compact str that is not
  // ASCII starts after it. The debug offsets name only sizeof(PyASCIIObject).
  const std::uint64_t compact_size = un.asciiobject_size + 16;
  const bool ok =
      inside(ts.current_frame, 8, ts.size) && inside(ts.thread_id, 8, ts.size) &&
      inside(fr.previous, 8, fr.size) && inside(fr.executable, 8, fr.size) &&
      inside(fr.instr_ptr, 8, fr.size) && inside(fr.owner, 1, fr.size) &&
      inside(co.filename, 8, co.size) && inside(co.name, 8, co.size) &&
      inside(co.qualname, 8, co.size) && inside(co.linetable, 8, co.size) &&
      inside(co.firstlineno, 4, co.size) && inside(co.co_code_adaptive, 0, co.size) &&
      inside(d.pyobject.ob_type, 8, d.pyobject.size) &&
      inside(d.tuple_object.ob_size, 8, d.tuple_object.size) &&
      inside(d.bytes_object.ob_size, 8, d.bytes_object.size) &&
      inside(d.bytes_object.ob_sval, 0, d.bytes_object.size) &&
      inside(un.length, 8, un.asciiobject_size) && inside(un.state, 4, un.asciiobject_size) &&
      inside(compact_size, 0, un.size);
  if (!ok) return refuse(DebugOffsetsProblem::range);

  auto u16 = [](std::uint64_t v) { return static_cast<std::uint16_t>(v); };
  Layout l{};
  l.minor = 13;
  l.chain = FrameChain::direct;
  l.lines = LineFormat::locations;
  l.tstate_frame = u16(ts.current_frame);
  l.cframe_current = kNoField;
  l.tstate_thread_id = u16(ts.thread_id);
  l.frame_previous = u16(fr.previous);
  l.frame_code = u16(fr.executable);
  l.frame_instr = u16(fr.instr_ptr);
  l.frame_owner = u16(fr.owner);
  l.owner_cstack = 3;  // FRAME_OWNED_BY_CSTACK (Include/internal/pycore_frame.h of 3.13)
  l.code_filename = u16(co.filename);
  l.code_name = u16(co.name);
  l.code_qualname = u16(co.qualname);
  l.code_linetable = u16(co.linetable);
  l.code_firstlineno = u16(co.firstlineno);
  l.code_adaptive = u16(co.co_code_adaptive);
  l.ob_type = u16(d.pyobject.ob_type);
  l.ob_size = u16(d.tuple_object.ob_size);  // PyTupleObject begins with its PyVarObject
  l.unicode_length = u16(un.length);
  l.unicode_state = u16(un.state);
  l.ascii_size = u16(un.asciiobject_size);
  l.compact_size = u16(compact_size);
  l.bytes_size = u16(d.bytes_object.ob_size);
  l.bytes_sval = u16(d.bytes_object.ob_sval);
  if (problem != nullptr) *problem = DebugOffsetsProblem::none;
  return l;
}

}  // namespace luma::shim::python
