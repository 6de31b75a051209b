// forwarded_stats.cpp - see forwarded_stats.h.
#include "report/forwarded_stats.h"

#include <algorithm>

namespace luma::tools {

using core::trace::ForwardedCall;
using core::trace::ForwardedOp;

void ForwardedStats::add(const ForwardedCall& c) {
  if (c.seq < next_seq_) return;  // delivered again by a later pass
  next_seq_ = c.seq + 1;
  ++calls_;
  auto it = index_.find(c.path);
  if (it == index_.end()) {
    it = index_.emplace(std::string(c.path), paths_.size()).first;
    paths_.push_back({});
    paths_.back().path = std::string(c.path);
    live_.emplace_back();
  }
  ForwardedPathSummary& p = paths_[it->second];
  auto& live = live_[it->second];
  ++p.calls_by_entry[std::string(core::trace::forwarded_entry_name(c.entry))];
  // What names the memory: the handle for cuMemCreate / cuMemRelease, else the address.
  const std::uint64_t key = c.handle != 0 && c.op != ForwardedOp::map && c.op != ForwardedOp::unmap
                                ? c.handle
                                : c.address;
  const bool takes = c.op == ForwardedOp::alloc || c.op == ForwardedOp::map;
  if (takes) {
    if (c.op == ForwardedOp::alloc) {
      ++p.allocs;
      p.alloc_bytes += c.bytes;
    } else {
      ++p.maps;
      p.mapped_bytes += c.bytes;
    }
    if (key == 0) ++p.unnamed_allocs;
    else live[key] = c.bytes;
    p.live_bytes += c.bytes;
    p.peak_live_bytes = std::max(p.peak_live_bytes, p.live_bytes);
    return;
  }
  if (c.op == ForwardedOp::free) ++p.frees;
  else ++p.unmaps;
  std::uint64_t bytes = c.bytes;
  auto found = key != 0 ? live.find(key) : live.end();
  if (found != live.end()) {
    if (bytes == 0) bytes = found->second;
    live.erase(found);
  } else {
    ++p.unmatched_frees;
  }
  if (c.op == ForwardedOp::free) p.freed_bytes += bytes;
  p.live_bytes -= std::min(p.live_bytes, bytes);
}

}  // namespace luma::tools
