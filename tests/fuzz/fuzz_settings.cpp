// fuzz_settings.cpp - libFuzzer target: the LUMA_CONF parser (core/config.h) and the
// LUMA_* table (shim/settings.h, pure: the environment comes in as a function). Neither may
// throw or crash for any text; whatever parse_settings accepts must format and re-parse to
// the same settings.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "settings.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace luma;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  core::ParseResult r = core::parse_settings(text);
  (void)core::validate(r.settings.allocator);
  (void)core::parse_size(text);
  (void)core::parse_bool(text);
  if (r.errors.empty()) {
    // A setting accepted once is accepted again from its own formatting.
    const std::string again = core::format_settings(r.settings);
    core::ParseResult r2 = core::parse_settings(again);
    if (!r2.errors.empty() || core::format_settings(r2.settings) != again) __builtin_trap();
  }
  // The input split at NUL bytes gives the value of each LUMA_* variable in turn.
  static const char* const kNames[] = {"LUMA_CONF", "LUMA_STATS", "LUMA_STATS_FILE",
                                       "LUMA_LOG_LEVEL", "LUMA_LOG_FILE", "LUMA_DISABLE"};
  std::vector<std::string> values;
  std::string_view rest = text;
  while (values.size() < 6) {
    std::size_t nul = rest.find('\0');
    values.emplace_back(rest.substr(0, nul));
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  shim::LoadedSettings loaded = shim::read_settings([&](const char* name) -> const char* {
    for (std::size_t i = 0; i < values.size(); ++i)
      if (std::string_view(name) == kNames[i]) return values[i].c_str();
    return nullptr;
  });
  if (loaded.table.empty()) __builtin_trap();
  return 0;
}
