// oom_report.cpp - the out-of-memory report: its numbers and its text (oom_report.h).
#include "stats/oom_report.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "base/size_rounding.h"
#include "stats/stats_format.h"           // format_bytes

namespace luma::core {

OomReport make_oom_report(const DeviceStats& stats, const AllocatorOptions& options,
                          std::size_t largest_free_block, std::size_t requested) {
  OomReport r;
  r.device = stats.device;
  r.requested = requested;
  r.rounded = round_size(options, requested);
  r.allocated = static_cast<std::size_t>(std::max<std::int64_t>(stats.allocated_bytes.all.current, 0));
  r.reserved = static_cast<std::size_t>(std::max<std::int64_t>(stats.reserved_bytes.all.current, 0));
  r.cached = r.reserved > r.allocated ? r.reserved - r.allocated : 0;
  r.largest_free_block = largest_free_block;
  r.segments = stats.segment.all.current;
  r.max_split_size = options.max_split_size;
  r.large_segment = options.large_segment;
  return r;
}

std::vector<SiteTotal> top_sites(std::span<const LiveBlockSite> blocks, std::size_t n) {
  std::unordered_map<std::uint32_t, SiteTotal> by_stack;
  for (const LiveBlockSite& b : blocks) {
    if (b.stack == 0) continue;
    SiteTotal& t = by_stack[b.stack];
    t.stack = b.stack;
    t.live_bytes += b.bytes;
    t.blocks += 1;
  }
  std::vector<SiteTotal> out;
  out.reserve(by_stack.size());
  for (const auto& [stack, t] : by_stack) out.push_back(t);
  auto more = [](const SiteTotal& a, const SiteTotal& b) {
    return a.live_bytes != b.live_bytes ? a.live_bytes > b.live_bytes : a.stack < b.stack;
  };
  if (out.size() > n) {
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), out.end(), more);
    out.resize(n);
  } else {
    std::sort(out.begin(), out.end(), more);
  }
  return out;
}

bool oom_from_fragmentation(const OomReport& r) noexcept {
  return r.cached >= r.rounded && r.largest_free_block < r.rounded;
}

namespace {

// The max_split_size worth trying, in MiB: blocks of that size or more are then never cut
// for smaller requests, so a request like this one finds them whole. LUMA_CONF refuses a
// value not above large_segment (config.cpp), so it is at least large_segment + 1 MiB.
std::size_t suggested_max_split_mib(const OomReport& r) noexcept {
  const std::size_t request_mib = (r.rounded + MiB - 1) / MiB;
  return std::max(r.large_segment / MiB + 1, request_mib);
}

std::string fragmentation_hint(const OomReport& r) {
  std::string hint = fmt::format(
      " The {} reserved but unallocated would hold the request, but no free block is that large "
      "(fragmentation: the free memory is cut into pieces across {} segments).",
      format_bytes(r.cached), r.segments);
  const std::size_t mib = suggested_max_split_mib(r);
  const bool split_helps = r.max_split_size > mib * MiB;
  if (split_helps)
    hint += fmt::format(" Try LUMA_CONF=max_split_size_mb:{} so that free blocks of {} MiB or more are "
                        "kept whole for large requests instead of being cut for small ones",
                        mib, mib);
  hint += fmt::format("{} a smaller large_segment (now {}) so that small requests share fewer, smaller "
                      "segments that empty_cache can give back.",
                      split_helps ? ", or" : " Try", format_bytes(r.large_segment));
  return hint;
}

}  // namespace

std::string describe_oom(const OomReport& r) {
  std::string out = fmt::format("CUDA out of memory. Tried to allocate {}.", format_bytes(r.requested));
  if (r.device_known)
    out += fmt::format(" GPU {} has a total capacity of {} of which {} is free.", r.device,
                       format_bytes(r.device_total), format_bytes(r.device_free));
  else
    out += fmt::format(" GPU {}: the driver did not report its memory.", r.device);
  if (r.memory_limit != 0)
    out += fmt::format(" luma's memory limit on this device is {}.", format_bytes(r.memory_limit));
  out += fmt::format(" Of the allocated memory {} is allocated by luma, and {} is reserved by luma but "
                     "unallocated; the largest free block is {}, in {} segments ({} reserved).",
                     format_bytes(r.allocated), format_bytes(r.cached), format_bytes(r.largest_free_block),
                     r.segments, format_bytes(r.reserved));
  if (oom_from_fragmentation(r)) out += fragmentation_hint(r);
  if (!r.top_sites.empty()) {
    out += " Top allocation sites by live bytes:";
    for (std::size_t i = 0; i < r.top_sites.size(); ++i) {
      const OomReport::Site& site = r.top_sites[i];
      out += fmt::format(" #{} {} in {} block{}:", i + 1, format_bytes(site.live_bytes), site.blocks,
                         site.blocks == 1 ? "" : "s");
      for (std::size_t f = 0; f < site.frames.size() && f < kOomSiteFrames; ++f)
        out += fmt::format("{} {}", f == 0 ? "" : " <-", site.frames[f]);
      out += i + 1 < r.top_sites.size() ? ";" : ".";
    }
  }
  return out;
}

}  // namespace luma::core
