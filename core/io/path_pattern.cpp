// path_pattern.cpp - see path_pattern.h.
#include "io/path_pattern.h"

#include <initializer_list>

namespace luma::core {

namespace {

bool one_of(std::string_view v, std::initializer_list<std::string_view> words) noexcept {
  for (std::string_view w : words) {
    if (w.size() != v.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < w.size() && same; ++i) {
      char c = v[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      same = c == w[i];
    }
    if (same) return true;
  }
  return false;
}

}  // namespace

std::string trace_pattern_from_setting(std::string_view value) {
  if (value.empty() || one_of(value, {"0", "false", "no", "off"})) return {};
  if (one_of(value, {"1", "true", "yes", "on"})) return std::string(kDefaultTracePattern);
  return std::string(value);
}

std::string expand_path_pattern(std::string_view pattern, const PathFields& f) {
  std::string out;
  walk_path_pattern(
      pattern, [&](char c) { out += c; },
      [&](char k) {
        switch (k) {
          case 'p': out += std::to_string(f.pid); return true;
          case 'h': out += f.host; return true;
          case 'r': out += f.rank; return true;
          default:  // 'e'
            if (!f.exe) return false;
            out += *f.exe;
            return true;
        }
      });
  return out;
}

bool pattern_has_pid(std::string_view pattern) noexcept {
  bool pid = false;
  walk_path_pattern(pattern, [](char) {}, [&](char k) {
    pid = pid || k == 'p';
    return true;
  });
  return pid;
}

}  // namespace luma::core
