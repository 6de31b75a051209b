// utf8_text.cpp - the UTF-8 check of utf8_text.h (Unicode's table 3-7 of well-formed byte
// sequences: no overlong forms, no surrogates, nothing above U+10FFFF).
#include "io/utf8_text.h"

namespace luma::core {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Bytes a sequence with this lead byte takes (0: not a lead byte), and the range its
// second byte must be in.
struct Lead {
  int length;
  unsigned char low, high;
};

Lead lead_of(unsigned char c) {
  if (c < 0x80) return {1, 0, 0};
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c >= 0xE1 && c <= 0xEF) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const Lead lead = lead_of(static_cast<unsigned char>(s[i]));
    if (lead.length == 1) {
      out += s[i++];
      continue;
    }
    // How many bytes form a valid prefix of the sequence.
    std::size_t ok = lead.length == 0 ? 0 : 1;
    while (ok > 0 && ok < static_cast<std::size_t>(lead.length) && i + ok < s.size()) {
      const auto c = static_cast<unsigned char>(s[i + ok]);
      const unsigned char low = ok == 1 ? lead.low : 0x80, high = ok == 1 ? lead.high : 0xBF;
      if (c < low || c > high) break;
      ++ok;
    }
    if (ok == static_cast<std::size_t>(lead.length)) {
      out.append(s.substr(i, ok));
      i += ok;
    } else {
      out += kReplacement;  // one replacement per maximal invalid subpart
      i += ok == 0 ? 1 : ok;
    }
  }
  return out;
}

}  // namespace luma::core
