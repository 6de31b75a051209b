// host_cache_fences.cpp - see host_cache_fences.h.
#include "host_cache_fences.h"

#include <algorithm>

#include "scoped_context.h"

namespace luma::shim {
CUevent DriverHostFences::take_event(CUcontext ctx) noexcept {
  for (auto it = spare_.rbegin(); it != spare_.rend(); ++it)
    if (it->first == ctx) {
      CUevent e = it->second;
      spare_.erase(std::next(it).base());
      return e;
    }
  CUevent e = nullptr;
  return driver_.event_create(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS ? e : nullptr;
}

void DriverHostFences::give_event(CUcontext ctx, CUevent e) noexcept {
  try {
    spare_.emplace_back(ctx, e);
  } catch (...) {
    driver_.event_destroy(e);
  }
}

void DriverHostFences::synchronize(CUcontext ctx) noexcept {
  ++synchronizations_;
  ScopedContext scope(driver_, ctx);
  if (scope.ok()) driver_.ctx_synchronize();
}

ContextFence::Outcome DriverHostFences::record_in(CUcontext ctx, Slot& s) noexcept {
  ScopedContext scope(driver_, ctx);
  if (!scope.ok()) return ContextFence::Outcome::recorded;  // the context is gone, and its work
  try {
    std::vector<CUevent> events;
    events.reserve(1);
    const ContextFence::Outcome outcome = cover_.record(
        driver_, ctx, streams_, events, [&] { return take_event(ctx); },
        [&](CUevent e) { give_event(ctx, e); });
    if (outcome != ContextFence::Outcome::recorded) return outcome;
    s.events.reserve(s.events.size() + events.size());
    for (CUevent e : events) s.events.emplace_back(ctx, e);
    return outcome;
  } catch (...) {
    return ContextFence::Outcome::failed;  // host memory ran out; what was taken is pooled
  }
}

core::HostFence DriverHostFences::record() noexcept {
  std::uint32_t index = 0;
  bool have_slot = false;
  try {
    if (!free_slots_.empty()) {
      index = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slots_.emplace_back();
      index = static_cast<std::uint32_t>(slots_.size() - 1);
    }
    have_slot = true;
    Slot& s = slots_[index];
    s.used = true;
    contexts_.for_each_live([&](const ContextEntry& e) {
      const auto outcome = capturing(e.ctx) ? ContextFence::Outcome::capture_underway
                                            : record_in(e.ctx, s);
      if (outcome == ContextFence::Outcome::capture_underway) {
        s.deferred.push_back(e.ctx);
      } else if (outcome == ContextFence::Outcome::failed) {
        synchronize(e.ctx);  // could not cover every stream: wait for all of it now
      }
    });
  } catch (...) {
    // No host memory for the slot: the caller's block is then reused at once, so wait
    // for every context now (those capturing cannot wait: they got events or nothing).
    contexts_.for_each_live([&](const ContextEntry& e) {
      if (!capturing(e.ctx)) synchronize(e.ctx);
    });
    if (have_slot) release(index + 1);
    return core::kNoHostFence;
  }
  Slot& s = slots_[index];
  if (s.events.empty() && s.deferred.empty()) {
    release(index + 1);
    return core::kNoHostFence;  // no context with work: nothing to wait for
  }
  return index + 1;
}

bool DriverHostFences::done(core::HostFence fence) noexcept {
  if (fence == core::kNoHostFence || fence > slots_.size()) return true;
  Slot& s = slots_[fence - 1];
  // Deferred parts are recorded now that their context's capture ended: after it, so they
  // cover all work issued before the free.
  for (std::size_t i = 0; i < s.deferred.size();) {
    CUcontext ctx = s.deferred[i];
    if (capturing(ctx)) return false;
    const auto outcome = record_in(ctx, s);
    if (outcome == ContextFence::Outcome::capture_underway) return false;  // one luma missed
    if (outcome == ContextFence::Outcome::failed) synchronize(ctx);
    s.deferred.erase(s.deferred.begin() + static_cast<std::ptrdiff_t>(i));
  }
  for (std::size_t i = 0; i < s.events.size();) {
    const auto [ctx, e] = s.events[i];
    if (capturing(ctx)) return false;  // a query is a call a capture may forbid
    const CUresult r = driver_.event_query(e);
    if (r == CUDA_ERROR_NOT_READY) return false;
    if (r != CUDA_SUCCESS) synchronize(ctx);  // the driver lost the event: wait for all
    give_event(ctx, e);
    s.events.erase(s.events.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return true;
}

void DriverHostFences::release(core::HostFence fence) noexcept {
  if (fence == core::kNoHostFence || fence > slots_.size()) return;
  Slot& s = slots_[fence - 1];
  for (const auto& [ctx, e] : s.events) give_event(ctx, e);
  s.events.clear();
  s.deferred.clear();
  s.used = false;
  try {
    free_slots_.push_back(fence - 1);
  } catch (...) {  // the slot stays unused for good
  }
}

void DriverHostFences::forget_context(CUcontext ctx) noexcept {
  for (Slot& s : slots_) {
    std::erase_if(s.events, [ctx](const auto& p) { return p.first == ctx; });
    std::erase(s.deferred, ctx);
  }
  std::erase_if(spare_, [ctx](const auto& p) { return p.first == ctx; });
}

}  // namespace luma::shim
