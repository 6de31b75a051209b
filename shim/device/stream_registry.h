// stream_registry.h - the non-blocking streams the program created, per context. On a
// driver without cuCtxRecordEvent (before CUDA 12.5), free_sync:event's fence records an
// event on each of them that is not idle (and on the legacy stream): work on a non-blocking
// stream does not wait for the legacy stream, so an event on the legacy stream alone would
// not cover it (CUDA Programming Guide, "Default stream"). context_fence.h.
// Blocking streams need no entry: the legacy stream already waits for their work.
// Must never call the driver except through the callback of for_each (under its lock).
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include "driver/cuda_abi.h"

namespace luma::shim {

class StreamRegistry {
 public:
  void add(CUcontext ctx, CUstream stream);
  // Forgets the stream; called before the real cuStreamDestroy, so no fence is recorded on
  // a destroyed stream (for_each holds the same lock while it records).
  void remove(CUstream stream) noexcept;

  // Calls fn(stream) for every non-blocking stream of ctx, with the registry locked.
  template <typename Fn>
  void for_each(CUcontext ctx, Fn&& fn) {
    std::lock_guard lock(mutex_);
    for (const auto& [c, s] : streams_)
      if (c == ctx) fn(s);
  }

  // Forgets every stream of ctx (the context was destroyed, its streams with it).
  void remove_context(CUcontext ctx) noexcept;

  void clear() noexcept;

  // Streams tracked now (luma's records).
  std::size_t size() const noexcept {
    std::lock_guard lock(mutex_);
    return streams_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<CUcontext, CUstream>> streams_;  // few: a flat list is fastest
};

}  // namespace luma::shim
