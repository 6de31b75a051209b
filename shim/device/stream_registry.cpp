// stream_registry.cpp - see stream_registry.h.
#include "device/stream_registry.h"

#include <algorithm>

namespace luma::shim {

void StreamRegistry::add(CUcontext ctx, CUstream stream) {
  std::lock_guard lock(mutex_);
  streams_.emplace_back(ctx, stream);
}

void StreamRegistry::remove(CUstream stream) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(streams_, [&](const auto& e) { return e.second == stream; });
}

void StreamRegistry::remove_context(CUcontext ctx) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(streams_, [&](const auto& e) { return e.first == ctx; });
}

void StreamRegistry::clear() noexcept {
  std::lock_guard lock(mutex_);
  streams_.clear();
}

}  // namespace luma::shim
