// host_cache.h - a cache of pinned (page-locked) host blocks: cuMemHostAlloc costs
// milliseconds (the driver pins every page), and programs allocate staging buffers in
// loops. Blocks are handed out whole - one driver allocation per program block, never
// split - so the driver's own answers about a block (cuMemHostGetFlags,
// cuMemHostGetDevicePointer, cuPointerGetAttribute) stay right.
//
// Rules (docs/architecture.md, "Pinned host memory"):
// - one pool per flag set: a block allocated with DEVICEMAP never serves a request
//   without it, nor the other way round (the flags change what the memory is); and per
//   owner (the allocating CUDA context) unless its flags include one of any_owner_flags
//   (PORTABLE: "considered as pinned memory by all CUDA contexts"); an owner that ends
//   takes its blocks with it (forget_owner);
// - sizes are rounded up to the granule (a page: the driver pins whole pages anyway), and
//   a cached block serves a request only if it is at most 1/2^slack_shift larger (1/8 by
//   default): never power-of-two rounding, which in PyTorch's host cache held up to twice
//   the bytes asked for;
// - a freed block is held under a fence (an asynchronous copy queued before the free may
//   still read or write it) and handed out again only once the fence is done;
// - the bytes held (freed blocks, fenced or not) are bounded: the least recently freed go
//   back to the driver first; a block larger than the bound goes back at once. Freeing to
//   the driver is what the program asked for (earlier), so it is no less safe than the
//   program without luma, whatever the block's fence.
//
// Makes no driver call: take/adopt/give_back say what the caller must allocate or free.
// Not thread-safe: the owner locks around every call.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace luma::core {

// A fence token of HostFences: 0 is "none" (nothing to wait for).
using HostFence = std::uint32_t;
inline constexpr HostFence kNoHostFence = 0;

// What a freed block waits for before reuse. The shim records events on the streams of
// the process's contexts; tests use a double.
class HostFences {
 public:
  virtual ~HostFences() = default;
  // A fence covering all work queued so far (kNoHostFence: nothing can be pending).
  virtual HostFence record() noexcept = 0;
  // Whether the work the fence covers has completed (false: not yet, or not knowable now).
  virtual bool done(HostFence fence) noexcept = 0;
  // The token is given back (exactly once per recorded fence).
  virtual void release(HostFence fence) noexcept = 0;
};

struct HostCacheOptions {
  // The most bytes held in freed blocks (0: nothing is kept, every free goes to the driver).
  std::uint64_t limit = std::uint64_t{1} << 30;
  // Sizes are rounded up to this (a power of two).
  std::size_t granule = 4096;
  // A cached block of `b` bytes serves a request rounded to `r` when r <= b <= r + r/2^shift.
  unsigned slack_shift = 3;
  // Flags that make a block serve requests of any owner (the shim: PORTABLE).
  unsigned any_owner_flags = 0;
};

// A driver allocation: its address, its size as allocated (rounded), its flags, and its
// owner (the shim: the context that allocated it; 0 for none).
struct HostBlock {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  unsigned flags = 0;
  std::uintptr_t owner = 0;
};

struct HostCacheStats {
  std::uint64_t hits = 0;          // requests served from a freed block
  std::uint64_t misses = 0;        // requests the driver had to allocate (adopted blocks)
  std::uint64_t frees_cached = 0;  // frees kept for reuse
  std::uint64_t frees_to_driver = 0;  // frees of blocks larger than the bound
  std::uint64_t evictions = 0;     // held blocks given back to the driver for the bound
  std::uint64_t evicted_bytes = 0;
  std::uint64_t held_bytes = 0;    // in freed blocks now (fenced or not)
  std::uint64_t peak_held_bytes = 0;
  std::uint64_t held_blocks = 0;
  std::uint64_t live_blocks = 0;   // handed out to the program now
  std::uint64_t live_bytes = 0;
  std::uint64_t fenced_skips = 0;  // fitting blocks passed over because their fence was not done
};

class HostCache {
 public:
  HostCache(HostFences& fences, HostCacheOptions options) noexcept
      : fences_(fences), options_(options) {}
  ~HostCache();  // gives back the fence tokens it holds (the blocks are the owner's)
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;

  // The size a request of `bytes` is allocated with (the granule multiple); 0 when it
  // overflows or bytes is 0.
  std::size_t block_size(std::size_t bytes) const noexcept;

  // A freed block of `flags` (and `owner`, see any_owner_flags) fitting `bytes` whose
  // fence is done, now live; nullopt: the caller allocates block_size(bytes) from the
  // driver and adopt()s it.
  std::optional<HostBlock> take(std::size_t bytes, unsigned flags, std::uintptr_t owner = 0);
  // b (a new driver allocation) is the program's now, and luma's to cache when freed.
  void adopt(const HostBlock& b);

  enum class Freed : std::uint8_t {
    not_ours,   // not a block this cache handed out: the caller forwards the free
    cached,     // held for reuse
    to_driver,  // larger than the bound: the caller frees it (in to_free)
    twice,      // already freed and held here: the driver's answer to a second free is
                // CUDA_ERROR_INVALID_VALUE, and forwarding it would free a cached block
  };
  // The program freed ptr. Blocks the caller must free with the driver are appended to
  // to_free (evicted older blocks, or this one).
  Freed give_back(void* ptr, std::vector<HostBlock>& to_free);

  // The cache forgets live block ptr (the caller gives it to the driver itself, when
  // give_back could not take it for want of host memory).
  void disown(const void* ptr) noexcept;
  // Whether ptr is a live block of this cache.
  bool owns(const void* ptr) const noexcept { return live_.count(ptr) != 0; }
  // Every held block, fenced or not, into to_free (freeing to the driver is always safe).
  void release_all(std::vector<HostBlock>& to_free);
  // The owner ended and the driver freed its blocks with it: forget them, held and live
  // (a later free of a live one is not ours, and the driver answers it). Returns how many.
  std::size_t forget_owner(std::uintptr_t owner);

  const HostCacheStats& stats() const noexcept { return stats_; }
  const HostCacheOptions& options() const noexcept { return options_; }

 private:
  struct Held {
    HostBlock block;
    HostFence fence = kNoHostFence;  // kNoHostFence once done (or never needed)
  };
  // (flags, owner or 0 when the flags serve any owner, bytes): best fit in one pool is the
  // next key up.
  struct Key {
    unsigned flags;
    std::uintptr_t owner;
    std::size_t bytes;
    auto operator<=>(const Key&) const = default;
  };
  Key key_of(unsigned flags, std::uintptr_t owner, std::size_t bytes) const noexcept {
    return {flags, (flags & options_.any_owner_flags) != 0 ? 0 : owner, bytes};
  }

  // Moves held block `seq` out of both indexes; returns it (its fence already released).
  HostBlock unhold(std::uint64_t seq);
  // Evicts the least recently freed blocks until `incoming` more bytes fit the bound.
  void make_room(std::uint64_t incoming, std::vector<HostBlock>& to_free);

  HostFences& fences_;
  HostCacheOptions options_;
  std::unordered_map<const void*, HostBlock> live_;
  std::map<std::uint64_t, Held> held_;          // by free order: oldest first (eviction)
  std::unordered_map<const void*, std::uint64_t> held_seq_;  // ptr -> its key in held_
  std::multimap<Key, std::uint64_t> by_size_;   // -> seq, best fit first
  std::uint64_t next_seq_ = 0;
  HostCacheStats stats_;
};

}  // namespace luma::core
