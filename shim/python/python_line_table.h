// python_line_table.h - the source line of an instruction, from a code object's
// co_linetable bytes, decoded the way CPython's PyCode_Addr2Line does: 3.10's table of
// (byte delta, signed line delta) pairs (Objects/lnotab_notes.txt, PEP 626) and the
// location table of 3.11+ (Objects/locations.md). Pure functions over a byte span: the
// Python frame reader (python_frame_reader.h) hands them a copy-free view of the table.
#pragma once

#include <cstddef>
#include <cstdint>

#include "python/python_layouts.h"

namespace luma::shim::python {

// The line of the instruction at byte offset `offset` into the code (>= 0), counting from
// `first_line` (co_firstlineno); 0 when the table gives that instruction no line, the
// offset lies past the table's end, or the table is malformed (never read past `size`).
std::uint32_t line_at(LineFormat format, const unsigned char* table, std::size_t size,
                      int first_line, std::uint32_t offset) noexcept;

}  // namespace luma::shim::python
