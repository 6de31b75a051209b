// capture_registry.cpp - see capture_registry.h.
#include "capture_registry.h"

#include <algorithm>

namespace luma::shim {
namespace {

thread_local CaptureMode t_mode [[gnu::tls_model("initial-exec")]] = CaptureMode::global;
thread_local char t_id [[gnu::tls_model("initial-exec")]] = 0;

}  // namespace

CaptureMode& thread_capture_mode() noexcept { return t_mode; }

std::uint64_t this_thread_id() noexcept { return reinterpret_cast<std::uintptr_t>(&t_id); }

void CaptureRegistry::begin(CUcontext ctx, CUstream stream, CaptureMode mode,
                            std::uint64_t thread) {
  std::lock_guard lock(mutex_);
  captures_.push_back({ctx, stream, mode, thread});
  count_.store(captures_.size(), std::memory_order_release);
}

void CaptureRegistry::end(CUstream stream) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(captures_, [&](const Capture& c) { return c.stream == stream; });
  count_.store(captures_.size(), std::memory_order_release);
}

void CaptureRegistry::end_context(CUcontext ctx) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(captures_, [&](const Capture& c) { return c.ctx == ctx; });
  count_.store(captures_.size(), std::memory_order_release);
}

bool CaptureRegistry::any_in(CUcontext ctx) const {
  if (!any()) return false;
  std::lock_guard lock(mutex_);
  return std::any_of(captures_.begin(), captures_.end(),
                     [&](const Capture& c) { return c.ctx == ctx; });
}

bool CaptureRegistry::capturing(CUstream stream) const {
  if (!any()) return false;
  std::lock_guard lock(mutex_);
  return std::any_of(captures_.begin(), captures_.end(),
                     [&](const Capture& c) { return c.stream == stream; });
}

bool CaptureRegistry::forbids_unsafe_call(std::uint64_t thread, CaptureMode thread_mode) const {
  if (!any() || thread_mode == CaptureMode::relaxed) return false;
  std::lock_guard lock(mutex_);
  return std::any_of(captures_.begin(), captures_.end(), [&](const Capture& c) {
    if (c.mode == CaptureMode::relaxed) return false;
    const bool own = c.thread == thread;
    if (thread_mode == CaptureMode::global) return c.mode == CaptureMode::global || own;
    return own;  // thread-local mode: only the thread's own captures count
  });
}

}  // namespace luma::shim
