// host_cache_fences.cpp - see host_cache_fences.h.
#include "pinned/host_cache_fences.h"

#include <algorithm>
#include <cstddef>

#include "driver/scoped_context.h"

namespace luma::shim {

FenceSlots& DriverHostFences::pool(CUcontext ctx) {
  for (const auto& p : pools_)
    if (p->context() == ctx) return *p;
  pools_.reserve(pools_.size() + 1);  // before the pool: push_back cannot throw after it
  pools_.push_back(std::make_unique<FenceSlots>(driver_, ctx, streams_, captures_, cover_,
                                                true, synchronizations_));
  return *pools_.back();
}

bool DriverHostFences::synchronize(CUcontext ctx) noexcept {
  const auto held = captures_.hold();  // the check and the synchronization see the same captures
  if (captures_.any() && captures_.any_in(ctx)) {  // a capture forbids it
    owe_synchronization_ = true;
    return false;
  }
  ++synchronizations_;
  ScopedContext scope(driver_, ctx);
  if (scope.ok()) driver_.ctx_synchronize();
  return true;
}

bool DriverHostFences::settle_owed() noexcept {
  const auto held = captures_.hold();
  if (captures_.any()) return false;
  if (owe_synchronization_) {
    // Every fence owing it was given before this: one round covers them all.
    owe_synchronization_ = false;
    contexts_.for_each_live([&](const ContextEntry& e) { synchronize(e.ctx); });
  }
  return true;
}

core::HostFence DriverHostFences::record() noexcept {
  std::uint32_t token = 0;
  try {
    token = fences_.acquire();
  } catch (...) {
    // No host memory for the fence: wait for every context now; those capturing cannot
    // wait, and the fence owes it until they are done.
    bool all = true;
    contexts_.for_each_live([&](const ContextEntry& e) { all = synchronize(e.ctx) && all; });
    return all ? core::kNoHostFence : kOwed;
  }
  Fence& f = *fences_.at(token);
  contexts_.for_each_live([&](const ContextEntry& e) {
    FenceSlots* p = nullptr;
    try {
      p = &pool(e.ctx);
    } catch (...) {
      if (!synchronize(e.ctx)) f.owed = true;  // no host memory for its pool
      return;
    }
    const FenceSlots::Token t = p->fence();
    if (t == FenceSlots::kNone) return;  // nothing to wait for there
    try {
      f.parts.push_back({p, t});
    } catch (...) {  // no host memory to keep it
      p->release(t);
      if (!synchronize(e.ctx)) f.owed = true;
    }
  });
  if (f.parts.empty() && !f.owed) {
    fences_.release(token);
    return core::kNoHostFence;  // no context with work: nothing to wait for
  }
  return token;
}

bool DriverHostFences::done(core::HostFence fence) noexcept {
  Fence* f = fences_.at(fence);
  if (f == nullptr) return fence != kOwed || settle_owed();
  for (; f->done < f->parts.size(); ++f->done)
    if (!f->parts[f->done].pool->poll(f->parts[f->done].token)) return false;
  if (f->owed) {
    if (!settle_owed()) return false;
    f->owed = false;
  }
  return true;
}

void DriverHostFences::release(core::HostFence fence) noexcept {
  Fence* f = fences_.at(fence);
  if (f == nullptr) return;
  for (const Part& p : f->parts) p.pool->release(p.token);
  f->parts.clear();
  f->done = 0;
  f->owed = false;
  fences_.release(fence);
}

void DriverHostFences::forget_context(CUcontext ctx) noexcept {
  const auto it = std::find_if(pools_.begin(), pools_.end(),
                               [ctx](const auto& p) { return p->context() == ctx; });
  if (it == pools_.end()) return;
  const FenceSlots* gone = it->get();
  fences_.for_each([gone](Fence& f) {
    // Its parts leave every fence; the parts seen done stay counted.
    std::size_t kept = 0;
    std::uint32_t kept_done = 0;
    for (std::size_t i = 0; i < f.parts.size(); ++i) {
      if (f.parts[i].pool == gone) continue;
      if (i < f.done) ++kept_done;
      f.parts[kept++] = f.parts[i];
    }
    f.parts.erase(f.parts.begin() + static_cast<std::ptrdiff_t>(kept), f.parts.end());
    f.done = kept_done;
  });
  (*it)->forget_events();
  pools_.erase(it);
}

}  // namespace luma::shim
