// settings.cpp - reads the LUMA_* variables (see settings.h and docs/settings.md).
// Must never throw out of read_settings for any input, nor print: the caller logs errors.
#include "settings.h"

#include "trace_path.h"

#include <array>
#include <charconv>
#include <string_view>
#include <utility>

namespace luma::shim {
namespace {

template <typename E, std::size_t N>
bool parse_enum(std::string_view text, const std::array<std::pair<const char*, E>, N>& names,
                E* out) {
  for (const auto& [name, value] : names) {
    if (text == name) {
      *out = value;
      return true;
    }
  }
  return false;
}

template <typename E, std::size_t N>
std::string choices(const std::array<std::pair<const char*, E>, N>& names) {
  std::string s;
  for (const auto& [name, value] : names) {
    if (!s.empty()) s += '|';
    s += name;
  }
  return s;
}

constexpr std::array<std::pair<const char*, StatsFormat>, 3> kStatsNames{{
    {"text", StatsFormat::text}, {"json", StatsFormat::json}, {"off", StatsFormat::off}}};
constexpr std::array<std::pair<const char*, LogLevel>, 7> kLogNames{{{"trace", LogLevel::trace},
                                                                     {"debug", LogLevel::debug},
                                                                     {"info", LogLevel::info},
                                                                     {"warn", LogLevel::warn},
                                                                     {"warning", LogLevel::warn},
                                                                     {"error", LogLevel::err},
                                                                     {"off", LogLevel::off}}};
constexpr std::array<std::pair<const char*, bool>, 8> kBoolNames{{{"1", true},
                                                                  {"0", false},
                                                                  {"true", true},
                                                                  {"false", false},
                                                                  {"yes", true},
                                                                  {"no", false},
                                                                  {"on", true},
                                                                  {"off", false}}};

}  // namespace

const char* stats_format_name(StatsFormat f) noexcept {
  switch (f) {
    case StatsFormat::text: return "text";
    case StatsFormat::json: return "json";
    case StatsFormat::off: return "off";
  }
  return "?";
}

const char* log_level_name(LogLevel l) noexcept {
  switch (l) {
    case LogLevel::trace: return "trace";
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::err: return "error";
    case LogLevel::off: return "off";
  }
  return "?";
}


LoadedSettings read_settings(const EnvLookup& getenv_fn) {
  LoadedSettings out;
  ShimSettings& s = out.settings;
  auto get = [&](const char* name) -> const char* {
    const char* v = getenv_fn ? getenv_fn(name) : nullptr;
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  auto bad = [&](const char* name, std::string_view value, const std::string& expected,
                 const std::string& fallback) {
    out.errors.push_back(std::string(name) + "='" + std::string(value) + "' is not " + expected +
                         "; using " + fallback);
  };

  if (const char* v = get("LUMA_CONF")) {
    core::ParseResult r = core::parse_settings(v, s.core);
    s.core = r.settings;
    for (const std::string& e : r.errors) out.errors.push_back("LUMA_CONF: " + e);
  }
  out.table.push_back({"LUMA_CONF", "", core::format_settings(s.core),
                       "allocator settings key:value,... (see the LUMA_CONF keys)"});

  if (const char* v = get("LUMA_STATS")) {
    if (!parse_enum(v, kStatsNames, &s.stats))
      bad("LUMA_STATS", v, "one of " + choices(kStatsNames), "text");
  }
  out.table.push_back({"LUMA_STATS", "text", stats_format_name(s.stats),
                       "statistics at exit: text table, json, or off"});

  if (const char* v = get("LUMA_STATS_FILE")) s.stats_file = v;
  out.table.push_back({"LUMA_STATS_FILE", "", s.stats_file,
                       "write the statistics to this file instead of stderr; %p pid, %h host, "
                       "%r rank, %% a percent sign"});

  if (const char* v = get("LUMA_LOG_LEVEL")) {
    if (!parse_enum(v, kLogNames, &s.log_level))
      bad("LUMA_LOG_LEVEL", v, "one of trace|debug|info|warn|error|off", "warn");
  }
  out.table.push_back({"LUMA_LOG_LEVEL", "warn", log_level_name(s.log_level),
                       "what luma logs: trace|debug|info|warn|error|off"});

  if (const char* v = get("LUMA_LOG_FILE")) s.log_file = v;
  out.table.push_back({"LUMA_LOG_FILE", "", s.log_file, "append log lines to this file "
                                                         "instead of stderr"});

  if (const char* v = get("LUMA_DISABLE")) {
    if (!parse_enum(v, kBoolNames, &s.disable)) bad("LUMA_DISABLE", v, "a boolean (1|0)", "0");
  }
  out.table.push_back({"LUMA_DISABLE", "0", s.disable ? "1" : "0",
                       "1: forward every call to the driver untouched, print nothing"});

  if (const char* v = get("LUMA_TRACE")) s.trace = trace_pattern_from_setting(v);
  out.table.push_back({"LUMA_TRACE", "", s.trace,
                       "record every allocator event to this file; 1: luma.%e.%p.trace; %p pid, "
                       "%h host, %r rank, %e executable, %% a percent sign"});

  if (const char* v = get("LUMA_TRACE_STACKS")) {
    const std::string_view text(v);
    unsigned n = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size() || n > kMaxTraceStacks)
      bad("LUMA_TRACE_STACKS", v, "a number of frames 0.." + std::to_string(kMaxTraceStacks),
          "0");
    else
      s.trace_stacks = n;
  }
  out.table.push_back({"LUMA_TRACE_STACKS", "0", std::to_string(s.trace_stacks),
                       "with LUMA_TRACE: record up to N return addresses with each alloc"});

  // Read (and refused with one line, if it must be) when the first device is served,
  // where the plan's fingerprint can be checked against the devices (plan_loader.h).
  // Blank (only spaces or tabs) counts as unset, like an empty value: no file has that name.
  if (const char* v = get("LUMA_PLAN"); v != nullptr && std::string_view(v).find_first_not_of(" \t\n") != std::string_view::npos)
    s.plan = v;
  out.table.push_back({"LUMA_PLAN", "", s.plan,
                       "serve each device from this plan (luma plan -o) while the run follows "
                       "it; empty: the caching allocator only"});
  return out;
}

}  // namespace luma::shim
