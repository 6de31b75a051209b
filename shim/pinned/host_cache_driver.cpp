// host_cache_driver.cpp - see host_cache_driver.h.
#include "pinned/host_cache_driver.h"

#include <chrono>
#include <thread>

#include "config/log.h"

namespace luma::shim {

PinnedHostCache::PinnedHostCache(const RealDriver& driver, const ContextTable& contexts,
                                 StreamRegistry& streams, const CaptureRegistry& captures,
                                 std::uint64_t limit)
    : driver_(driver),
      captures_(captures),
      limit_(limit),
      fences_(driver, contexts, streams, captures),
      cache_(fences_, {.limit = limit, .any_owner_flags = CU_MEMHOSTALLOC_PORTABLE}) {}

void PinnedHostCache::give_to_driver(std::vector<core::HostBlock>& blocks) noexcept {
  // Held to the last cuMemFreeHost: no capture begins between the check and the frees.
  const auto held = captures_.hold();
  if (captures_.any()) {
    std::lock_guard lock(mutex_);
    try {
      after_capture_.insert(after_capture_.end(), blocks.begin(), blocks.end());
      waiting_.store(!after_capture_.empty(), std::memory_order_relaxed);
      return;
    } catch (...) {  // no memory to keep them: freeing now is still what the program asked
    }
  } else {
    std::lock_guard lock(mutex_);
    if (!after_capture_.empty()) {
      try {
        blocks.insert(blocks.end(), after_capture_.begin(), after_capture_.end());
        after_capture_.clear();
        waiting_.store(false, std::memory_order_relaxed);
      } catch (...) {
      }
    }
  }
  for (const core::HostBlock& b : blocks) {
    const CUresult r = driver_.mem_free_host(b.ptr);
    if (r != CUDA_SUCCESS)
      log_noexcept(LogLevel::warn, "cuMemFreeHost of a cached pinned block ({} bytes) failed with error {}",
                   b.bytes, static_cast<int>(r));
  }
}

std::optional<CUresult> PinnedHostCache::free(void* p) {
  std::vector<core::HostBlock> to_free;
  core::HostCache::Freed f;
  {
    std::lock_guard lock(mutex_);
    try {
      f = cache_.give_back(p, to_free);
    } catch (...) {  // no host memory to hold it: the driver frees it, as without luma
      cache_.disown(p);
      return std::nullopt;
    }
  }
  switch (f) {
    case core::HostCache::Freed::not_ours: return std::nullopt;
    case core::HostCache::Freed::twice: return CUDA_ERROR_INVALID_VALUE;
    case core::HostCache::Freed::cached:
    case core::HostCache::Freed::to_driver: break;
  }
  if (!to_free.empty() || waiting_.load(std::memory_order_relaxed)) give_to_driver(to_free);
  return CUDA_SUCCESS;
}

void PinnedHostCache::forget_context(CUcontext ctx) noexcept {
  std::lock_guard lock(mutex_);
  fences_.forget_context(ctx);
  try {
    cache_.forget_owner(reinterpret_cast<std::uintptr_t>(ctx));
  } catch (...) {
  }
  std::erase_if(after_capture_, [ctx](const core::HostBlock& b) {
    return b.owner == reinterpret_cast<std::uintptr_t>(ctx);
  });
}

std::optional<core::HostCacheStats> PinnedHostCache::stats_for_exit() noexcept {
  // A thread may hold the lock for good at exit (inside a driver call that never ends):
  // wait a little, never for good.
  for (int i = 0; i < 100; ++i) {
    if (mutex_.try_lock()) {
      std::lock_guard lock(mutex_, std::adopt_lock);
      return cache_.stats();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::nullopt;
}

}  // namespace luma::shim
