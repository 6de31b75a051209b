// settings.h - every LUMA_* environment variable, read once into one table of
// {name, default, value} (mimalloc's options table). A bad value gives one message naming
// the variable and keeps the default; nothing here can stop the host program.
// Pure: the environment comes in as a lookup function, so tests need no real environment.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "settings/config.h"

namespace luma::shim {

enum class StatsFormat { text, json, off };
// spdlog's levels, by name, kept out of this header so pure code needs no spdlog.
enum class LogLevel { trace, debug, info, warn, err, off };

struct ShimSettings {
  core::Settings core;          // LUMA_CONF
  StatsFormat stats = StatsFormat::text;
  std::string stats_file;       // empty: stderr
  LogLevel log_level = LogLevel::warn;
  std::string log_file;         // empty: stderr
  bool disable = false;         // LUMA_DISABLE: forward every call untouched
  std::string trace;            // LUMA_TRACE: the trace file pattern; empty: no trace
  unsigned trace_stacks = 0;    // LUMA_TRACE_STACKS: return addresses per alloc; 0: none
  unsigned trace_python = 32;   // LUMA_TRACE_PYTHON: Python frames per alloc (with stacks)
  std::string plan;             // LUMA_PLAN: a plan file to replay (docs/plan-replay.md)
  std::string oom_snapshot;     // LUMA_OOM_SNAPSHOT: snapshot file pattern; empty: none
  std::string live_dir = "/dev/shm";  // LUMA_LIVE_DIR: where the live record goes; empty: off
  bool live_dir_set = false;    // LUMA_LIVE_DIR was given (a failure there is a warning)
};

// The most return addresses LUMA_TRACE_STACKS may ask for (the trace format's limit).
inline constexpr unsigned kMaxTraceStacks = 128;
// The most Python frames LUMA_TRACE_PYTHON may ask for (the trace format's limit).
inline constexpr unsigned kMaxTracePython = 64;

struct SettingRow {
  std::string name;
  std::string default_value;
  std::string value;  // what is in effect (the default when unset or bad)
  std::string description;
};

struct LoadedSettings {
  ShimSettings settings;
  std::vector<SettingRow> table;
  std::vector<std::string> errors;  // one line each, naming the variable
};

using EnvLookup = std::function<const char*(const char*)>;

LoadedSettings read_settings(const EnvLookup& getenv_fn);

const char* stats_format_name(StatsFormat f) noexcept;
const char* log_level_name(LogLevel l) noexcept;

}  // namespace luma::shim
