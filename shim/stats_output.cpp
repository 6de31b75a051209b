// stats_output.cpp - see stats_output.h.
#include "stats_output.h"

namespace luma::shim {

std::string rank_from_env(const EnvLookup& getenv_fn) {
  for (const char* name : kRankVariables) {
    const char* v = getenv_fn ? getenv_fn(name) : nullptr;
    if (v != nullptr && *v != '\0') return v;
  }
  return "0";
}

std::string expand_stats_path(std::string_view pattern, long pid, std::string_view host,
                              std::string_view rank) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '%' || i + 1 == pattern.size()) {
      out += c;
      continue;
    }
    char k = pattern[++i];
    switch (k) {
      case 'p': out += std::to_string(pid); break;
      case 'h': out += host; break;
      case 'r': out += rank; break;
      case '%': out += '%'; break;
      default:
        out += '%';
        out += k;
    }
  }
  return out;
}

}  // namespace luma::shim
