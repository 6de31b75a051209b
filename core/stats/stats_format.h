// stats_format.h - the statistics of every device as text (a table in the shape of
// PyTorch's torch.cuda.memory_summary()) and as JSON (the reference design's names at the
// top of each device object, PyTorch's memory_stats() keys under "memory_stats").
//
// Pure functions of their arguments: no I/O, no locks, no globals; the caller decides
// where the string goes (the shim writes it with plain write()s at exit).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stats/stats.h"

namespace luma::core {

// One extra key/value the caller adds to the output (the shim: free_sync policy, pid...).
// JSON puts them at the top level; text prints them as "key: value" lines above the tables.
struct StatsExtra {
  std::string key;
  std::string value;   // already rendered
  bool quoted = true;  // JSON: a string (escaped and quoted) or a raw number / boolean

  static StatsExtra text(std::string key, std::string value) { return {std::move(key), std::move(value), true}; }
  static StatsExtra number(std::string key, std::int64_t value) {
    return {std::move(key), std::to_string(value), false};
  }
  static StatsExtra flag(std::string key, bool value) { return {std::move(key), value ? "true" : "false", false}; }
};

// PyTorch's memory_summary() layout, one table per device: Metric | Cur Usage | Peak Usage
// | Tot Alloc | Tot Freed, each metric with "from large pool" / "from small pool" rows,
// then the call counters (driver allocations and frees, calls the cache absorbed,
// retries, OOMs, fence waits, empty_cache calls, invalid frees).
std::string format_stats_text(const std::vector<DeviceStats>& devices,
                              const std::vector<StatsExtra>& extra = {});

// {"<extra keys>": ..., "devices": [{"device": 0, "allocated_bytes": ..., ...,
//  "alloc_calls": ..., "memory_stats": {"allocated_bytes.all.current": ..., ...}}]}
std::string format_stats_json(const std::vector<DeviceStats>& devices,
                              const std::vector<StatsExtra>& extra = {});

// One allocation path luma forwards to the driver and counts (the shim's list of paths):
// the program's stream-ordered, managed and pinned host allocations.
struct ForwardedPathStats {
  std::string path;  // what the output calls it
  std::uint64_t alloc_calls = 0;
  std::uint64_t alloc_bytes = 0;
  std::uint64_t free_calls = 0;
};

// "Forwarded allocation paths": one row per path with a call, as a text table; "" when no
// path had one.
std::string format_forwarded_text(const std::vector<ForwardedPathStats>& paths);
// The same as a JSON array of {"path", "alloc_calls", "alloc_bytes", "free_calls"} (every
// path, zeros included, so a reader finds each key), for a raw StatsExtra.
std::string format_forwarded_json(const std::vector<ForwardedPathStats>& paths);

// "512 B", "1.5 MiB": a byte count in the largest binary unit that keeps it >= 1.
std::string format_bytes(std::uint64_t bytes);

// `s` with JSON's string escapes applied (no quotes added); shared with
// replay_stats_format.cpp, which writes JSON the same hand-written way.
std::string json_escape(std::string_view s);

}  // namespace luma::core
