// run_stats.h - what `luma stats` reports about one recorded run, per device: peaks and
// when they happened, fragmentation, counts, a power-of-two size histogram, the largest
// allocations and the top call sites. Computed in two passes over the events (the second
// only when call sites were recorded, to see what was live at each device's peak).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "recorded_run.h"

namespace luma::tools {

inline constexpr std::size_t kLargestShown = 10;   // largest allocations listed
inline constexpr std::size_t kCallSitesShown = 10; // call sites listed, each way

struct AllocationInfo {
  std::uint64_t size = 0, requested = 0, address = 0, index = 0, time_ns = 0;
  std::uint32_t stack = 0;
};

struct CallSiteTotal {
  std::uint32_t stack = 0;
  std::uint64_t bytes = 0;  // live at the peak, or allocated over the run
  std::uint64_t count = 0;
};

struct DeviceRunStats {
  int device = 0;
  std::uint64_t allocations = 0, frees = 0, frees_completed = 0, segment_reserves = 0,
                segment_releases = 0, ooms = 0, empty_cache_calls = 0;
  std::uint64_t unmatched_frees = 0;  // frees of addresses this trace never saw allocated
  std::uint64_t allocated_bytes_total = 0, requested_bytes_total = 0;
  std::uint64_t peak_allocated = 0, peak_reserved = 0, peak_requested = 0;
  std::uint64_t peak_index = 0, peak_time_ns = 0;  // when peak_allocated was first reached
  std::uint64_t final_allocated = 0, final_reserved = 0;
  std::array<std::uint64_t, 64> histogram{};  // [k]: requested sizes in [2^k, 2^(k+1))
  std::vector<AllocationInfo> largest;
  std::vector<CallSiteTotal> callsites_at_peak, callsites_total;

  // peak reserved / peak allocated: 1.0 means no byte was reserved that was not in use.
  double fragmentation() const noexcept {
    return peak_allocated ? double(peak_reserved) / double(peak_allocated) : 0.0;
  }
  // Calls served from the cache: allocations that needed no segment.
  std::uint64_t cache_absorbed() const noexcept {
    return allocations > segment_reserves ? allocations - segment_reserves : 0;
  }
};

struct RunStats {
  std::uint64_t events = 0, unwritten_slots = 0, duration_ns = 0;
  std::vector<DeviceRunStats> devices;  // by device number
};

RunStats compute_run_stats(RecordedRun& run);

}  // namespace luma::tools
