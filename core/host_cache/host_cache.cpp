// host_cache.cpp - see host_cache.h.
#include "host_cache/host_cache.h"

#include <algorithm>
#include <limits>

namespace luma::core {
namespace {
// Fitting blocks whose fence is not done are passed over; after this many the request
// goes to the driver rather than query fence after fence (each is a driver call).
constexpr int kMaxFencedCandidates = 8;
}  // namespace

HostCache::~HostCache() {
  for (auto& [seq, h] : held_)
    if (h.fence != kNoHostFence) fences_.release(h.fence);
}

std::size_t HostCache::block_size(std::size_t bytes) const noexcept {
  const std::size_t g = options_.granule;
  if (bytes == 0 || bytes > std::numeric_limits<std::size_t>::max() - (g - 1)) return 0;
  return (bytes + g - 1) & ~(g - 1);
}

std::optional<HostBlock> HostCache::take(std::size_t bytes, unsigned flags,
                                         std::uintptr_t owner) {
  const std::size_t need = block_size(bytes);
  if (need == 0) return std::nullopt;
  const std::size_t slack = need >> options_.slack_shift;
  const std::size_t most = need > std::numeric_limits<std::size_t>::max() - slack
                               ? std::numeric_limits<std::size_t>::max()
                               : need + slack;
  int fenced = 0;
  const Key want = key_of(flags, owner, need);
  for (auto it = by_size_.lower_bound(want); it != by_size_.end() && it->first.flags == flags &&
                                             it->first.owner == want.owner && it->first.bytes <= most;
       ++it) {
    Held& h = held_.at(it->second);
    if (h.fence != kNoHostFence) {
      if (!fences_.done(h.fence)) {
        ++stats_.fenced_skips;
        if (++fenced == kMaxFencedCandidates) break;
        continue;
      }
      fences_.release(h.fence);
      h.fence = kNoHostFence;
    }
    const HostBlock b = unhold(it->second);
    live_.emplace(b.ptr, b);
    ++stats_.hits;
    ++stats_.live_blocks;
    stats_.live_bytes += b.bytes;
    return b;
  }
  return std::nullopt;
}

void HostCache::adopt(const HostBlock& b) {
  // A stale entry at the same address (a block the cache lost track of) is replaced.
  if (auto old = live_.find(b.ptr); old != live_.end()) disown(old->first);
  live_.emplace(b.ptr, b);
  ++stats_.misses;
  ++stats_.live_blocks;
  stats_.live_bytes += b.bytes;
}

HostBlock HostCache::unhold(std::uint64_t seq) {
  auto it = held_.find(seq);
  Held h = it->second;
  held_.erase(it);
  held_seq_.erase(h.block.ptr);
  auto range = by_size_.equal_range(key_of(h.block.flags, h.block.owner, h.block.bytes));
  for (auto s = range.first; s != range.second; ++s)
    if (s->second == seq) {
      by_size_.erase(s);
      break;
    }
  if (h.fence != kNoHostFence) fences_.release(h.fence);
  stats_.held_bytes -= h.block.bytes;
  --stats_.held_blocks;
  return h.block;
}

void HostCache::make_room(std::uint64_t incoming, std::vector<HostBlock>& to_free) {
  while (!held_.empty() && stats_.held_bytes + incoming > options_.limit) {
    const HostBlock b = unhold(held_.begin()->first);
    to_free.push_back(b);
    ++stats_.evictions;
    stats_.evicted_bytes += b.bytes;
  }
}

HostCache::Freed HostCache::give_back(void* ptr, std::vector<HostBlock>& to_free) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return held_seq_.count(ptr) != 0 ? Freed::twice : Freed::not_ours;
  const HostBlock b = it->second;
  // Room in the vector first (this block and the ones make_room will evict): after the
  // block left live_, nothing may throw before it is held or handed back.
  std::size_t evict = 0;
  if (b.bytes <= options_.limit) {
    std::uint64_t held = stats_.held_bytes;
    for (auto h = held_.begin(); h != held_.end() && held + b.bytes > options_.limit; ++h, ++evict)
      held -= h->second.block.bytes;
  }
  to_free.reserve(to_free.size() + evict + 1);
  live_.erase(it);
  --stats_.live_blocks;
  stats_.live_bytes -= b.bytes;
  if (b.bytes > options_.limit) {
    to_free.push_back(b);
    ++stats_.frees_to_driver;
    return Freed::to_driver;
  }
  make_room(b.bytes, to_free);
  const std::uint64_t seq = next_seq_++;
  try {
    auto [pos, inserted] = held_.emplace(seq, Held{b, kNoHostFence});
    try {
      auto s = by_size_.emplace(key_of(b.flags, b.owner, b.bytes), seq);
      try {
        held_seq_.emplace(b.ptr, seq);
      } catch (...) {
        by_size_.erase(s);
        throw;
      }
    } catch (...) {
      held_.erase(pos);
      throw;
    }
  } catch (...) {  // no host memory to index it: the driver takes it back
    to_free.push_back(b);
    ++stats_.frees_to_driver;
    return Freed::to_driver;
  }
  // The fence last: recorded after the free, it covers every copy queued before it.
  held_.at(seq).fence = fences_.record();
  stats_.held_bytes += b.bytes;
  ++stats_.held_blocks;
  stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, stats_.held_bytes);
  ++stats_.frees_cached;
  return Freed::cached;
}

void HostCache::release_all(std::vector<HostBlock>& to_free) {
  to_free.reserve(to_free.size() + held_.size());
  while (!held_.empty()) to_free.push_back(unhold(held_.begin()->first));
}

void HostCache::disown(const void* ptr) noexcept {
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  --stats_.live_blocks;
  stats_.live_bytes -= it->second.bytes;
  live_.erase(it);
}

std::size_t HostCache::forget_owner(std::uintptr_t owner) {
  std::size_t n = 0;
  for (auto it = held_.begin(); it != held_.end();) {
    const std::uint64_t seq = it->first;
    const bool theirs = it->second.block.owner == owner;
    ++it;  // before unhold erases it
    if (theirs) {
      unhold(seq);
      ++n;
    }
  }
  for (auto it = live_.begin(); it != live_.end();) {
    if (it->second.owner == owner) {
      --stats_.live_blocks;
      stats_.live_bytes -= it->second.bytes;
      it = live_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

}  // namespace luma::core
