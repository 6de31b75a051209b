// stats_format.cpp - DeviceStats as a memory_summary-style table and as JSON.
// Hand-written JSON through fmt: core/ does not depend on a JSON library.
#include "stats/stats_format.h"

#include <array>
#include <string_view>

#include <fmt/format.h>

namespace luma::core {
namespace {

// PyTorch's memory_summary is 75 columns between its borders.
constexpr int kWidth = 75;

// One metric's rows in memory_summary() and its keys in memory_stats().
struct SummaryRow {
  const char* json_name = nullptr;  // memory_stats() key
  const char* title = nullptr;      // memory_summary() row
  bool bytes = false;
  PoolCounter DeviceStats::*field = nullptr;
};

// Every pool metric of stats.h (LUMA_POOL_METRICS), in memory_summary()'s order.
constexpr std::array<SummaryRow, kPoolMetrics> kRows = [] {
  constexpr bool bytes = true, count = false;
  std::array<SummaryRow, kPoolMetrics> rows{};
#define LUMA_STATS_ROW(name, unit, title, row) rows[row] = {#name, title, unit, &DeviceStats::name};
  LUMA_POOL_METRICS(LUMA_STATS_ROW)
#undef LUMA_STATS_ROW
  return rows;
}();
static_assert(
    [] {
      for (const SummaryRow& r : kRows)
        if (r.field == nullptr) return false;
      return true;
    }(),
    "LUMA_POOL_METRICS: every summary_row from 0 to kPoolMetrics - 1 exactly once");

// One count line of the summary (under the table) and its JSON key: every call counter of
// stats.h (LUMA_CALL_COUNTERS, placed by its `line`) and the values derived from other
// fields, in the places the counters leave free. Text and JSON both walk this one table.
struct CountLine {
  const char* key = nullptr;    // JSON key; "" when the reference view's keys have it
  const char* label = nullptr;  // summary line; "" when the summary shows it elsewhere
  std::uint64_t (*value)(const DeviceStats&) noexcept = nullptr;
};

// Allocation calls served without a driver allocation.
std::uint64_t absorbed(const DeviceStats& s) noexcept {
  return s.alloc_calls > s.num_device_alloc ? s.alloc_calls - s.num_device_alloc : 0;
}

// The call counters PyTorch's memory_stats() has too, under the same names.
constexpr std::array<const char*, 4> kPyTorchCounters{"num_alloc_retries", "num_ooms", "num_device_alloc",
                                                      "num_device_free"};

#define LUMA_STATS_COUNT_ONE(...) +1
constexpr std::size_t kCountLineCount = 4 LUMA_CALL_COUNTERS(LUMA_STATS_COUNT_ONE);
#undef LUMA_STATS_COUNT_ONE

constexpr std::array<CountLine, kCountLineCount> kCountLines = [] {
  std::array<CountLine, kCountLineCount> lines{};
#define LUMA_STATS_LINE(name, line, label) \
  lines[line] = {#name, label, [](const DeviceStats& s) noexcept -> std::uint64_t { return s.name; }};
  LUMA_CALL_COUNTERS(LUMA_STATS_LINE)
#undef LUMA_STATS_LINE
  lines[3] = {"cache_absorbed_calls", "Allocation calls the cache absorbed", absorbed};
  lines[10] = {"", "Free blocks in the cache",
               [](const DeviceStats& s) noexcept -> std::uint64_t { return s.free_blocks; }};
  lines[11] = {"pending_free_blocks", "Freed blocks whose fence is pending",
               [](const DeviceStats& s) noexcept -> std::uint64_t { return s.pending_free_blocks; }};
  lines[12] = {"pending_free_bytes", "",
               [](const DeviceStats& s) noexcept -> std::uint64_t { return s.pending_free_bytes; }};
  return lines;
}();
static_assert(
    [] {
      for (const CountLine& l : kCountLines)
        if (l.value == nullptr) return false;
      return true;
    }(),
    "LUMA_CALL_COUNTERS and the derived lines: every line from 0 to kCountLineCount - 1 exactly once");

std::uint64_t clamp0(std::int64_t v) { return v < 0 ? 0 : static_cast<std::uint64_t>(v); }

// PyTorch's _format_size: the unit follows `pref` (the "all" row of the column), so the
// pool rows line up with it; 6 digits and a 3-letter unit.
std::string cell_bytes(std::uint64_t v, std::uint64_t pref) {
  static constexpr std::array<const char*, 6> units{"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t u = 0;
  double p = static_cast<double>(pref);
  while (u + 1 < units.size() && p >= 768.0 * 1024) {
    ++u;
    v /= 1024;
    p /= 1024;
  }
  return fmt::format("{:6d} {}", v, units[u]);
}

// PyTorch's _format_count: thousands with K / M.
std::string cell_count(std::uint64_t v, std::uint64_t pref) {
  static constexpr std::array<const char*, 3> units{" ", "K", "M"};
  std::size_t u = 0;
  double p = static_cast<double>(pref);
  while (u + 1 < units.size() && p >= 750.0 * 1000) {
    ++u;
    v /= 1000;
    p /= 1000;
  }
  return fmt::format("{:7d} {} ", v, units[u]);
}

void rule(std::string& out, char c) {
  out += '|';
  out.append(kWidth, c);
  out += "|\n";
}

void centered(std::string& out, std::string_view text) { out += fmt::format("|{:^75}|\n", text); }

void metric_block(std::string& out, const DeviceStats& s, const SummaryRow& m) {
  const PoolCounter& c = s.*m.field;
  const Counter& all = c.all;
  const std::array<std::uint64_t, 4> pref{clamp0(all.current), clamp0(all.peak), all.allocated, all.freed};
  auto row = [&](std::string_view name, const Counter& k) {
    const std::array<std::uint64_t, 4> v{clamp0(k.current), clamp0(k.peak), k.allocated, k.freed};
    std::array<std::string, 4> cells;
    for (std::size_t i = 0; i < 4; ++i) cells[i] = m.bytes ? cell_bytes(v[i], pref[i]) : cell_count(v[i], pref[i]);
    out += fmt::format("| {:<21} | {} | {} | {} | {} |\n", name, cells[0], cells[1], cells[2], cells[3]);
  };
  row(m.title, all);
  row("      from large pool", c.pool[static_cast<std::size_t>(Pool::large)]);
  row("      from small pool", c.pool[static_cast<std::size_t>(Pool::small)]);
  rule(out, '-');
}

void counter_line(std::string& out, std::string_view name, std::uint64_t value) {
  out += fmt::format("| {:<50} {:>22} |\n", name, value);
}


}  // namespace

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else out += ch;
    }
  }
  return out;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 6> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t u = 0;
  double v = static_cast<double>(bytes);
  while (u + 1 < units.size() && v >= 1024.0) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string format_stats_text(const std::vector<DeviceStats>& devices, const std::vector<StatsExtra>& extra) {
  std::string out;
  for (const StatsExtra& e : extra) out += fmt::format("{}: {}\n", e.key, e.value);
  if (devices.empty()) out += "luma: the cache served no device memory\n";
  for (const DeviceStats& s : devices) {
    rule(out, '=');
    centered(out, fmt::format("luma CUDA memory summary, device ID {}", s.device));
    rule(out, '-');
    out += fmt::format("|{:^37}|{:^37}|\n", fmt::format("CUDA OOMs: {}", s.num_ooms),
                       fmt::format("cudaMalloc retries: {}", s.num_alloc_retries));
    rule(out, '=');
    out += fmt::format("| {:^21} | {:^10} | {:^10} | {:^10} | {:^10} |\n", "Metric", "Cur Usage", "Peak Usage",
                       "Tot Alloc", "Tot Freed");
    rule(out, '-');
    for (const SummaryRow& m : kRows) metric_block(out, s, m);
    for (const CountLine& l : kCountLines)
      if (*l.label != '\0') counter_line(out, l.label, l.value(s));
    rule(out, '=');
  }
  return out;
}

std::string format_stats_json(const std::vector<DeviceStats>& devices, const std::vector<StatsExtra>& extra) {
  std::string out = "{";
  for (const StatsExtra& e : extra) {
    out += fmt::format("\"{}\": ", json_escape(e.key));
    out += e.quoted ? fmt::format("\"{}\"", json_escape(e.value)) : (e.value.empty() ? "null" : e.value);
    out += ", ";
  }
  out += "\"devices\": [";
  bool first_device = true;
  for (const DeviceStats& s : devices) {
    if (!first_device) out += ", ";
    first_device = false;
    const ReferenceStats r = reference_view(s);
    out += fmt::format(
        "{{\"device\": {}, \"allocated_bytes\": {}, \"reserved_bytes\": {}, \"peak_bytes\": {}, "
        "\"live_blocks\": {}, \"free_blocks\": {}, \"segments\": {}, \"cuda_malloc_calls\": {}, "
        "\"cuda_free_calls\": {}, ",
        s.device, r.allocated_bytes, r.reserved_bytes, r.peak_bytes, r.live_blocks, r.free_blocks, r.segments,
        r.cuda_malloc_calls, r.cuda_free_calls);
    out += fmt::format("\"peak_reserved_bytes\": {}, ", s.reserved_bytes.all.peak);
    for (const CountLine& l : kCountLines)
      if (*l.key != '\0') out += fmt::format("\"{}\": {}, ", l.key, l.value(s));
    // PyTorch's memory_stats(): flat "<metric>.<pool>.<counter>" keys.
    out += "\"memory_stats\": {";
    static constexpr std::array<const char*, 3> pools{"all", "large_pool", "small_pool"};
    for (const SummaryRow& m : kRows) {
      const PoolCounter& c = s.*m.field;
      const std::array<const Counter*, 3> counters{&c.all, &c.pool[static_cast<std::size_t>(Pool::large)],
                                                   &c.pool[static_cast<std::size_t>(Pool::small)]};
      for (std::size_t i = 0; i < 3; ++i) {
        const Counter& k = *counters[i];
        out += fmt::format("\"{0}.{1}.current\": {2}, \"{0}.{1}.peak\": {3}, \"{0}.{1}.allocated\": {4}, "
                           "\"{0}.{1}.freed\": {5}, ",
                           m.json_name, pools[i], k.current, k.peak, k.allocated, k.freed);
      }
    }
    // ... and the counters PyTorch's memory_stats() has at its top level.
    for (const char* key : kPyTorchCounters)
      for (const CountLine& l : kCountLines)
        if (std::string_view(l.key) == key) out += fmt::format("\"{}\": {}, ", key, l.value(s));
    out.resize(out.size() - 2);  // the last ", "
    out += "}}";
  }
  out += "]}\n";
  return out;
}

std::string format_forwarded_text(const std::vector<ForwardedPathStats>& paths) {
  std::string out;
  for (const ForwardedPathStats& p : paths) {
    if (p.alloc_calls == 0 && p.free_calls == 0) continue;
    if (out.empty()) {
      out += "Forwarded allocation paths (served by the driver, counted by luma):\n";
      out += fmt::format("  {:<62} {:>10} {:>12} {:>10}\n", "path", "allocs", "bytes", "frees");
    }
    out += fmt::format("  {:<62} {:>10} {:>12} {:>10}\n", p.path, p.alloc_calls,
                       format_bytes(p.alloc_bytes), p.free_calls);
  }
  return out;
}

std::string format_forwarded_json(const std::vector<ForwardedPathStats>& paths) {
  std::string out = "[";
  for (const ForwardedPathStats& p : paths) {
    if (out.size() > 1) out += ", ";
    out += fmt::format("{{\"path\": \"{}\", \"alloc_calls\": {}, \"alloc_bytes\": {}, \"free_calls\": {}}}",
                       json_escape(p.path), p.alloc_calls, p.alloc_bytes, p.free_calls);
  }
  return out + "]";
}

}  // namespace luma::core
