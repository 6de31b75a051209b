// python_line_table.cpp - see python_line_table.h.
#include "python/python_line_table.h"

namespace luma::shim::python {
namespace {

constexpr std::uint32_t kCodeUnitBytes = 2;  // sizeof(_Py_CODEUNIT)

std::uint32_t positive(long line) noexcept {
  return line > 0 && line <= 0x7FFFFFFF ? static_cast<std::uint32_t>(line) : 0u;
}

// 3.10: each pair advances the address by its first byte; the second is the line delta,
// -128 meaning "no line" for that range. Ranges of zero bytes only carry a delta.
std::uint32_t pep626(const unsigned char* t, std::size_t size, int first_line,
                     std::uint32_t offset) noexcept {
  long line = first_line;
  std::uint64_t end = 0;
  for (std::size_t i = 0; i + 1 < size; i += 2) {
    const std::uint64_t start = end;
    end += t[i];
    const auto delta = static_cast<signed char>(t[i + 1]);
    const bool no_line = delta == -128;
    if (!no_line) line += delta;
    if (start == end) continue;
    if (offset < end) return no_line ? 0 : positive(line);
  }
  return 0;
}

// A varint of the location table: 6-bit chunks, least significant first, bit 6 = more.
// Returns false when it runs past the end (a malformed table).
bool varint(const unsigned char* t, std::size_t size, std::size_t& i, std::uint32_t& out) noexcept {
  std::uint32_t value = 0;
  for (unsigned shift = 0; i < size && shift < 32; shift += 6) {
    const unsigned char b = t[i++];
    value |= static_cast<std::uint32_t>(b & 63) << shift;
    if ((b & 64) == 0) {
      out = value;
      return true;
    }
  }
  return false;
}

// 3.11+: entries of a first byte (bit 7 set; bits 3-6 the kind; bits 0-2 the length in
// code units, minus one) and following bytes (bit 7 clear). Kinds: 0-9 short form and
// 10-12 one-line form (line delta 0 / kind - 10), 13 no columns and 14 long form (line
// delta: a signed varint), 15 no location.
std::uint32_t locations(const unsigned char* t, std::size_t size, int first_line,
                        std::uint32_t offset) noexcept {
  long line = first_line;
  std::uint64_t addr = 0;
  std::size_t i = 0;
  while (i < size) {
    const unsigned char first = t[i];
    if ((first & 0x80) == 0) return 0;  // not the start of an entry: malformed
    const unsigned kind = (first >> 3) & 15;
    const std::uint64_t end = addr + ((first & 7u) + 1) * kCodeUnitBytes;
    if (kind == 13 || kind == 14) {
      std::size_t at = i + 1;
      std::uint32_t v = 0;
      if (!varint(t, size, at, v)) return 0;
      line += (v & 1) != 0 ? -static_cast<long>(v >> 1) : static_cast<long>(v >> 1);
    } else if (kind >= 10 && kind <= 12) {
      line += kind - 10;
    }
    if (offset < end) return kind == 15 ? 0 : positive(line);
    addr = end;
    for (++i; i < size && (t[i] & 0x80) == 0; ++i) {
    }
  }
  return 0;
}

}  // namespace

std::uint32_t line_at(LineFormat format, const unsigned char* table, std::size_t size,
                      int first_line, std::uint32_t offset) noexcept {
  if (table == nullptr) return 0;
  return format == LineFormat::pep626 ? pep626(table, size, first_line, offset)
                                      : locations(table, size, first_line, offset);
}

}  // namespace luma::shim::python
