// settings.cpp - reads the LUMA_* variables (see settings.h and docs/settings.md).
// Must never throw out of read_settings for any input, nor print: the caller logs errors.
#include "config/settings.h"

#include "io/path_pattern.h"
#include "live/live_record.h"

#include <array>
#include <charconv>
#include <string_view>
#include <utility>
#include <vector>

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


namespace {

// One row per LUMA_* variable: its name, its default as a user writes it, what it does,
// how a set value is applied and how the value in effect is shown. Everything about a
// variable is written here once (docs/settings.md is the user's copy of this table).
struct Variable {
  const char* name;
  const char* default_value;
  const char* description;
  // Applies a set (non-empty) value; returns "" or, when the value is refused, what was
  // expected ("one of text|json|off"). May add lines of its own to `notes`.
  std::string (*apply)(std::string_view value, ShimSettings& s, std::vector<std::string>& notes);
  std::string (*show)(const ShimSettings& s);
};

const Variable kVariables[] = {
    {"LUMA_CONF", "", "allocator settings key:value,... (see the LUMA_CONF keys)",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>& notes) {
       core::ParseResult r = core::parse_settings(std::string(v), s.core);
       s.core = r.settings;
       for (const std::string& e : r.errors) notes.push_back("LUMA_CONF: " + e);
       return std::string();
     },
     [](const ShimSettings& s) { return core::format_settings(s.core); }},
    {"LUMA_STATS", "text", "statistics at exit: text table, json, or off",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       return parse_enum(v, kStatsNames, &s.stats) ? std::string() : "one of " + choices(kStatsNames);
     },
     [](const ShimSettings& s) { return std::string(stats_format_name(s.stats)); }},
    {"LUMA_STATS_FILE", "",
     "write the statistics to this file instead of stderr; %p pid, %h host, %r rank, %% a "
     "percent sign",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       s.stats_file = v;
       return std::string();
     },
     [](const ShimSettings& s) { return s.stats_file; }},
    {"LUMA_LOG_LEVEL", "warn", "what luma logs: trace|debug|info|warn|error|off",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       return parse_enum(v, kLogNames, &s.log_level) ? std::string()
                                                     : "one of trace|debug|info|warn|error|off";
     },
     [](const ShimSettings& s) { return std::string(log_level_name(s.log_level)); }},
    {"LUMA_LOG_FILE", "", "append log lines to this file instead of stderr",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       s.log_file = v;
       return std::string();
     },
     [](const ShimSettings& s) { return s.log_file; }},
    {"LUMA_DISABLE", "0", "1: forward every call to the driver untouched, print nothing",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       return parse_enum(v, kBoolNames, &s.disable) ? std::string() : "a boolean (1|0)";
     },
     [](const ShimSettings& s) { return std::string(s.disable ? "1" : "0"); }},
    {"LUMA_TRACE", "",
     "record every allocator event to this file; 1: luma.%e.%p.trace; %p pid, %h host, %r "
     "rank, %e executable, %% a percent sign",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       s.trace = core::trace_pattern_from_setting(std::string(v));
       return std::string();
     },
     [](const ShimSettings& s) { return s.trace; }},
    {"LUMA_TRACE_STACKS", "0", "with LUMA_TRACE: record up to N return addresses with each alloc",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       unsigned n = 0;
       auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
       if (ec != std::errc{} || end != v.data() + v.size() || n > kMaxTraceStacks)
         return "a number of frames 0.." + std::to_string(kMaxTraceStacks);
       s.trace_stacks = n;
       return std::string();
     },
     [](const ShimSettings& s) { return std::to_string(s.trace_stacks); }},
    {"LUMA_TRACE_PYTHON", "32",
     "with LUMA_TRACE_STACKS, in a Python program (CPython 3.10-3.13): record up to N "
     "Python frames (file, function, line) with each alloc, GIL held or not; 0: none",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       unsigned n = 0;
       auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
       if (ec != std::errc{} || end != v.data() + v.size() || n > kMaxTracePython)
         return "a number of frames 0.." + std::to_string(kMaxTracePython);
       s.trace_python = n;
       return std::string();
     },
     [](const ShimSettings& s) { return std::to_string(s.trace_python); }},
    // Read (and refused with one line, if it must be) when the first device is served,
    // where the plan's fingerprint can be checked against the devices (plan_loader.h).
    // Blank (only spaces or tabs) counts as unset, like an empty value: no file has that name.
    {"LUMA_PLAN", "",
     "serve each device from this plan (luma plan -o) while the run follows it; empty: the "
     "caching allocator only",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       if (v.find_first_not_of(" \t\n") != std::string_view::npos) s.plan = v;
       return std::string();
     },
     [](const ShimSettings& s) { return s.plan; }},
    {"LUMA_OOM_SNAPSHOT", "",
     "at the first out-of-memory error, write the allocator's snapshot (PyTorch's memory "
     "viewer format) to this file; %p pid, %h host, %r rank, %e executable, %% a percent sign",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       if (v.find_first_not_of(" \t\n") != std::string_view::npos) s.oom_snapshot = v;
       return std::string();
     },
     [](const ShimSettings& s) { return s.oom_snapshot; }},
    // The directory must be absolute: `luma top` and `luma exporter` look there from
    // wherever they run. docs/live-record.md.
    {"LUMA_LIVE_DIR", core::live::kDefaultDir,
     "publish this process's live statistics (luma top, luma exporter) in a file of this "
     "directory, removed at exit; off: publish nothing",
     [](std::string_view v, ShimSettings& s, std::vector<std::string>&) {
       if (v == "off") {
         s.live_dir.clear();
       } else {
         if (v.empty() || v[0] != '/') return std::string("an absolute directory or off");
         while (v.size() > 1 && v.back() == '/') v.remove_suffix(1);
         s.live_dir = v;
       }
       s.live_dir_set = true;
       return std::string();
     },
     [](const ShimSettings& s) { return s.live_dir.empty() ? std::string("off") : s.live_dir; }},
};

}  // namespace

LoadedSettings read_settings(const EnvLookup& getenv_fn) {
  LoadedSettings out;
  for (const Variable& var : kVariables) {
    const char* v = getenv_fn ? getenv_fn(var.name) : nullptr;
    if (v != nullptr && *v != '\0') {
      const std::string expected = var.apply(v, out.settings, out.errors);
      if (!expected.empty()) {
        out.errors.push_back(std::string(var.name) + "='" + v + "' is not " + expected +
                             "; using " + var.default_value);
      }
    }
    out.table.push_back({var.name, var.default_value, var.show(out.settings), var.description});
  }
  return out;
}

}  // namespace luma::shim
