// text_fields.h - the small parsing helpers the text readers share: lines without their
// line ending, comma splitting, strict unsigned integers (no sign, no trailing junk, no
// overflow).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace luma::core::text {

inline std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

inline std::vector<std::string_view> split_commas(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields.push_back(trim(line.substr(start)));
      return fields;
    }
    fields.push_back(trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

// Decimal, or hexadecimal with 0x when allow_hex.
inline std::optional<std::uint64_t> parse_u64(std::string_view s, bool allow_hex = false) {
  int base = 10;
  if (allow_hex && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return std::nullopt;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return value;
}

// The first line of `head`, without its line ending (and without a UTF-8 byte-order mark).
inline std::string_view first_line(std::string_view head) noexcept {
  if (head.substr(0, 3) == "\xEF\xBB\xBF") head.remove_prefix(3);
  return trim(head.substr(0, head.find('\n')));
}

}  // namespace luma::core::text
