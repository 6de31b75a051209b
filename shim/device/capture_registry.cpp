// capture_registry.cpp - see capture_registry.h.
#include "device/capture_registry.h"

#include <algorithm>

namespace luma::shim {
namespace {

thread_local CaptureMode t_mode [[gnu::tls_model("initial-exec")]] = CaptureMode::global;
thread_local char t_id [[gnu::tls_model("initial-exec")]] = 0;
// The registry whose gate this thread holds shared, and how deeply (Hold is re-entrant).
thread_local const CaptureRegistry* t_holding [[gnu::tls_model("initial-exec")]] = nullptr;
thread_local unsigned t_depth [[gnu::tls_model("initial-exec")]] = 0;

}  // namespace

CaptureMode& thread_capture_mode() noexcept { return t_mode; }

std::uint64_t this_thread_id() noexcept { return reinterpret_cast<std::uintptr_t>(&t_id); }

CaptureRegistry::Hold::Hold(const CaptureRegistry& r) noexcept {
  if (t_holding == &r) {
    ++t_depth;
    return;
  }
  r.gate_.lock_shared();
  gate_ = &r.gate_;
  if (t_holding == nullptr) {  // (another registry held already: tests only, not tracked)
    t_holding = &r;
    t_depth = 1;
    outermost_ = true;
  }
}

CaptureRegistry::Hold::~Hold() {
  if (gate_ == nullptr) {
    if (t_depth > 0) --t_depth;
    return;
  }
  if (outermost_) {
    t_holding = nullptr;
    t_depth = 0;
  }
  gate_->unlock_shared();
}

std::uint64_t CaptureRegistry::add(const Capture& c) {
  // A thread inside a Hold of its own cannot wait for itself (the driver does not call the
  // program back from luma's calls, so this does not happen; it must not hang if it does).
  std::unique_lock<std::shared_mutex> gate(gate_, std::defer_lock);
  if (t_holding != this) gate.lock();
  std::lock_guard lock(mutex_);
  const std::uint64_t ticket = ++next_ticket_;
  captures_.push_back(c);
  captures_.back().ticket = ticket;
  count_.store(captures_.size(), std::memory_order_release);
  return ticket;
}

std::uint64_t CaptureRegistry::announce(CUcontext ctx, CUstream stream, CaptureMode mode,
                                        std::uint64_t thread) {
  return add({ctx, stream, mode, thread, 0, false});
}

std::uint64_t CaptureRegistry::announce_context_end(CUcontext ctx) {
  // Relaxed: forbids_unsafe_call passes it over even without the flag.
  return add({ctx, nullptr, CaptureMode::relaxed, 0, 0, true});
}

void CaptureRegistry::withdraw(std::uint64_t ticket) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(captures_, [&](const Capture& c) { return c.ticket == ticket; });
  count_.store(captures_.size(), std::memory_order_release);
}

void CaptureRegistry::end(CUstream stream) noexcept {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(captures_.begin(), captures_.end(),
                         [&](const Capture& c) { return !c.context_ending && c.stream == stream; });
  if (it != captures_.end()) captures_.erase(it);
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
                     [&](const Capture& c) { return !c.context_ending && c.stream == stream; });
}

bool CaptureRegistry::forbids_unsafe_call(std::uint64_t thread, CaptureMode thread_mode) const {
  if (!any() || thread_mode == CaptureMode::relaxed) return false;
  std::lock_guard lock(mutex_);
  return std::any_of(captures_.begin(), captures_.end(), [&](const Capture& c) {
    if (c.context_ending || c.mode == CaptureMode::relaxed) return false;
    const bool own = c.thread == thread;
    if (thread_mode == CaptureMode::global) return c.mode == CaptureMode::global || own;
    return own;  // thread-local mode: only the thread's own captures count
  });
}

}  // namespace luma::shim
