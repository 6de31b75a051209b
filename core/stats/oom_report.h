// oom_report.h - what luma says when an allocation finally fails (out of memory after the
// cache was released and the request retried): the request, the device's memory, luma's
// own (allocated, reserved, cached), the largest free block and the segments, and a hint
// when fragmentation is the cause. PyTorch's "CUDA out of memory. Tried to allocate ..."
// message, with luma's settings in the hint.
//
// Pure: the caller gathers the numbers (the shim: the allocator's stats and largest free
// block, the driver's cuMemGetInfo) and decides where the text goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/constants.h"
#include "stats/stats.h"

namespace luma::core {

struct OomReport {
  int device = 0;
  std::size_t requested = 0;  // bytes the program asked for
  std::size_t rounded = 0;    // what the request would occupy (round_size)
  // The device's memory as the driver sees it (cuMemGetInfo); unknown if the query failed.
  bool device_known = false;
  std::size_t device_total = 0;
  std::size_t device_free = 0;
  // luma's memory limit on this device (LUMA_CONF memory_limit / memory_fraction), 0 for
  // none: under a limit the device may have free memory luma must not take.
  std::size_t memory_limit = 0;
  std::size_t allocated = 0;           // rounded bytes the program holds
  std::size_t reserved = 0;            // bytes in luma's segments
  std::size_t cached = 0;              // reserved - allocated: free or pending blocks
  std::size_t largest_free_block = 0;  // CachingAllocator::largest_free_block
  std::int64_t segments = 0;
  // The settings the hint names, as they are now.
  std::size_t max_split_size = 0;
  std::size_t large_segment = 0;
  // With call stacks recorded (LUMA_TRACE_STACKS): the sites holding the most live bytes,
  // most first (top_sites), each with its frames as text, innermost first.
  struct Site {
    std::size_t live_bytes = 0;
    std::size_t blocks = 0;
    std::vector<std::string> frames;
  };
  std::vector<Site> top_sites;
};

// One live block's call site (a stack id; 0: none recorded) and its bytes.
struct LiveBlockSite {
  std::uint32_t stack = 0;
  std::size_t bytes = 0;
};
struct SiteTotal {
  std::uint32_t stack = 0;
  std::size_t live_bytes = 0;
  std::size_t blocks = 0;
};
// The `n` sites with the most live bytes (ties: the lower stack id first), summed over
// the live blocks; blocks without a stack (0) are no site and are left out.
std::vector<SiteTotal> top_sites(std::span<const LiveBlockSite> blocks, std::size_t n);
// How many frames of each site the report shows.
inline constexpr std::size_t kOomSiteFrames = 4;

// The report's luma numbers from one device's statistics, its allocator's options and
// largest free block; the device fields are left for the caller.
OomReport make_oom_report(const DeviceStats& stats, const AllocatorOptions& options,
                          std::size_t largest_free_block, std::size_t requested);

// Fragmentation is the cause when luma holds enough cached memory for the request but no
// free block of its size: the memory is there, cut into pieces in several segments.
bool oom_from_fragmentation(const OomReport& r) noexcept;

// The report as text: one paragraph, PyTorch's wording where it applies, then the hint
// (only when oom_from_fragmentation) naming the LUMA_CONF keys to try and why, then the
// top sites when there are any ("Top allocation sites by live bytes: ...").
std::string describe_oom(const OomReport& r);

}  // namespace luma::core
