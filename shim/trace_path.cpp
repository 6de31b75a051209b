// trace_path.cpp - see trace_path.h.
#include "trace_path.h"

namespace luma::shim {

std::string trace_pattern_from_setting(std::string_view value) {
  if (value.empty() || value == "0" || value == "false" || value == "no" || value == "off")
    return {};
  if (value == "1" || value == "true" || value == "yes" || value == "on")
    return std::string(kDefaultTracePattern);
  return std::string(value);
}

std::string expand_path_pattern(std::string_view pattern, const PathFields& f) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '%' || i + 1 == pattern.size()) {
      out += c;
      continue;
    }
    const char k = pattern[++i];
    switch (k) {
      case 'p': out += std::to_string(f.pid); break;
      case 'h': out += f.host; break;
      case 'r': out += f.rank; break;
      case 'e': out += f.exe; break;
      case '%': out += '%'; break;
      default:
        out += '%';
        out += k;
    }
  }
  return out;
}

bool pattern_has_pid(std::string_view pattern) noexcept {
  for (std::size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    if (pattern[i + 1] == 'p') return true;
    ++i;  // skip the escaped character (%% or another key)
  }
  return false;
}

}  // namespace luma::shim
