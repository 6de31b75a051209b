// run_stats.cpp - the statistics of one run. Memory: one entry per live allocation and one
// per call site, never one per event.
#include "run_stats.h"

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
    const auto& frames = run_.python_stack(id);
    if (frames.empty()) return n = 0;
    const core::TracePythonFrame& f = frames.front();
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

std::vector<CallSiteTotal> top(const std::unordered_map<std::uint32_t, CallSiteTotal>& m) {
  std::vector<CallSiteTotal> v;
  for (const auto& [id, t] : m)
    if (t.bytes > 0) v.push_back(t);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack < b.stack;
  });
  if (v.size() > kCallSitesShown) v.resize(kCallSitesShown);
  return v;
}

}  // namespace

RunStats compute_run_stats(RecordedRun& run) {
  RunStats out;
  std::map<int, DeviceState> dev;
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
          auto& site = d.sites[e.stack];
          site.stack = e.stack;
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
              d.live[e.address] = {e.size, e.requested, e.stack, 0};
              auto& site = d.live_sites[e.stack];
              site.stack = e.stack;
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
    d.s.callsites_total = top(d.sites);
    d.live_sites.erase(0);  // allocations without a recorded call site
    d.s.callsites_at_peak = top(d.live_sites);
    out.devices.push_back(std::move(d.s));
  }
  return out;
}

}  // namespace luma::tools
