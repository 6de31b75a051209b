// simulate_text.h - how `luma simulate` and `luma simulate --tune` write numbers and free
// paths, in one place so that both say the same thing the same way.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/constants.h"
#include "simulate/simulation.h"

namespace luma::tools {

// 30612 -> "30,612".
inline std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

inline std::string mib(std::uint64_t b) { return fmt::format("{:.1f} MiB", double(b) / double(1 << 20)); }

// a / peak live; 0 when nothing was live.
inline double ratio(std::uint64_t a, std::uint64_t peak_live) {
  return peak_live == 0 ? 0.0 : double(a) / double(peak_live);
}

// Driver allocations per 100 allocations.
inline double per_100(std::uint64_t driver_allocations, std::uint64_t allocations) {
  return allocations == 0 ? 0.0 : 100.0 * double(driver_allocations) / double(allocations);
}

// A size as LUMA_CONF takes it: with the largest of G, M, K that divides it, else bytes
// (the largest size, "no limit" for max_split_size, in bytes).
inline std::string conf_size(std::uint64_t v) {
  if (v == 0 || v == std::numeric_limits<std::size_t>::max()) return std::to_string(v);
  if (v % core::GiB == 0) return fmt::format("{}G", v / core::GiB);
  if (v % core::MiB == 0) return fmt::format("{}M", v / core::MiB);
  if (v % core::KiB == 0) return fmt::format("{}K", v / core::KiB);
  return std::to_string(v);
}

// "at-once from the start (why), then legacy from op 2,345 (why)".
inline std::string paths_text(const std::vector<core::PathSpan>& spans) {
  std::string text;
  for (std::size_t k = 0; k < spans.size(); ++k)
    text += k == 0 ? fmt::format("{} from the start ({})", core::free_path_name(spans[k].path), spans[k].why)
                   : fmt::format(", then {} from op {} ({})", core::free_path_name(spans[k].path),
                                 grouped(spans[k].from_op), spans[k].why);
  return text;
}

}  // namespace luma::tools
