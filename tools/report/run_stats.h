// run_stats.h - what `luma stats` reports about one recorded run, per device: peaks and
// when they happened, the cache at the peak of reserved (unallocated bytes, free blocks,
// fragmentation), counts, a power-of-two size histogram, the largest allocations and the
// top call sites. Computed in two passes over the events: the second rebuilds what was
// live at each device's peaks (the call sites at the peak of allocated, when recorded; the
// segments' free blocks at the peak of reserved, when the input records segments).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "inputs/recorded_run.h"

namespace luma::tools {

inline constexpr std::size_t kLargestShown = 10;   // largest allocations listed
inline constexpr std::size_t kCallSitesShown = 10; // call sites listed, each way
inline constexpr std::size_t kPythonLinesShown = 10;  // Python lines listed

struct AllocationInfo {
  std::uint64_t size = 0, requested = 0, address = 0, index = 0, time_ns = 0;
  std::uint32_t stack = 0;
};

struct CallSiteTotal {
  std::uint32_t stack = 0;
  std::uint64_t bytes = 0;  // live at the peak, or allocated over the run
  std::uint64_t count = 0;
};

// The cache at the peak of reserved: the event at which reserved bytes first reached their
// maximum, or, while they stayed there, the one at which the most bytes were allocated
// (the segment a request needed is recorded just before its alloc). What users mean by
// fragmentation is measured there: memory the cache holds but the program does not use
// ("reserved but unallocated", PyTorch's out-of-memory message), and how much of it is
// scattered in blocks smaller than the largest free one (docs/trace-format.md, "luma stats").
struct PeakReservedState {
  std::uint64_t event_index = 0, time_ns = 0;
  std::uint64_t reserved = 0, allocated = 0;
  std::uint64_t free_bytes = 0;          // the free ranges' bytes (= unallocated())
  std::uint64_t free_blocks = 0;         // free ranges inside the segments
  std::uint64_t largest_free_block = 0;  // the largest request the cache could serve then
  std::uint64_t unallocated() const noexcept {
    return reserved > allocated ? reserved - allocated : 0;
  }
  // 1 - largest free block / free bytes: 0 when the free bytes are one block (or none), near
  // 1 when they are scattered in many small ones, none of which serves a large request.
  double fragmentation() const noexcept {
    return free_bytes ? 1.0 - double(largest_free_block) / double(free_bytes) : 0.0;
  }
};

struct DeviceRunStats {
  int device = 0;
  std::uint64_t allocations = 0, frees = 0, frees_completed = 0, segment_reserves = 0,
                segment_releases = 0, ooms = 0, empty_cache_calls = 0;
  // Expandable segments: pages mapped and unmapped (core::is_mapped_pages), and the
  // growths that mapped them (a run of pages mapped one after another at adjacent
  // addresses is one growth: one allocation that needed memory).
  std::uint64_t pages_mapped = 0, pages_unmapped = 0, page_growths = 0;
  std::uint64_t unmatched_frees = 0;  // frees of addresses this trace never saw allocated
  std::uint64_t allocated_bytes_total = 0, requested_bytes_total = 0;
  std::uint64_t peak_allocated = 0, peak_reserved = 0, peak_requested = 0;
  std::uint64_t peak_index = 0, peak_time_ns = 0;  // when peak_allocated was first reached
  std::uint64_t final_allocated = 0, final_reserved = 0;
  std::array<std::uint64_t, 64> histogram{};  // [k]: requested sizes in [2^k, 2^(k+1))
  std::vector<AllocationInfo> largest;
  std::vector<CallSiteTotal> callsites_at_peak, callsites_total;

  // A PyTorch snapshot's stages (its annotated ranges, core::TorchStage), by name in order
  // of first start: the most allocated and reserved while in one, and those the peak of
  // allocated falls in (innermost last). Empty for other inputs.
  struct Stage {
    std::string name;
    std::uint64_t ranges = 0;
    std::uint64_t peak_allocated = 0, peak_reserved = 0;
    bool entered = false;  // the device saw an event while in it
  };
  std::vector<Stage> stages;
  std::vector<std::string> stages_at_peak;

  PeakReservedState at_peak_reserved;  // only for inputs that record segments
  // Whether the segments at the peak of reserved are all known, so its free blocks could
  // be measured: not when a PyTorch snapshot's window began with segments already reserved
  // (their bytes count, their addresses are not in the window).
  bool layout_known = true;
  // Calls served from the cache: allocations that needed no segment (nor pages mapped).
  std::uint64_t cache_absorbed() const noexcept {
    const std::uint64_t grew = segment_reserves + page_growths;
    return allocations > grew ? allocations - grew : 0;
  }
};

// One Python line that allocated (the innermost Python frame of an allocation's call
// site, format version 2), over every device of the run.
struct PythonLineTotal {
  std::string file, function;
  std::uint32_t line = 0;
  std::uint64_t allocations = 0, bytes = 0;
  std::uint64_t live_bytes = 0;       // while reading
  std::uint64_t peak_live_bytes = 0;  // the most of its allocations live at once
};

struct RunStats {
  std::uint64_t events = 0, unwritten_slots = 0, duration_ns = 0;
  std::vector<DeviceRunStats> devices;  // by device number
  // The top allocating Python lines by bytes allocated (empty: no Python frames recorded).
  std::vector<PythonLineTotal> python_lines;
};

struct RunStatsOptions {
  // The call site of a recorded stack id (CallSites::site_of): stacks of one site add up.
  // Unset: each stack is a site.
  std::function<std::uint32_t(std::uint32_t)> site_of;
  bool all_sites = false;  // every site, not the top kCallSitesShown
};

RunStats compute_run_stats(RecordedRun& run, const RunStatsOptions& options = {});

}  // namespace luma::tools
