// fuzz_settings.cpp - libFuzzer target: the LUMA_CONF parser (core/settings/config.h), the LUMA_*
// table (shim/config/settings.h, pure: the environment comes in as a function) and the file name
// patterns of LUMA_STATS_FILE and LUMA_TRACE (core/io/path_pattern.h).
// None may throw or crash for any text; whatever parse_settings accepts must format and
// re-parse to the same settings; a pattern without '%' expands to itself.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "settings/config.h"
#include "config/settings.h"
#include "io/path_pattern.h"

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
  static const char* const kNames[] = {"LUMA_CONF",     "LUMA_STATS",   "LUMA_STATS_FILE",
                                       "LUMA_LOG_LEVEL", "LUMA_LOG_FILE", "LUMA_DISABLE",
                                       "LUMA_TRACE",    "LUMA_TRACE_STACKS", "LUMA_OOM_SNAPSHOT"};
  constexpr std::size_t kCount = sizeof kNames / sizeof kNames[0];
  std::vector<std::string> values;
  std::string_view rest = text;
  while (values.size() < kCount) {
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
  if (loaded.settings.trace_stacks > shim::kMaxTraceStacks) __builtin_trap();
  // The whole input as a LUMA_STATS_FILE and a LUMA_TRACE pattern.
  const std::string stats_path = core::expand_path_pattern(text, {4242, "host", "3", std::nullopt});
  const std::string trace_path =
      core::expand_path_pattern(core::trace_pattern_from_setting(text), {4242, "host", "3", "exe"});
  (void)core::pattern_has_pid(text);
  if (text.find('%') == std::string_view::npos && stats_path != text) __builtin_trap();
  (void)trace_path;
  return 0;
}
