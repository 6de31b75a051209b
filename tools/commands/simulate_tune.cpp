// simulate_tune.cpp - the settings search of `luma simulate --tune` (see simulate_tune.h):
// a fixed grid over the LUMA_CONF keys that decide where blocks go, every point replayed on
// every run through core/simulate (on several threads, each result in its own slot, so the
// answer is the same on any number of them), the best point by the objective on the worst
// run, the Pareto front of peak reserved against driver allocations, and X (the memory
// limit from which every larger one completes, core::scan_limits) for the recommendation
// and for the defaults. User documentation: docs/simulate.md, "--tune".
#include "commands/simulate_tune.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "commands/commands.h"
#include "common/progress.h"
#include "settings/config.h"
#include "simulate/simulation.h"
#include "commands/simulate_text.h"

namespace luma::tools {

namespace {

using core::KiB;
using core::MiB;

[[noreturn]] void fail(int code, const std::string& message) {
  std::fprintf(stderr, "luma simulate: %s\n", message.c_str());
  throw ExitCode{code};
}

// max_split_size without a limit: every block may be split.
constexpr std::uint64_t kNoSplitLimit = std::numeric_limits<std::size_t>::max();

// One searched key: a size or a switch of core::AllocatorOptions, and the values tried.
struct Dimension {
  const char* key;
  std::size_t core::AllocatorOptions::*size;  // a size key, or
  bool core::AllocatorOptions::*flag;          // a switch
  std::vector<std::uint64_t> values;           // ascending; the default among them
  // Only ordinary segments use it: with expandable segments a pool is one range of
  // mapped pages (no segment sizes) and no block is kept whole (no max_split_size).
  bool ordinary_only;
};

// The grid. Every key a user can set that moves blocks: the segment sizes, where requests
// stop sharing segments and how their own are rounded, the split rules, the release of
// free segments, expandable segments. The values bracket the default where a larger or a
// smaller one can pay: PyTorch's own (20 MiB segments, 10 MiB own-segment threshold, no
// split limit), one step each way, and PyTorch's 1 MiB least split of a large block.
const std::vector<Dimension>& dimensions() {
  using O = core::AllocatorOptions;
  static const std::vector<Dimension> dims = {
      {"expandable_segments", nullptr, &O::expandable_segments, {0, 1}, false},
      {"release_free_segments", nullptr, &O::release_free_segments, {0, 1}, false},
      {"large_segment", &O::large_segment, nullptr, {20 * MiB, 32 * MiB, 64 * MiB, 128 * MiB}, true},
      {"max_split_size", &O::max_split_size, nullptr, {64 * MiB, 128 * MiB, 256 * MiB, kNoSplitLimit}, true},
      {"min_large_alloc", &O::min_large_alloc, nullptr, {4 * MiB, 10 * MiB, 16 * MiB}, true},
      {"large_round", &O::large_round, nullptr, {2 * MiB, 8 * MiB}, false},
      {"small_segment", &O::small_segment, nullptr, {2 * MiB, 8 * MiB}, true},
      {"small_size", &O::small_size, nullptr, {256 * KiB, 1 * MiB}, false},
      {"min_split", &O::min_split, nullptr, {256, 1 * MiB}, false},
  };
  return dims;
}

std::uint64_t value_of(const Dimension& d, const core::AllocatorOptions& o) {
  return d.size != nullptr ? static_cast<std::uint64_t>(o.*d.size) : static_cast<std::uint64_t>(o.*d.flag);
}

std::string value_text(const Dimension& d, std::uint64_t v) {
  if (d.flag != nullptr) return v != 0 ? "true" : "false";
  return conf_size(v);
}

// A user setting the search keeps as it is, and why.
struct Fixed {
  const char* key;
  std::string value;
  const char* why;
};

std::vector<Fixed> fixed_settings() {
  const core::Settings s;
  const core::AllocatorOptions& o = s.allocator;
  return {
      {"memory_limit", "0", "the constraint, not a choice: --limit sets it, and X is found by scanning it"},
      {"alignment", conf_size(o.alignment),
       "a larger alignment only rounds every request up further; cudaMalloc's 256 B is the least allowed"},
      {"min_segment", conf_size(o.min_segment),
       "a floor below every segment size searched; only the exact-size segments of tight placement near a limit "
       "reach it"},
      {"release_on_oom", "true",
       "acts only at a limit, where it releases the cache and retries once; off can only run out sooner"},
      {"free_sync", core::free_sync_name(s.free_sync),
       "decides when a freed block is safe to reuse across streams, not where blocks go: each run is replayed on "
       "its own free path (--free-path to choose one)"},
      {"stream_ordered_reuse", "true", "the same: reuse without a fence is a question of correctness"},
      {"memory_fraction", "(none)", "needs the device's size, which a recording does not give"},
      {"limit_group", "(none)", "a limit shared with other processes, which one recording does not show"},
      {"caching", "true", "off has no allocator to replay"},
      {"ipc_own_segment", "0", "segments of their own for memory shared through legacy IPC: a need of the program"},
      {"program_cache", "true", "how luma serves a program's own caching allocator; a recording replays its requests"},
      {"report_cached_as_free", "true", "what cuMemGetInfo reports; no block moves"},
      {"host_cache", "true", "pinned host memory, not device memory"},
      {"host_cache_limit", conf_size(s.host_cache_limit), "pinned host memory, not device memory"},
  };
}

// One point of the grid.
struct Candidate {
  core::Settings settings;
  std::string conf;      // LUMA_CONF of the searched keys that differ from the defaults
  unsigned changed = 0;  // how many
};

std::vector<Candidate> grid() {
  const std::vector<Dimension>& dims = dimensions();
  const core::AllocatorOptions defaults;
  std::vector<Candidate> out;
  std::vector<std::size_t> at(dims.size(), 0);
  for (;;) {
    Candidate c;
    core::AllocatorOptions& o = c.settings.allocator;
    for (std::size_t k = 0; k < dims.size(); ++k) {
      const std::uint64_t v = dims[k].values[at[k]];
      if (dims[k].size != nullptr) o.*dims[k].size = static_cast<std::size_t>(v);
      else o.*dims[k].flag = v != 0;
    }
    bool keep = core::validate(o).empty();
    for (std::size_t k = 0; k < dims.size() && keep; ++k) {
      const std::uint64_t v = value_of(dims[k], o), d = value_of(dims[k], defaults);
      // With expandable segments a key only ordinary segments use stays at its default:
      // other values would replay the same.
      if (o.expandable_segments && dims[k].ordinary_only && v != d) keep = false;
      if (v == d) continue;
      c.conf += fmt::format("{}{}:{}", c.conf.empty() ? "" : ",", dims[k].key, value_text(dims[k], v));
      ++c.changed;
    }
    if (keep) out.push_back(std::move(c));
    std::size_t k = dims.size();
    while (k > 0 && ++at[k - 1] == dims[k - 1].values.size()) at[--k] = 0;
    if (k == 0) break;
  }
  return out;
}

// What one replay gave.
struct Figures {
  bool completed = true;
  std::uint64_t failed_allocation = 0, failed_bytes = 0;  // !completed
  std::uint64_t peak = 0, reserves = 0, releases = 0;
  std::uint64_t allocations = 0;  // served, over every copy
  // The warm copies (2..repeat): per copy, the estimated driver time; their driver
  // allocations per 100 of their allocations.
  std::uint64_t warm_ns = 0;
  double warm_calls = 0;
};

// A candidate over every run: the worst run's figures and the mean, each normalized by
// its run (x peak live, per 100 allocations), so that runs of every size weigh the same.
struct Score {
  bool completes = true;
  double worst_peak = 0, worst_calls = 0, mean_peak = 0, mean_calls = 0;
  // The warm copies: the most driver time per copy of any run (ns), the most driver
  // allocations per 100, and whether some run's time is over the budget.
  double worst_warm_ns = 0, worst_warm_calls = 0;
  bool over_budget = false;
};

// body(i) for i in [0, n), on `jobs` threads; every i is done once, whatever the thread
// count, and the first exception is rethrown here once all threads stopped.
void parallel_for(std::size_t n, unsigned jobs, const std::function<void(std::size_t)>& body) {
  std::atomic<std::size_t> next{0};
  std::mutex m;
  std::exception_ptr error;
  auto work = [&] {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        body(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        next = n;
        return;
      }
    }
  };
  const unsigned threads =
      static_cast<unsigned>(std::min<std::size_t>(std::max(jobs, 1u), std::max<std::size_t>(n, 1)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// A bar over work counted in replayed ops, updated from any thread.
class SharedProgress {
 public:
  // Below this many ops the work takes about a second: no bar.
  static constexpr std::uint64_t kMinOps = 20'000'000;
  SharedProgress(std::string label, std::uint64_t total) : bar_(std::move(label), total, kMinOps) {}
  void add(std::uint64_t ops) {
    if (!bar_.enabled()) return;
    const std::lock_guard<std::mutex> lock(m_);
    done_ += ops;
    bar_.update(done_);
  }

 private:
  std::mutex m_;
  ProgressBar bar_;
  std::uint64_t done_ = 0;
};

struct Search {
  const std::vector<TuneRun>& runs;
  const TuneOptions& o;
  std::vector<Candidate> candidates;
  std::vector<Figures> figures;  // [candidate * runs.size() + run]
  std::vector<Score> scores;
  std::size_t defaults = 0, recommended = 0;
  bool found = false;             // some candidate completes every run (always, without --limit)
  std::vector<std::size_t> front;  // candidates, by peak ascending
  // X: per run, of the defaults and of the recommendation.
  std::vector<core::LimitScan> x_default, x_recommended;
  std::uint64_t simulations = 0;

  const Figures& at(std::size_t c, std::size_t r) const { return figures[c * runs.size() + r]; }

  core::SimOptions options_of(const Candidate& c) const {
    core::SimOptions s;
    s.settings = c.settings;
    if (o.limit) s.settings.memory_limit = *o.limit;
    s.fence_latency_ns = o.fence_latency_ns;
    s.free_path = o.free_path;
    s.attribute = false;
    s.repeat = o.repeat;
    return s;
  }

  // The objective's order: the worst run first, then the other figure, then the mean,
  // then the fewest keys changed (the simplest setting among equals), then grid order.
  bool better(std::size_t a, std::size_t b) const {
    const Score& x = scores[a];
    const Score& y = scores[b];
    const auto key = [&](const Score& s, std::size_t i) {
      return o.objective == TuneObjective::peak
                 ? std::make_tuple(s.over_budget, s.worst_peak, s.worst_warm_ns, s.mean_peak, s.worst_calls,
                                   candidates[i].changed, i)
                 : o.objective == TuneObjective::calls
                 ? std::make_tuple(false, s.worst_calls, s.worst_peak, s.mean_calls, s.mean_peak, candidates[i].changed, i)
                 : std::make_tuple(false, s.worst_warm_ns, s.worst_peak, s.mean_peak, s.worst_calls,
                                   candidates[i].changed, i);
    };
    return key(x, a) < key(y, b);
  }

  void replay_grid() {
    candidates = grid();
    for (std::size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].changed == 0) defaults = i;
    figures.assign(candidates.size() * runs.size(), {});
    std::uint64_t ops = 0;
    for (const TuneRun& r : runs) ops += r.sequence->ops.size();
    SharedProgress progress("luma simulate --tune: settings", ops * candidates.size() * o.repeat);
    parallel_for(figures.size(), o.jobs, [&](std::size_t i) {
      const std::size_t c = i / runs.size(), r = i % runs.size();
      const core::SimResult res = core::simulate(*runs[r].sequence, options_of(candidates[c]));
      if (!res.check_errors.empty())  // a bug in the allocator: say so loudly
        throw std::logic_error("the allocator's invariant check failed (" +
                               (candidates[c].conf.empty() ? std::string("default") : candidates[c].conf) +
                               "): " + res.check_errors.front());
      Figures& f = figures[i];
      f.completed = res.completed;
      f.failed_allocation = res.allocations;
      f.failed_bytes = res.failed_bytes;
      f.peak = res.peak_reserved;
      f.reserves = res.reserves;
      f.releases = res.releases;
      f.allocations = res.allocations;
      if (res.warm.copies != 0) {
        f.warm_ns = res.warm.driver_ns / res.warm.copies;
        f.warm_calls = per_100(res.warm.driver_allocations, res.warm.allocations);
      }
      progress.add(runs[r].sequence->ops.size() * o.repeat);
    });
    simulations += figures.size();
  }

  void score() {
    scores.assign(candidates.size(), {});
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      Score& s = scores[c];
      for (std::size_t r = 0; r < runs.size(); ++r) {
        const Figures& f = at(c, r);
        const core::SimSequence& seq = *runs[r].sequence;
        const double peak = ratio(f.peak, seq.peak_live), calls = per_100(f.reserves, f.allocations);
        s.completes = s.completes && f.completed;
        s.worst_peak = std::max(s.worst_peak, peak);
        s.worst_calls = std::max(s.worst_calls, calls);
        s.mean_peak += peak / double(runs.size());
        s.mean_calls += calls / double(runs.size());
        s.worst_warm_ns = std::max(s.worst_warm_ns, double(f.warm_ns));
        s.worst_warm_calls = std::max(s.worst_warm_calls, f.warm_calls);
        s.over_budget = s.over_budget || f.warm_ns > o.driver_budget_ns;
      }
    }
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (!scores[c].completes) continue;
      if (!found || better(c, recommended)) recommended = c;
      found = true;
    }
    // The front: no point has both less peak and fewer driver allocations than another
    // (on the worst run); of points with equal figures, the simplest setting.
    std::vector<std::size_t> order;
    for (std::size_t c = 0; c < candidates.size(); ++c)
      if (scores[c].completes) order.push_back(c);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const Score& x = scores[a];
      const Score& y = scores[b];
      return std::make_tuple(x.worst_peak, x.worst_calls, candidates[a].changed, a) <
             std::make_tuple(y.worst_peak, y.worst_calls, candidates[b].changed, b);
    });
    double least_calls = std::numeric_limits<double>::infinity();
    for (std::size_t c : order)
      if (scores[c].worst_calls < least_calls) {
        least_calls = scores[c].worst_calls;
        front.push_back(c);
      }
  }

  // X of the defaults and of the recommendation on every run (one scan where they are the
  // same setting), the scans on the threads.
  void scan() {
    const bool same = recommended == defaults || !found;
    const std::size_t per_run = same ? 1 : 2;
    std::vector<core::LimitScan> scans(runs.size() * per_run);
    std::uint64_t ops = 0;
    for (std::size_t i = 0; i < scans.size(); ++i) {
      // The scan's length, for the bar: from peak live to about twice the unlimited peak.
      const TuneRun& r = runs[i / per_run];
      const std::uint64_t live = std::max<std::uint64_t>(r.sequence->peak_live, 1);
      const std::uint64_t peak = at(i % per_run == 0 ? defaults : recommended, i / per_run).peak;
      const double step = std::max(1.0, o.limit_step * double(live));
      ops += r.sequence->ops.size() * static_cast<std::uint64_t>(2.0 + double(2 * std::max(peak, live) - live) / step);
    }
    SharedProgress progress("luma simulate --tune: memory limits", ops);
    parallel_for(scans.size(), o.jobs, [&](std::size_t i) {
      const TuneRun& r = runs[i / per_run];
      const Candidate& c = candidates[i % per_run == 0 ? defaults : recommended];
      core::SimOptions options = options_of(c);
      scans[i] = core::scan_limits(*r.sequence, options, o.limit_step, [&] { progress.add(r.sequence->ops.size()); });
    });
    for (std::size_t r = 0; r < runs.size(); ++r) {
      x_default.push_back(scans[r * per_run]);
      x_recommended.push_back(scans[r * per_run + per_run - 1]);
    }
    for (const core::LimitScan& s : scans) simulations += s.runs;
  }
};

std::string objective_name(TuneObjective o) {
  return o == TuneObjective::peak ? "peak" : o == TuneObjective::calls ? "calls" : "driver-time";
}

// What the objective orders by, in words (the report's first line, the JSON's objective_text).
std::string objective_text(const TuneOptions& o) {
  return o.objective == TuneObjective::peak
             ? fmt::format("the least peak reserved (x peak live) among the settings whose warm copies spend at most "
                           "{:.3f} ms per copy in driver calls (estimated; only if none does, among all); ties: the "
                           "least warm driver time",
                           double(o.driver_budget_ns) / 1e6)
             : o.objective == TuneObjective::calls
             ? std::string("the fewest driver allocations per 100 allocations over every copy (ties: the least peak "
                           "reserved)")
             : std::string("the least warm driver time per copy (estimated; ties: the least peak reserved)");
}

// The LUMA_CONF a candidate stands for (with --limit, the limit it was replayed under).
std::string conf_of(const Candidate& c, const TuneOptions& o) {
  std::string conf = c.conf;
  if (o.limit) conf += fmt::format("{}memory_limit:{}", conf.empty() ? "" : ",", conf_size(*o.limit));
  return conf;
}

std::string label_of(const Candidate& c, const TuneOptions& o) {
  const std::string conf = conf_of(c, o);
  return conf.empty() ? "(defaults)" : conf;
}

// (a - b) / a: the share `b` saves of `a`; nullopt when a is 0.
std::optional<double> saved(double a, double b) {
  if (a <= 0) return std::nullopt;
  return (a - b) / a;
}

// A share saved as a change: 0.064 -> "-6.4%" (+ 0.0: no "-0.0%").
std::string percent(std::optional<double> share) {
  return share ? fmt::format("{:+.1f}%", -100.0 * *share + 0.0) : std::string("n/a");
}

// ---- JSON ---------------------------------------------------------------------------

nlohmann::json scan_json(const core::LimitScan& m, std::uint64_t live) {
  return {{"bound_bytes", m.bound},
          {"bound_over_peak_live", ratio(m.bound, live)},
          {"least_completing_bytes", m.least},
          {"least_completing_over_peak_live", ratio(m.least, live)},
          {"step_bytes", m.step},
          {"top_bytes", m.top},
          {"top_is_unlimited", m.top_is_unlimited},
          {"simulations", m.runs}};
}

nlohmann::json figures_json(const Search& s, std::size_t c, std::size_t r, const core::LimitScan& x) {
  const Figures& f = s.at(c, r);
  const core::SimSequence& seq = *s.runs[r].sequence;
  nlohmann::json j = {{"conf", conf_of(s.candidates[c], s.o)},
                      {"completed", f.completed},
                      {"peak_reserved_bytes", f.peak},
                      {"peak_reserved_over_peak_live", ratio(f.peak, seq.peak_live)},
                      {"driver_allocations", f.reserves},
                      {"driver_allocations_per_100", per_100(f.reserves, f.allocations)},
                      {"driver_frees", f.releases},
                      {"warm_driver_time_per_copy_ns", f.warm_ns},
                      {"warm_driver_allocations_per_100", f.warm_calls},
                      {"x", scan_json(x, seq.peak_live)}};
  if (!f.completed) j["failed"] = {{"allocation", f.failed_allocation}, {"bytes", f.failed_bytes}};
  return j;
}

nlohmann::json score_json(const Search& s, std::size_t c) {
  const Score& sc = s.scores[c];
  return {{"conf", conf_of(s.candidates[c], s.o)},
          {"completes", sc.completes},
          {"worst_peak_reserved_over_peak_live", sc.worst_peak},
          {"worst_driver_allocations_per_100", sc.worst_calls},
          {"mean_peak_reserved_over_peak_live", sc.mean_peak},
          {"mean_driver_allocations_per_100", sc.mean_calls},
          {"worst_warm_driver_time_per_copy_ns", sc.worst_warm_ns},
          {"worst_warm_driver_allocations_per_100", sc.worst_warm_calls},
          {"over_driver_budget", sc.over_budget}};
}

// The worst run's X, x peak live.
double worst_x(const Search& s, const std::vector<core::LimitScan>& x) {
  double w = 0;
  for (std::size_t r = 0; r < s.runs.size(); ++r) w = std::max(w, ratio(x[r].bound, s.runs[r].sequence->peak_live));
  return w;
}

void print_json(const Search& s) {
  const TuneOptions& o = s.o;
  nlohmann::json searched = nlohmann::json::array();
  const core::AllocatorOptions defaults;
  for (const Dimension& d : dimensions()) {
    nlohmann::json values = nlohmann::json::array();
    for (std::uint64_t v : d.values) values.push_back(value_text(d, v));
    searched.push_back({{"key", d.key},
                        {"values", values},
                        {"default", value_text(d, value_of(d, defaults))},
                        {"ordinary_segments_only", d.ordinary_only}});
  }
  nlohmann::json fixed = nlohmann::json::array();
  for (const Fixed& f : fixed_settings()) fixed.push_back({{"key", f.key}, {"value", f.value}, {"why", f.why}});
  nlohmann::json runs = nlohmann::json::array();
  for (std::size_t r = 0; r < s.runs.size(); ++r) {
    const TuneRun& run = s.runs[r];
    const core::SimSequence& seq = *run.sequence;
    const Figures& d = s.at(s.defaults, r);
    const Figures& rec = s.at(s.recommended, r);
    nlohmann::json paths = nlohmann::json::array();
    for (const core::PathSpan& p : core::free_paths(seq, s.options_of(s.candidates[s.defaults])))
      paths.push_back({{"from_op", p.from_op}, {"path", core::free_path_name(p.path)}, {"why", p.why}});
    nlohmann::json j = {
        {"input", run.input},
        {"format", run.format},
        {"device", seq.device},
        {"allocations", seq.allocations},
        {"frees", seq.frees},
        {"peak_live_bytes", seq.peak_live},
        {"has_clock", seq.has_times},
        {"free_paths", paths},
        {"recorded_peak_reserved_bytes",
         run.torch ? nlohmann::json(run.torch->recorded_peak_reserved) : nlohmann::json(nullptr)},
        {"incomplete", run.torch ? nlohmann::json(run.torch->incomplete) : nlohmann::json(nullptr)},
        {"window_notes", run.torch ? nlohmann::json(run.torch->notes) : nlohmann::json(nullptr)},
        {"blocks_before_window",
         run.torch ? nlohmann::json(run.torch->blocks_before_window) : nlohmann::json(nullptr)},
        {"default", figures_json(s, s.defaults, r, s.x_default[r])},
        {"recommended", figures_json(s, s.recommended, r, s.x_recommended[r])}};
    const std::optional<double> peak_gain =
        d.completed ? saved(double(d.peak), double(rec.peak)) : std::nullopt;
    const std::optional<double> x_gain = saved(double(s.x_default[r].bound), double(s.x_recommended[r].bound));
    j["gain"] = {{"peak_reserved", peak_gain ? nlohmann::json(*peak_gain) : nlohmann::json(nullptr)},
                 {"x", x_gain ? nlohmann::json(*x_gain) : nlohmann::json(nullptr)}};
    runs.push_back(std::move(j));
  }
  nlohmann::json front = nlohmann::json::array();
  for (std::size_t c : s.front) {
    nlohmann::json p = score_json(s, c);
    nlohmann::json peaks = nlohmann::json::array(), calls = nlohmann::json::array();
    for (std::size_t r = 0; r < s.runs.size(); ++r) {
      peaks.push_back(s.at(c, r).peak);
      calls.push_back(s.at(c, r).reserves);
    }
    p["peak_reserved_bytes"] = peaks;  // per run, in the order of "runs"
    p["driver_allocations"] = calls;
    p["recommended"] = c == s.recommended;
    front.push_back(std::move(p));
  }
  const Score& d = s.scores[s.defaults];
  const Score& rec = s.scores[s.recommended];
  const std::optional<double> peak_gain = d.completes ? saved(d.worst_peak, rec.worst_peak) : std::nullopt;
  const std::optional<double> x_gain = saved(worst_x(s, s.x_default), worst_x(s, s.x_recommended));
  nlohmann::json out = {
      {"recommended_conf", conf_of(s.candidates[s.recommended], o)},
      {"tune",
       {{"objective", objective_name(o.objective)},
        {"objective_text", objective_text(o)},
        {"repeat", o.repeat},
        {"driver_budget_ns_per_copy", o.driver_budget_ns},
        {"aggregate", "worst run"},
        {"limit_bytes", o.limit ? nlohmann::json(*o.limit) : nlohmann::json(nullptr)},
        {"limit_step", o.limit_step},
        {"fence_latency_ns", o.fence_latency_ns},
        {"settings_tried", s.candidates.size()},
        {"simulations", s.simulations},
        {"searched", searched},
        {"fixed", fixed}}},
      {"recommended", score_json(s, s.recommended)},
      {"default", score_json(s, s.defaults)},
      {"gain",
       {{"peak_reserved", peak_gain ? nlohmann::json(*peak_gain) : nlohmann::json(nullptr)},
        {"x", x_gain ? nlohmann::json(*x_gain) : nlohmann::json(nullptr)}}},
      {"front", front},
      {"runs", runs}};
  out["recommended"]["worst_x_over_peak_live"] = worst_x(s, s.x_recommended);
  out["default"]["worst_x_over_peak_live"] = worst_x(s, s.x_default);
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// ---- text ---------------------------------------------------------------------------

void row(const std::string& label, const std::string& a, const std::string& b) {
  fmt::print("  {:<44} {:>28} {:>22}\n", label, a, b);
}

// A limit x peak live; 0: none.
std::string x_text(std::uint64_t limit, std::uint64_t live) {
  return limit == 0 ? std::string("none") : fmt::format("{:.3f} x", ratio(limit, live));
}

void print_text(const Search& s) {
  const TuneOptions& o = s.o;
  fmt::print("luma simulate --tune: {} run{}, {} settings, {} replays; objective {}: {}, on the worst run\n",
             s.runs.size(), s.runs.size() == 1 ? "" : "s", grouped(s.candidates.size()), grouped(s.simulations),
             objective_name(o.objective), objective_text(o));
  fmt::print("each run replayed {} times in a row (--repeat): copies 2-{} are its steady state; driver time is "
             "estimated per call and size (core/simulate/driver_costs.h)\n", o.repeat, o.repeat);
  if (o.limit)
    fmt::print("every setting replayed under memory_limit:{} ({} B): only one that completes every run may be "
               "recommended\n", conf_size(*o.limit), grouped(*o.limit));
  for (std::size_t r = 0; r < s.runs.size(); ++r) {
    const TuneRun& run = s.runs[r];
    const core::SimSequence& seq = *run.sequence;
    fmt::print("run {}: {} ({}), device {}: {} allocations, peak live {} B\n", r + 1, run.input, run.format,
               seq.device, grouped(seq.allocations), grouped(seq.peak_live));
    fmt::print("  free path: {}\n", paths_text(core::free_paths(seq, s.options_of(s.candidates[s.defaults]))));
    if (run.torch)
      for (const std::string& line : window_lines(*run.torch)) fmt::print("  {}\n", line);
  }
  fmt::print("searched (LUMA_CONF keys; * the default):\n");
  const core::AllocatorOptions defaults;
  for (const Dimension& d : dimensions()) {
    std::string values;
    for (std::uint64_t v : d.values)
      values += fmt::format("{}{}{}{}", values.empty() ? "" : ", ", value_text(d, v),
                            v == kNoSplitLimit && d.size != nullptr ? " (no limit)" : "",
                            v == value_of(d, defaults) ? "*" : "");
    fmt::print("  {:<22} {}{}\n", d.key, values, d.ordinary_only ? " (ordinary segments only)" : "");
  }
  fmt::print("kept fixed:\n");
  for (const Fixed& f : fixed_settings()) fmt::print("  {:<22} {}: {}\n", f.key, f.value, f.why);

  const Candidate& rec = s.candidates[s.recommended];
  const std::string conf = conf_of(rec, o);
  if (s.recommended == s.defaults && !o.limit)
    fmt::print("\nrecommended: the defaults (LUMA_CONF empty): no setting searched does better\n");
  else
    fmt::print("\nrecommended: LUMA_CONF={}\n", conf);
  const std::string default_label = o.limit ? fmt::format("default (memory_limit:{})", conf_size(*o.limit)) : "default";
  for (std::size_t r = 0; r < s.runs.size(); ++r) {
    const core::SimSequence& seq = *s.runs[r].sequence;
    const std::uint64_t live = seq.peak_live;
    const Figures& d = s.at(s.defaults, r);
    const Figures& f = s.at(s.recommended, r);
    fmt::print("\n");
    row(fmt::format("run {}", r + 1), default_label, "recommended");
    auto figure_row = [&](const std::string& label, const std::function<std::string(const Figures&)>& cell) {
      row(label, cell(d), cell(f));
    };
    figure_row("peak reserved (B)", [](const Figures& x) { return grouped(x.peak); });
    figure_row("  x peak live", [&](const Figures& x) { return fmt::format("{:.3f}", ratio(x.peak, live)); });
    if (s.runs[r].torch)
      row("  PyTorch's recorded peak reserved (B)", grouped(s.runs[r].torch->recorded_peak_reserved),
          grouped(s.runs[r].torch->recorded_peak_reserved));
    figure_row("driver allocations (per 100 allocations)", [&](const Figures& x) {
      return fmt::format("{} ({:.2f})", grouped(x.reserves), per_100(x.reserves, x.allocations));
    });
    figure_row("driver frees", [](const Figures& x) { return grouped(x.releases); });
    figure_row("warm copies: driver allocations per 100", [](const Figures& x) {
      return fmt::format("{:.2f}", x.warm_calls);
    });
    figure_row("warm copies: driver time per copy (ms, est.)", [](const Figures& x) {
      return fmt::format("{:.3f}", double(x.warm_ns) / 1e6);
    });
    if (!d.completed || !f.completed)
      figure_row("runs out at allocation", [](const Figures& x) {
        return x.completed ? std::string("-")
                           : fmt::format("#{} ({})", grouped(x.failed_allocation), mib(x.failed_bytes));
      });
    row("memory_limit from which all complete (X)", x_text(s.x_default[r].bound, live),
        x_text(s.x_recommended[r].bound, live));
    row("  (B)", grouped(s.x_default[r].bound), grouped(s.x_recommended[r].bound));
    row("least memory_limit that completes", x_text(s.x_default[r].least, live),
        x_text(s.x_recommended[r].least, live));
    const std::optional<double> peak_gain = d.completed ? saved(double(d.peak), double(f.peak)) : std::nullopt;
    fmt::print("  gain over the defaults: peak reserved {}{}, X {} (limits {:.3f} x peak live apart: {} and {} "
               "tried)\n",
               percent(peak_gain), d.completed ? "" : " (the defaults run out under the limit)",
               percent(saved(double(s.x_default[r].bound), double(s.x_recommended[r].bound))), o.limit_step,
               grouped(s.x_default[r].points.size()), grouped(s.x_recommended[r].points.size()));
  }
  if (s.runs.size() > 1) {
    const Score& d = s.scores[s.defaults];
    const Score& rec_score = s.scores[s.recommended];
    fmt::print("\n  over the {} runs (the worst run's figure):\n", s.runs.size());
    row("", default_label, "recommended");
    row("peak reserved, x peak live", fmt::format("{:.3f}", d.worst_peak), fmt::format("{:.3f}", rec_score.worst_peak));
    row("driver allocations per 100", fmt::format("{:.2f}", d.worst_calls),
        fmt::format("{:.2f}", rec_score.worst_calls));
    row("warm driver time per copy (ms, est.)", fmt::format("{:.3f}", d.worst_warm_ns / 1e6),
        fmt::format("{:.3f}", rec_score.worst_warm_ns / 1e6));
    row("X, x peak live", fmt::format("{:.3f}", worst_x(s, s.x_default)),
        fmt::format("{:.3f}", worst_x(s, s.x_recommended)));
  }

  const bool one = s.runs.size() == 1;
  fmt::print("\nPareto front: peak reserved against driver allocations per 100 allocations{} ({} of {} settings; "
             "> the recommendation; warm ms: the warm copies' driver time per copy, estimated)\n",
             one ? "" : " (each the worst run's)", s.front.size(), grouped(s.candidates.size()));
  if (one)
    fmt::print("    {:>16} {:>11} {:>8} {:>10}  {}\n", "peak reserved", "x peak live", "per 100", "warm ms", "LUMA_CONF");
  else
    fmt::print("    {:>11} {:>8} {:>10}  {}\n", "x peak live", "per 100", "warm ms", "LUMA_CONF");
  for (std::size_t c : s.front) {
    const Score& sc = s.scores[c];
    const std::string mark = c == s.recommended ? ">" : " ";
    if (one)
      fmt::print("  {} {:>16} {:>11.3f} {:>8.2f} {:>10.3f}  {}\n", mark, grouped(s.at(c, 0).peak), sc.worst_peak,
                 sc.worst_calls, sc.worst_warm_ns / 1e6, label_of(s.candidates[c], o));
    else
      fmt::print("  {} {:>11.3f} {:>8.2f} {:>10.3f}  {}\n", mark, sc.worst_peak, sc.worst_calls, sc.worst_warm_ns / 1e6,
                 label_of(s.candidates[c], o));
  }
}

}  // namespace

void run_tune(const std::vector<TuneRun>& runs, const TuneOptions& o) {
  TuneOptions options = o;
  if (options.jobs == 0) options.jobs = std::max(1u, std::thread::hardware_concurrency());
  Search search{runs, options, {}, {}, {}, 0, 0, false, {}, {}, {}, 0};
  try {
    search.replay_grid();
  } catch (const std::logic_error& e) {
    fail(kExitFailure, e.what());
  }
  search.score();
  if (!search.found) {
    const Figures& d = search.at(search.defaults, 0);
    fail(kExitFailure,
         fmt::format("--tune: no setting searched completes every run under memory_limit:{} ({} B){}; try a larger "
                     "--limit (luma simulate --min-limit gives the limit the defaults need)",
                     conf_size(*o.limit), grouped(*o.limit),
                     d.completed ? std::string()
                                 : fmt::format(" (the defaults run out at allocation #{} of run 1)",
                                               grouped(d.failed_allocation))));
  }
  search.scan();
  if (o.json)
    print_json(search);
  else
    print_text(search);
}

}  // namespace luma::tools
