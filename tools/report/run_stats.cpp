// run_stats.cpp - the statistics of one run. Memory: one entry per live allocation and one
// per call site, never one per event.
#include "report/run_stats.h"

#include "report/call_sites.h"

#include <algorithm>
#include <bit>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace luma::tools {

namespace {

struct Live {
  std::uint64_t size;
  std::uint64_t requested;  // a free event carries no requested size: it is kept here
  std::uint32_t stack;
  std::uint32_t python_line;  // PythonLines index + 1; 0: none
};

// The Python lines of a run: each Python stack's innermost frame, resolved once per id.
class PythonLines {
 public:
  explicit PythonLines(RecordedRun& run) : run_(run) {}
  // The line index + 1 of a Python stack id (0: none).
  std::uint32_t of_stack(std::uint32_t id) {
    if (id == 0) return 0;
    if (id >= by_stack_.size()) by_stack_.resize(id + 1, kUnresolved);
    std::uint32_t& n = by_stack_[id];
    if (n != kUnresolved) return n;
    // The innermost frame of the program's (call_sites.h: not the recorder's, the allocator's
    // or nn.Module's call wrappers).
    const auto& frames = run_.python_stack(id);
    const auto own = std::find_if(frames.begin(), frames.end(), [](const core::TracePythonFrame& p) {
      return !is_machinery_frame(p.function, p.file, true);
    });
    if (own == frames.end()) return n = 0;
    const core::TracePythonFrame& f = *own;
    std::string key = f.file;
    key += '\0';
    key += f.function;
    key += '\0';
    key += std::to_string(f.line);
    auto [it, added] = index_.emplace(std::move(key), static_cast<std::uint32_t>(lines_.size() + 1));
    if (added) lines_.push_back({f.file, f.function, f.line});
    return n = it->second;
  }
  PythonLineTotal& at(std::uint32_t n) { return lines_[n - 1]; }
  std::vector<PythonLineTotal> top() && {
    std::sort(lines_.begin(), lines_.end(), [](const auto& a, const auto& b) {
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      if (a.file != b.file) return a.file < b.file;
      return a.line < b.line;
    });
    if (lines_.size() > kPythonLinesShown) lines_.resize(kPythonLinesShown);
    return std::move(lines_);
  }

 private:
  static constexpr std::uint32_t kUnresolved = ~0u;
  RecordedRun& run_;
  std::vector<std::uint32_t> by_stack_;
  std::unordered_map<std::string, std::uint32_t> index_;
  std::vector<PythonLineTotal> lines_;
};

struct DeviceState {
  DeviceRunStats s;
  std::unordered_map<std::uint64_t, Live> live;  // address -> allocation
  std::uint64_t allocated = 0, reserved = 0, requested = 0;
  std::unordered_map<std::uint32_t, CallSiteTotal> sites;
  std::unordered_map<std::uint32_t, CallSiteTotal> live_sites;  // pass 2
  // Pass 2, up to the peak of reserved: the blocks and segments there.
  std::unordered_map<std::uint64_t, std::uint64_t> blocks;  // address -> size
  std::map<std::uint64_t, std::uint64_t> segments;          // address -> size
  std::map<std::uint64_t, std::uint64_t> pages;  // mapped pages of expandable segments
  // Pass 1: where the last page mapped ended (a page right after it is the same growth).
  std::uint64_t last_page_end = 0;
  bool started = false;  // its first event was seen
};

// The free ranges of the segments around the live blocks. The pages of an expandable
// segment are one range where they are contiguous: a free block may span them.
void measure_free_blocks(const DeviceState& d, PeakReservedState& at) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks(d.blocks.begin(), d.blocks.end());
  std::sort(blocks.begin(), blocks.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges(d.segments.begin(), d.segments.end());
  for (const auto& [start, size] : d.pages) {
    if (!ranges.empty() && ranges.back().first + ranges.back().second == start &&
        d.pages.count(ranges.back().first) != 0)
      ranges.back().second += size;
    else
      ranges.emplace_back(start, size);
  }
  std::sort(ranges.begin(), ranges.end());
  auto b = blocks.begin();
  for (const auto& [start, size] : ranges) {
    const std::uint64_t end = start + size;
    while (b != blocks.end() && b->first < start) ++b;  // outside every segment: not counted
    std::uint64_t at_byte = start;
    auto gap = [&](std::uint64_t to) {
      if (to <= at_byte) return;
      ++at.free_blocks;
      at.free_bytes += to - at_byte;
      at.largest_free_block = std::max(at.largest_free_block, to - at_byte);
    };
    for (; b != blocks.end() && b->first < end; ++b) {
      gap(b->first);
      at_byte = std::max(at_byte, std::min(end, b->first + b->second));
    }
    gap(end);
  }
}

void keep_largest(std::vector<AllocationInfo>& v, const AllocationInfo& a) {
  if (v.size() == kLargestShown && v.back().size >= a.size) return;
  auto at = std::upper_bound(v.begin(), v.end(), a,
                             [](const auto& x, const auto& y) { return x.size > y.size; });
  v.insert(at, a);
  if (v.size() > kLargestShown) v.pop_back();
}

std::vector<CallSiteTotal> top(const std::unordered_map<std::uint32_t, CallSiteTotal>& m, bool all) {
  std::vector<CallSiteTotal> v;
  for (const auto& [id, t] : m)
    if (t.bytes > 0) v.push_back(t);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack < b.stack;
  });
  if (!all && v.size() > kCallSitesShown) v.resize(kCallSitesShown);
  return v;
}

// A device's stages (a snapshot's annotated ranges) swept on the clock of its events,
// which come in time order: the stages an event is in are those begun at or before its
// time and not ended before it.
class StageSweep {
 public:
  StageSweep(const std::vector<core::TorchStage>& stages, int device, DeviceRunStats& s) : s_(s) {
    std::map<std::string, std::size_t> by_name;
    for (const core::TorchStage& t : stages) {
      if (t.device != -1 && t.device != device) continue;
      const auto [it, added] = by_name.try_emplace(t.name, s.stages.size());
      if (added) s.stages.push_back({t.name});
      ++s.stages[it->second].ranges;
      starts_.push_back({t.start_ns, it->second});
      ends_.push_back({t.end_ns, it->second});
    }
    std::sort(starts_.begin(), starts_.end());
    std::sort(ends_.begin(), ends_.end());
    active_.assign(s.stages.size(), 0);
  }
  bool empty() const noexcept { return starts_.empty(); }
  // Before an event at `time`: the stages it is in.
  void at(std::uint64_t time) {
    for (; next_start_ < starts_.size() && starts_[next_start_].first <= time; ++next_start_)
      ++active_[starts_[next_start_].second];
    for (; next_end_ < ends_.size() && ends_[next_end_].first < time; ++next_end_)
      --active_[ends_[next_end_].second];
  }
  // After the event: the bytes then.
  void note(std::uint64_t allocated, std::uint64_t reserved) {
    for (std::size_t k = 0; k < active_.size(); ++k) {
      if (active_[k] <= 0) continue;
      DeviceRunStats::Stage& st = s_.stages[k];
      st.entered = true;
      st.peak_allocated = std::max(st.peak_allocated, allocated);
      st.peak_reserved = std::max(st.peak_reserved, reserved);
    }
  }
  // The stages of a moment, outermost (earliest begun) first.
  std::vector<std::string> names_at(const std::vector<core::TorchStage>& stages, int device,
                                    std::uint64_t time) const {
    std::vector<std::string> out;
    for (const core::TorchStage& t : stages)
      if ((t.device == -1 || t.device == device) && t.start_ns <= time && time <= t.end_ns &&
          std::find(out.begin(), out.end(), t.name) == out.end())
        out.push_back(t.name);
    return out;
  }

 private:
  DeviceRunStats& s_;
  std::vector<std::pair<std::uint64_t, std::size_t>> starts_, ends_;
  std::vector<int> active_;
  std::size_t next_start_ = 0, next_end_ = 0;
};

}  // namespace

RunStats compute_run_stats(RecordedRun& run, const RunStatsOptions& options) {
  RunStats out;
  std::map<int, DeviceState> dev;
  const std::vector<core::TorchStage> no_stages;
  const std::vector<core::TorchStage>& stages = run.torch_snapshot() ? run.torch_snapshot()->stages : no_stages;
  std::map<int, StageSweep> sweeps;
  auto site_of = [&](std::uint32_t stack) { return options.site_of ? options.site_of(stack) : stack; };
  bool any_stack = false;
  PythonLines python(run);
  const auto sum = run.read([&](const core::TraceEvent& e) {
    DeviceState& d = dev[e.device];
    d.s.device = e.device;
    if (!d.started) {
      d.started = true;
      // A snapshot's window may begin with segments PyTorch had reserved before it.
      d.reserved = run.reserved_before_window(e.device);
      if (d.reserved != 0) {
        d.s.peak_reserved = d.reserved;
        d.s.at_peak_reserved = {e.index, e.time_ns, d.reserved, 0};
        d.s.layout_known = false;
      }
    }
    out.duration_ns = std::max(out.duration_ns, e.time_ns);
    StageSweep* sweep = nullptr;
    if (!stages.empty()) {
      sweep = &sweeps.try_emplace(e.device, stages, e.device, d.s).first->second;
      sweep->at(e.time_ns);
    }
    switch (e.kind) {
      case core::EventKind::alloc: {
        ++d.s.allocations;
        d.s.allocated_bytes_total += e.size;
        d.s.requested_bytes_total += e.requested;
        const std::uint64_t req = e.requested ? e.requested : e.size;
        if (req > 0) ++d.s.histogram[63 - std::countl_zero(req)];
        const std::uint32_t line = python.of_stack(e.python_stack);
        if (line != 0) {
          PythonLineTotal& t = python.at(line);
          ++t.allocations;
          t.bytes += e.size;
          t.live_bytes += e.size;
          t.peak_live_bytes = std::max(t.peak_live_bytes, t.live_bytes);
        }
        d.live[e.address] = {e.size, e.requested, e.stack, line};
        d.allocated += e.size;
        d.requested += e.requested;
        if (d.allocated > d.s.peak_allocated) {
          d.s.peak_allocated = d.allocated;
          d.s.peak_index = e.index;
          d.s.peak_time_ns = e.time_ns;
        }
        d.s.peak_requested = std::max(d.s.peak_requested, d.requested);
        if (d.reserved > 0 && d.reserved == d.s.at_peak_reserved.reserved &&
            d.allocated > d.s.at_peak_reserved.allocated) {
          d.s.at_peak_reserved.allocated = d.allocated;
          d.s.at_peak_reserved.event_index = e.index;
          d.s.at_peak_reserved.time_ns = e.time_ns;
        }
        keep_largest(d.s.largest, {e.size, e.requested, e.address, e.index, e.time_ns, e.stack});
        if (e.stack) {
          any_stack = true;
          const std::uint32_t stack = site_of(e.stack);
          auto& site = d.sites[stack];
          site.stack = stack;
          site.bytes += e.size;
          ++site.count;
        }
        break;
      }
      case core::EventKind::free_requested: {
        ++d.s.frees;
        auto it = d.live.find(e.address);
        if (it == d.live.end()) {
          ++d.s.unmatched_frees;
          break;
        }
        d.allocated -= it->second.size;
        d.requested -= std::min(d.requested, it->second.requested);
        if (it->second.python_line != 0) {
          PythonLineTotal& t = python.at(it->second.python_line);
          t.live_bytes -= std::min(t.live_bytes, it->second.size);
        }
        d.live.erase(it);
        break;
      }
      case core::EventKind::free_completed: ++d.s.frees_completed; break;
      case core::EventKind::segment_reserve:
        if (core::is_mapped_pages(e.kind, e.size, e.requested)) {
          ++d.s.pages_mapped;
          if (e.address != d.last_page_end) ++d.s.page_growths;
          d.last_page_end = e.address + e.size;
        } else {
          ++d.s.segment_reserves;
        }
        d.reserved += e.size;
        if (d.reserved > d.s.peak_reserved) {
          d.s.peak_reserved = d.reserved;
          d.s.at_peak_reserved = {e.index, e.time_ns, d.reserved, d.allocated};
        }
        break;
      case core::EventKind::segment_release:
        ++(core::is_mapped_pages(e.kind, e.size, e.requested) ? d.s.pages_unmapped : d.s.segment_releases);
        d.reserved -= std::min(d.reserved, e.size);
        break;
      case core::EventKind::oom: ++d.s.ooms; break;
      case core::EventKind::empty_cache: ++d.s.empty_cache_calls; break;
    }
    if (sweep) sweep->note(d.allocated, d.reserved);
  });
  out.events = sum.events;
  out.python_lines = std::move(python).top();
  out.unwritten_slots = sum.unwritten_slots;

  // Pass 2: what was live at each device's peaks: the call sites of the allocations live
  // at the peak of allocated, and the blocks and segments at the peak of reserved.
  const bool free_blocks = run.records_segments();
  if (any_stack || free_blocks) {
    for (auto& [n, d] : dev) d.live.clear();
    run.read(
        [&](const core::TraceEvent& e) {
          DeviceState& d = dev[e.device];
          if (any_stack && e.index <= d.s.peak_index) {
            if (e.kind == core::EventKind::alloc) {
              const std::uint32_t stack = e.stack ? site_of(e.stack) : 0;
              d.live[e.address] = {e.size, e.requested, stack, 0};
              auto& site = d.live_sites[stack];
              site.stack = stack;
              site.bytes += e.size;
              ++site.count;
            } else if (e.kind == core::EventKind::free_requested) {
              auto it = d.live.find(e.address);
              if (it != d.live.end()) {
                auto& site = d.live_sites[it->second.stack];
                site.bytes -= it->second.size;
                --site.count;
                d.live.erase(it);
              }
            }
          }
          PeakReservedState& at = d.s.at_peak_reserved;
          if (free_blocks && d.s.layout_known && at.reserved > 0 && e.index <= at.event_index) {
            switch (e.kind) {
              case core::EventKind::alloc: d.blocks[e.address] = e.size; break;
              case core::EventKind::free_requested: d.blocks.erase(e.address); break;
              case core::EventKind::segment_reserve:
                (core::is_mapped_pages(e.kind, e.size, e.requested) ? d.pages : d.segments)[e.address] = e.size;
                break;
              case core::EventKind::segment_release:
                (core::is_mapped_pages(e.kind, e.size, e.requested) ? d.pages : d.segments).erase(e.address);
                break;
              default: break;
            }
            if (e.index == at.event_index) {
              measure_free_blocks(d, at);
              d.blocks.clear();
              d.segments.clear();
              d.pages.clear();
            }
          }
        },
        false);
  }
  for (auto& [n, d] : dev) {
    d.s.final_allocated = d.allocated;
    d.s.final_reserved = d.reserved;
    d.s.callsites_total = top(d.sites, options.all_sites);
    d.live_sites.erase(0);  // allocations without a recorded call site
    d.s.callsites_at_peak = top(d.live_sites, options.all_sites);
    if (const auto it = sweeps.find(n); it != sweeps.end())
      d.s.stages_at_peak = it->second.names_at(stages, n, d.s.peak_time_ns);
    out.devices.push_back(std::move(d.s));
  }
  return out;
}

}  // namespace luma::tools
