// stats_compare.cpp - `luma stats A B --compare` (see stats_compare.h): each run read twice
// more, once for each device's peak of allocated and once up to it, keeping what was live
// then by call site and by the stage it was allocated in.
#include "report/stats_compare.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace luma::tools {

std::string bytes_text(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

namespace {

constexpr std::size_t kRowsShown = 10;
constexpr const char* kOutsideStages = "(outside every stage)";
const std::string kNoSiteKey = "\x01";  // allocations recorded without a call site

struct SiteLive {
  std::vector<SiteFrame> frames;
  bool recorded = true;  // false: the allocations record no call site
  std::uint64_t bytes = 0, count = 0;
};

// What one device of one run held at its peak of allocated.
struct DevicePeak {
  std::uint64_t peak = 0;
  std::optional<std::uint64_t> peak_reserved;  // where the run records segments
  std::map<std::string, SiteLive> sites;        // by site key (its frames)
  std::map<std::string, std::uint64_t> stages;  // by stage name (all outside one without stages)
  bool staged = false;                          // the run records stages
};

// A site's frames as a key that matches across runs: names where they are known (a
// snapshot's, a symbolized trace's), else addresses.
std::string site_key(const std::vector<SiteFrame>& frames) {
  std::string k;
  for (const SiteFrame& f : frames) {
    if (f.address != 0 && f.function.empty())
      k += fmt::format("0x{:x}", f.address);
    else
      k += fmt::format("{}\x1f{}\x1f{}\x1f{}", f.function, f.file, f.line, f.module);
    k += '\x1e';
  }
  return k;
}

// The innermost stage open at each time of one device's events (which come in time order).
class StageAt {
 public:
  StageAt(const core::TorchSnapshot& snap, int device) {
    for (const core::TorchStage& s : snap.stages)
      if (s.device == -1 || s.device == device) stages_.push_back(&s);
    std::stable_sort(stages_.begin(), stages_.end(),
                     [](const core::TorchStage* a, const core::TorchStage* b) { return a->start_ns < b->start_ns; });
  }
  const std::string& at(std::uint64_t t) {
    while (next_ < stages_.size() && stages_[next_]->start_ns <= t) open_.push_back(stages_[next_++]);
    std::erase_if(open_, [t](const core::TorchStage* s) { return s->end_ns < t; });
    return open_.empty() ? outside_ : open_.back()->name;
  }

 private:
  std::vector<const core::TorchStage*> stages_, open_;
  std::size_t next_ = 0;
  const std::string outside_ = kOutsideStages;
};

std::map<int, DevicePeak> peaks_of(const CompareSide& side) {
  RecordedRun& run = *side.run;
  struct State {
    std::map<std::uint64_t, std::uint64_t> live;  // address -> size (pass 1)
    std::uint64_t allocated = 0, peak = 0, peak_index = 0;
    bool peaked = false;
  };
  std::map<int, State> states;
  // Pass 1: each device's peak of allocated, first reached (as stats counts it).
  run.read(
      [&](const core::TraceEvent& e) {
        State& d = states[e.device];
        if (e.kind == core::EventKind::alloc) {
          if (auto it = d.live.find(e.address); it != d.live.end()) d.allocated -= it->second;
          d.live[e.address] = e.size;
          d.allocated += e.size;
          if (d.allocated > d.peak) {
            d.peak = d.allocated;
            d.peak_index = e.index;
            d.peaked = true;
          }
        } else if (e.kind == core::EventKind::free_requested) {
          if (auto it = d.live.find(e.address); it != d.live.end()) {
            d.allocated -= it->second;
            d.live.erase(it);
          }
        }
      },
      false);
  // Pass 2: up to each device's peak, what is live: its site and its stage.
  struct Live {
    std::uint64_t size = 0;
    std::string site, stage;
  };
  std::map<int, std::map<std::uint64_t, Live>> live;
  std::map<int, StageAt> stage_at;
  const core::TorchSnapshot* snap = run.torch_snapshot();
  const bool stages = snap != nullptr && !snap->stages.empty() && run.records_times();
  std::unordered_map<std::uint32_t, std::string> key_of_site;
  std::map<std::string, SiteLive> site_info;
  run.read(
      [&](const core::TraceEvent& e) {
        const State& d = states[e.device];
        if (!d.peaked || e.index > d.peak_index) return;
        auto& l = live[e.device];
        if (e.kind == core::EventKind::alloc) {
          Live x{e.size, kNoSiteKey, {}};
          if (e.stack != 0) {
            const std::uint32_t site = side.sites->site_of(e.stack);
            auto [it, added] = key_of_site.try_emplace(site);
            if (added) {
              it->second = site_key(side.sites->frames(site));
              site_info.try_emplace(it->second, SiteLive{side.sites->frames(site), true, 0, 0});
            }
            x.site = it->second;
          }
          if (stages) x.stage = stage_at.try_emplace(e.device, *snap, e.device).first->second.at(e.time_ns);
          l[e.address] = std::move(x);
        } else if (e.kind == core::EventKind::free_requested) {
          l.erase(e.address);
        }
      },
      false);
  std::map<int, DevicePeak> out;
  for (const auto& [n, d] : states) {
    DevicePeak& p = out[n];
    p.peak = d.peak;
    p.staged = stages;
    if (run.records_segments() && side.stats)
      for (const DeviceRunStats& s : side.stats->devices)
        if (s.device == n) p.peak_reserved = s.peak_reserved;
    for (const auto& [address, x] : live[n]) {
      SiteLive& site = p.sites[x.site];
      if (x.site == kNoSiteKey) site.recorded = false;
      else if (site.frames.empty()) site.frames = site_info[x.site].frames;
      site.bytes += x.size;
      ++site.count;
      p.stages[stages ? x.stage : kOutsideStages] += x.size;
    }
  }
  return out;
}


std::string signed_bytes(std::int64_t d) {
  const std::uint64_t mag = d < 0 ? std::uint64_t(0) - std::uint64_t(d) : std::uint64_t(d);
  // One format call rather than const char* + std::string: GCC 12 at -O3 warns (-Wrestrict,
  // a false positive) on the inlined concatenation.
  return fmt::format("{}{}", d < 0 ? "-" : d > 0 ? "+" : "", bytes_text(mag));
}

std::int64_t difference(std::uint64_t a, std::uint64_t b) { return std::int64_t(b) - std::int64_t(a); }

// (B - A) / A in %, none when A is 0.
std::optional<double> percent(std::uint64_t a, std::uint64_t b) {
  if (a == 0) return std::nullopt;
  return 100.0 * double(difference(a, b)) / double(a);
}

std::string percent_text(std::uint64_t a, std::uint64_t b) {
  const std::optional<double> p = percent(a, b);
  return p ? fmt::format("{:+.1f}%", *p) : std::string("n/a: A is 0");
}

nlohmann::json peak_json(std::uint64_t a, std::uint64_t b) {
  const std::optional<double> p = percent(a, b);
  return {{"a_bytes", a}, {"b_bytes", b}, {"difference_bytes", difference(a, b)},
          {"difference_percent", p ? nlohmann::json(*p) : nlohmann::json(nullptr)}};
}

nlohmann::json frames_json(const std::vector<SiteFrame>& frames) {
  nlohmann::json out = nlohmann::json::array();
  for (const SiteFrame& f : frames) {
    nlohmann::json j = {{"function", f.function}, {"file", f.file}, {"line", f.line}};
    if (f.address != 0) {
      j["address"] = f.address;
      j["module"] = f.module;
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::string frame_text(const SiteFrame& f) {
  if (f.address != 0 && f.function.empty()) return fmt::format("0x{:x}", f.address);
  if (f.line > 0 || f.python) return fmt::format("{}:{} {}", f.file, f.line, f.function);
  if (f.file.empty() || f.file == "??") return f.address ? fmt::format("{} in {}", f.function, f.module) : f.function;
  return fmt::format("{} in {}", f.function, f.file);
}

struct Row {
  std::string key;
  const SiteLive* a = nullptr;  // null: none live in that run at its peak
  const SiteLive* b = nullptr;
  std::uint64_t a_bytes = 0, b_bytes = 0, a_count = 0, b_count = 0;
  std::int64_t diff() const { return difference(a_bytes, b_bytes); }
};

// The union of two maps' keys as rows, largest absolute difference first (then by key).
template <typename Map, typename Fill>
std::vector<Row> rows_of(const Map& a, const Map& b, Fill fill) {
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  std::vector<Row> rows;
  for (const std::string& k : keys) {
    Row r;
    r.key = k;
    if (auto it = a.find(k); it != a.end()) fill(r, it->second, true);
    if (auto it = b.find(k); it != b.end()) fill(r, it->second, false);
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) {
    const auto mag = [](std::int64_t d) { return d < 0 ? std::uint64_t(0) - std::uint64_t(d) : std::uint64_t(d); };
    return mag(x.diff()) > mag(y.diff());
  });
  return rows;
}

std::vector<Row> site_rows(const DevicePeak& a, const DevicePeak& b) {
  return rows_of(a.sites, b.sites, [](Row& r, const SiteLive& s, bool is_a) {
    (is_a ? r.a : r.b) = &s;
    (is_a ? r.a_bytes : r.b_bytes) = s.bytes;
    (is_a ? r.a_count : r.b_count) = s.count;
  });
}

std::vector<Row> stage_rows(const DevicePeak& a, const DevicePeak& b) {
  return rows_of(a.stages, b.stages, [](Row& r, std::uint64_t bytes, bool is_a) {
    (is_a ? r.a_bytes : r.b_bytes) = bytes;
  });
}

const SiteLive& site_of_row(const Row& r) { return r.a ? *r.a : *r.b; }

}  // namespace

void print_comparison(CompareSide a, CompareSide b, bool json, bool full) {
  const std::map<int, DevicePeak> pa = peaks_of(a), pb = peaks_of(b);
  std::set<int> devices;
  for (const auto& [n, p] : pa) devices.insert(n);
  for (const auto& [n, p] : pb) devices.insert(n);
  const DevicePeak none;
  const auto side_of = [&](const std::map<int, DevicePeak>& m, int n) -> const DevicePeak& {
    const auto it = m.find(n);
    return it == m.end() ? none : it->second;
  };
  const bool reserved = a.run->records_segments() && b.run->records_segments();
  const bool pytorch = a.run->torch_snapshot() != nullptr && b.run->torch_snapshot() != nullptr;
  if (json) {
    nlohmann::json out = {{"a", {{"file", a.run->path()}, {"format", a.run->format()}}},
                          {"b", {{"file", b.run->path()}, {"format", b.run->format()}}},
                          {"devices", nlohmann::json::array()}};
    for (int n : devices) {
      const DevicePeak &x = side_of(pa, n), &y = side_of(pb, n);
      const std::vector<Row> sites = site_rows(x, y);
      nlohmann::json srows = nlohmann::json::array();
      for (std::size_t i = 0; i < sites.size() && (full || i < kRowsShown); ++i) {
        const Row& r = sites[i];
        const SiteLive& s = site_of_row(r);
        srows.push_back({{"frames", s.recorded ? frames_json(s.frames) : nlohmann::json(nullptr)},
                         {"a_bytes", r.a_bytes},
                         {"b_bytes", r.b_bytes},
                         {"difference_bytes", r.diff()},
                         {"a_count", r.a_count},
                         {"b_count", r.b_count}});
      }
      nlohmann::json d = {{"device", n},
                          {"peak_allocated", peak_json(x.peak, y.peak)},
                          {"peak_reserved", reserved ? peak_json(x.peak_reserved.value_or(0), y.peak_reserved.value_or(0))
                                                     : nlohmann::json(nullptr)},
                          {"reserved_recorded_by", reserved ? nlohmann::json(pytorch ? "PyTorch" : "the recording")
                                                            : nlohmann::json(nullptr)},
                          {"sites_at_peak", std::move(srows)},
                          {"sites", sites.size()},
                          {"stages_at_peak", nullptr}};
      if (x.staged || y.staged) {
        nlohmann::json st = nlohmann::json::array();
        for (const Row& r : stage_rows(x, y))
          st.push_back({{"stage", r.key}, {"a_bytes", r.a_bytes}, {"b_bytes", r.b_bytes}, {"difference_bytes", r.diff()}});
        d["stages_at_peak"] = std::move(st);
      }
      out["devices"].push_back(std::move(d));
    }
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  fmt::print("B against A (B - A; % of A):\n  A: {} ({})\n  B: {} ({})\n", a.run->path(), a.run->format(), b.run->path(),
             b.run->format());
  for (int n : devices) {
    const DevicePeak &x = side_of(pa, n), &y = side_of(pb, n);
    fmt::print("device {}:\n", n);
    fmt::print("  peak allocated   A {:>12}  B {:>12}  B - A {} ({})\n", bytes_text(x.peak), bytes_text(y.peak),
               signed_bytes(difference(x.peak, y.peak)), percent_text(x.peak, y.peak));
    if (reserved) {
      const std::uint64_t ra = x.peak_reserved.value_or(0), rb = y.peak_reserved.value_or(0);
      fmt::print("  peak reserved    A {:>12}  B {:>12}  B - A {} ({}){}\n", bytes_text(ra), bytes_text(rb),
                 signed_bytes(difference(ra, rb)), percent_text(ra, rb), pytorch ? ", PyTorch's as recorded" : "");
    } else {
      fmt::print("  peak reserved    n/a (not recorded by both runs)\n");
    }
    const std::vector<Row> sites = site_rows(x, y);
    const std::size_t shown = full ? sites.size() : std::min(sites.size(), kRowsShown);
    fmt::print("  live at each run's peak of allocated, by call site, largest difference first ({} of {}{}):\n", shown,
               sites.size(), shown < sites.size() ? "; --full: every one" : "");
    for (std::size_t i = 0; i < shown; ++i) {
      const Row& r = sites[i];
      fmt::print("    {:>12}  (A {} in {}, B {} in {})\n", signed_bytes(r.diff()), bytes_text(r.a_bytes), r.a_count,
                 bytes_text(r.b_bytes), r.b_count);
      const SiteLive& s = site_of_row(r);
      if (!s.recorded) fmt::print("      (no call site recorded)\n");
      else if (s.frames.empty()) fmt::print("      (no frame of the program's: the allocator's and the recorder's only)\n");
      for (const SiteFrame& f : s.frames) fmt::print("      {}\n", frame_text(f));
    }
    if (x.staged || y.staged) {
      fmt::print("  live at each run's peak of allocated, by the stage it was allocated in:\n");
      for (const Row& r : stage_rows(x, y))
        fmt::print("    {:>12}  (A {}, B {})  {}\n", signed_bytes(r.diff()), bytes_text(r.a_bytes), bytes_text(r.b_bytes),
                   r.key);
    }
  }
}

}  // namespace luma::tools
