// host_cache_format.h - the pinned host cache's statistics (host_cache.h) in the exit
// statistics: a few text lines and a JSON object, one list of fields for both.
#pragma once

#include <string>

#include "host_cache/host_cache.h"

namespace luma::core {

// "Pinned host cache (cuMemHostAlloc, cuMemAllocHost):" and one line of counters; "" when
// the cache saw no request.
std::string format_host_cache_text(const HostCacheStats& s, std::uint64_t limit);
// {"hits": ..., "misses": ..., ...} with every field and the limit.
std::string format_host_cache_json(const HostCacheStats& s, std::uint64_t limit);

}  // namespace luma::core
