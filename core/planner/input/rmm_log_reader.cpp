// rmm_log_reader.cpp - reads an RMM allocation log into lifetimes.
#include "planner/input/rmm_log_reader.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "planner/planner_constants.h"
#include "planner/input/text_fields.h"

namespace luma::core {

namespace {

bool is_rmm_header(const std::vector<std::string_view>& f) {
  return f.size() == 6 && f[0] == "Thread" && f[1] == "Time" && f[2] == "Action" &&
         f[3] == "Pointer" && f[4] == "Size" && f[5] == "Stream";
}

constexpr std::uint64_t kNsPerSecond = 1'000'000'000;
constexpr std::uint64_t kNsPerDay = 86'400 * kNsPerSecond;

}  // namespace

std::optional<std::uint64_t> parse_rmm_time(std::string_view f) {
  // HH:MM:SS, then optionally '.' and 1..9 digits.
  auto two = [&](std::size_t at, unsigned max) -> std::optional<std::uint64_t> {
    if (f.size() < at + 2 || f[at] < '0' || f[at] > '9' || f[at + 1] < '0' || f[at + 1] > '9') return std::nullopt;
    const unsigned v = unsigned(f[at] - '0') * 10 + unsigned(f[at + 1] - '0');
    if (v > max) return std::nullopt;
    return v;
  };
  const auto h = two(0, 23), m = two(3, 59), s = two(6, 60);  // 60: a leap second
  if (!h || !m || !s || f[2] != ':' || f[5] != ':') return std::nullopt;
  std::uint64_t ns = ((*h * 60 + *m) * 60 + *s) * kNsPerSecond;
  if (f.size() == 8) return ns;
  if (f[8] != '.' || f.size() == 9 || f.size() > 18) return std::nullopt;
  std::uint64_t frac = 0, scale = kNsPerSecond;
  for (std::size_t i = 9; i < f.size(); ++i) {
    if (f[i] < '0' || f[i] > '9') return std::nullopt;
    scale /= 10;
    frac += std::uint64_t(f[i] - '0') * scale;
  }
  return ns + frac;
}

bool RmmLogReader::accepts(std::string_view head) const {
  return is_rmm_header(text::split_commas(text::first_line(head)));
}

std::vector<Lifetime> RmmLogReader::read(std::istream& in, const std::string& source) const {
  return read_log(in, source).lifetimes;
}

namespace {
// The index of `value` among the distinct values seen so far (appended when new).
std::uint32_t value_index(std::unordered_map<std::string, std::uint32_t>& index, std::vector<std::string>& values,
                          std::string_view value) {
  const auto [it, added] = index.try_emplace(std::string(value), static_cast<std::uint32_t>(values.size()));
  if (added) values.emplace_back(value);
  return it->second;
}
}  // namespace

RmmLog RmmLogReader::read_log(std::istream& in, const std::string& source) const {
  RmmLog log;
  std::vector<Lifetime>& lifetimes = log.lifetimes;
  std::unordered_map<std::uint64_t, std::size_t> live;  // pointer -> index in lifetimes
  std::string line;
  std::size_t line_no = 0;
  std::uint64_t time = 0;  // index among allocate/free rows
  bool clock_ok = true;    // every row's Time parsed so far (RmmLog::row_time_ns)
  std::uint64_t first_clock = 0, last_clock = 0, day_offset = 0;
  std::unordered_map<std::string, std::uint32_t> thread_index, stream_index;
  auto fail = [&](const std::string& what) -> void {
    throw PlanInputError(source + ":" + std::to_string(line_no) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view view = line_no == 1 ? text::first_line(line) : text::trim(line);
    if (line_no == 1) {
      if (!is_rmm_header(text::split_commas(view)))
        fail("expected the header 'Thread,Time,Action,Pointer,Size,Stream'");
      continue;
    }
    if (view.empty()) continue;
    auto f = text::split_commas(view);
    if (f.size() != 6) fail("expected 6 fields, found " + std::to_string(f.size()));
    std::string_view action = f[2];
    const bool failure = action == "allocate failure";
    if (!failure && action != "allocate" && action != "free")
      fail("unknown action '" + std::string(action) +
           "' (expected allocate, free or allocate failure)");
    auto size = text::parse_u64(f[4]);
    if (!size) fail("size is not an unsigned integer: '" + std::string(f[4]) + "'");
    if (failure) {  // nothing was handed out: no lifetime, no time; any size may be refused
      log.failures.push_back({time, *size});
      continue;
    }
    if (clock_ok) {
      if (const auto t = parse_rmm_time(f[1])) {
        std::uint64_t clock = *t + day_offset;
        if (!log.row_time_ns.empty() && clock + kNsPerDay / 2 < last_clock) {  // midnight passed
          day_offset += kNsPerDay;
          clock += kNsPerDay;
        }
        if (log.row_time_ns.empty()) first_clock = clock;
        last_clock = std::max(last_clock, clock);
        log.row_time_ns.push_back(last_clock - first_clock);
      } else {
        clock_ok = false;
        log.row_time_ns.clear();
        log.row_time_ns.shrink_to_fit();
      }
    }
    log.row_thread.push_back(value_index(thread_index, log.threads, f[0]));
    log.row_stream.push_back(value_index(stream_index, log.streams, f[5]));
    auto pointer = text::parse_u64(f[3], /*allow_hex=*/true);
    if (!pointer) fail("pointer is not a number: '" + std::string(f[3]) + "'");
    if (*size > (std::uint64_t{1} << 62)) fail("size is implausibly large");
    if (action == "allocate") {
      if (live.count(*pointer))
        fail("allocate of pointer " + std::string(f[3]) + " which is already live");
      Lifetime lt;
      lt.id = std::to_string(lifetimes.size());
      lt.lower = time;
      lt.upper = time;  // set at its free, or at the end of the log
      lt.size = *size;
      lt.alignment = planner::kRmmAlignment;
      live.emplace(*pointer, lifetimes.size());
      lifetimes.push_back(std::move(lt));
      log.freed.push_back(false);
    } else {
      auto it = live.find(*pointer);
      if (it == live.end()) fail("free of unknown pointer " + std::string(f[3]));
      lifetimes[it->second].upper = time;
      log.freed[it->second] = true;
      live.erase(it);
    }
    ++time;
  }
  if (line_no == 0) throw PlanInputError(source + ": empty file");
  // Never freed: live to the end of the log (one past the last event).
  for (const auto& [pointer, index] : live) lifetimes[index].upper = time;
  log.rows = time;
  return log;
}

}  // namespace luma::core
