// host_cache_format.cpp - see host_cache_format.h.
#include "host_cache/host_cache_format.h"

#include <fmt/format.h>

#include "stats/stats_format.h"

namespace luma::core {
namespace {
// X(field): every counter of HostCacheStats, in the order the output shows them.
#define LUMA_HOST_CACHE_FIELDS(X)                                                          \
  X(hits) X(misses) X(frees_cached) X(frees_to_driver) X(evictions) X(evicted_bytes)       \
  X(held_bytes) X(peak_held_bytes) X(held_blocks) X(live_blocks) X(live_bytes) X(fenced_skips)
}  // namespace

std::string format_host_cache_text(const HostCacheStats& s, std::uint64_t limit) {
  if (s.hits == 0 && s.misses == 0) return "";
  std::string out = "Pinned host cache (cuMemHostAlloc, cuMemAllocHost):\n";
  out += fmt::format("  hits {}, misses {}, held {} of {} (peak {}), evictions {} ({}), frees to the driver {}, "
                     "live {} blocks ({}), fenced blocks passed over {}\n",
                     s.hits, s.misses, format_bytes(s.held_bytes), format_bytes(limit),
                     format_bytes(s.peak_held_bytes), s.evictions, format_bytes(s.evicted_bytes),
                     s.frees_to_driver, s.live_blocks, format_bytes(s.live_bytes), s.fenced_skips);
  return out;
}

std::string format_host_cache_json(const HostCacheStats& s, std::uint64_t limit) {
  std::string out = fmt::format("{{\"limit\": {}", limit);
#define LUMA_X(f) out += fmt::format(", \"" #f "\": {}", s.f);
  LUMA_HOST_CACHE_FIELDS(LUMA_X)
#undef LUMA_X
  return out + "}";
}

}  // namespace luma::core
