// host_cache_driver.h - the pinned host cache of the process (core/host_cache/) over the
// real driver: cuMemHostAlloc and cuMemAllocHost are served from freed blocks of the same
// flags (and context, unless PORTABLE), misses and evictions are real driver calls made
// outside the lock, fences are DriverHostFences. Made at initialisation when luma serves
// and LUMA_CONF's host_cache is on (State::host_cache; nullptr otherwise).
//
// While a stream capture is underway, blocks due back to the driver wait in a list (a
// cuMemFreeHost synchronizes, which a capture forbids) and go at the next call made with
// no capture underway.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "host_cache/host_cache.h"
#include "pinned/host_cache_fences.h"

namespace luma::shim {

struct State;

class PinnedHostCache {
 public:
  PinnedHostCache(const RealDriver& driver, const ContextTable& contexts, StreamRegistry& streams,
                  const CaptureRegistry& captures, std::uint64_t limit);

  // cuMemHostAlloc (flags) or cuMemAllocHost (real_host_alloc: the ABI the program
  // called, so a miss asks the driver what the program asked) in context ctx, current.
  // nullopt: not for the cache (luma forwards the call untouched).
  template <typename Real>
  std::optional<CUresult> allocate(void** pp, std::size_t bytes, unsigned flags, CUcontext ctx,
                                   Real real);
  // cuMemFreeHost(p): nullopt when p is not the cache's (luma forwards the call).
  std::optional<CUresult> free(void* p);
  // The context was destroyed: the driver freed its pinned blocks with it.
  void forget_context(CUcontext ctx) noexcept;

  // The statistics, or nullopt when the lock stayed busy (exit does not wait long).
  std::optional<core::HostCacheStats> stats_for_exit() noexcept;
  std::uint64_t limit() const noexcept { return limit_; }

 private:
  // Frees blocks with the driver, or keeps them for later while a capture is underway.
  void give_to_driver(std::vector<core::HostBlock>& blocks) noexcept;

  const RealDriver& driver_;
  const CaptureRegistry& captures_;
  std::uint64_t limit_;
  std::mutex mutex_;  // guards everything below
  DriverHostFences fences_;
  core::HostCache cache_;
  std::vector<core::HostBlock> after_capture_;  // due back to the driver once no capture runs
  std::atomic<bool> waiting_{false};             // after_capture_ is not empty
};

// The flags cuMemHostAlloc accepts (cuda.h); anything else is the driver's error to give.
inline constexpr unsigned kHostAllocFlags =
    CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;

template <typename Real>
std::optional<CUresult> PinnedHostCache::allocate(void** pp, std::size_t bytes, unsigned flags,
                                                  CUcontext ctx, Real real) {
  if (pp == nullptr || bytes == 0 || (flags & ~kHostAllocFlags) != 0 || ctx == nullptr)
    return std::nullopt;  // the driver's error, as without luma
  const auto owner = reinterpret_cast<std::uintptr_t>(ctx);
  std::size_t size = 0;
  {
    std::lock_guard lock(mutex_);
    if (auto b = cache_.take(bytes, flags, owner)) {
      *pp = b->ptr;
      return CUDA_SUCCESS;
    }
    size = cache_.block_size(bytes);
  }
  if (size == 0) return std::nullopt;
  void* p = nullptr;
  CUresult r = real(&p, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    // The pinned memory luma holds may be what the driver lacks: give it back, ask again.
    std::vector<core::HostBlock> held;
    {
      std::lock_guard lock(mutex_);
      cache_.release_all(held);
    }
    if (held.empty()) return r;
    give_to_driver(held);
    r = real(&p, size);
  }
  if (r != CUDA_SUCCESS) return r;
  try {
    std::lock_guard lock(mutex_);
    cache_.adopt({p, size, flags, owner});
  } catch (...) {  // no host memory to track it: the program gets it uncached (its free is
  }               // then not the cache's, and goes to the driver)
  *pp = p;
  return CUDA_SUCCESS;
}

}  // namespace luma::shim
