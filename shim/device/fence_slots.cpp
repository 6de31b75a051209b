// fence_slots.cpp - see fence_slots.h.
#include "device/fence_slots.h"

#include "driver/scoped_context.h"

namespace luma::shim {

CUevent FenceSlots::take_event() noexcept {
  if (!spare_.empty()) {
    CUevent e = spare_.back();
    spare_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  return driver_.event_create(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS ? e : nullptr;
}

void FenceSlots::give_event(CUevent e) noexcept {
  try {
    spare_.push_back(e);
  } catch (...) {
    driver_.event_destroy(e);
  }
}

void FenceSlots::synchronize() noexcept {
  const auto held = captures_.hold();
  if (capturing()) return;  // refused in a capture: callers defer instead
  ScopedContext scope(driver_, ctx_);
  if (scope.ok()) driver_.ctx_synchronize();
}

bool FenceSlots::lost() noexcept {
  ++synchronizations_;
  synchronize();
  return true;
}

bool FenceSlots::settle_owed() noexcept {
  if (capturing()) return false;
  if (owe_synchronization_) {
    // Every kOwed fence so far was given before this: one synchronization covers them all.
    owe_synchronization_ = false;
    ++synchronizations_;
    synchronize();
  }
  return true;
}

ContextFence::Outcome FenceSlots::record(Slot& s) noexcept {
  s.done = 0;
  return cover_.record(driver_, ctx_, streams_, s.events, [this] { return take_event(); },
                       [this](CUevent e) { give_event(e); });
}

FenceSlots::Token FenceSlots::fence() noexcept {
  const auto held = captures_.hold();
  if (capturing()) {
    // A capture underway there, or the context being destroyed: nothing may be asked of
    // the driver in it (not even to make it current), so the fence is recorded at the
    // first poll after. Without host memory for a slot nothing can wait either: the
    // synchronization is owed until then.
    try {
      const Token token = slots_.acquire();
      slots_.at(token)->deferred = true;
      return token;
    } catch (...) {
      owe_synchronization_ = true;
      return kOwed;
    }
  }
  if (!record_events_) {
    synchronize();
    return kNone;
  }
  ScopedContext scope(driver_, ctx_);
  if (!scope.ok()) return kNone;  // the context is gone, and its work with it
  Token token = kNone;
  try {
    token = slots_.acquire();
  } catch (...) {
    // No host memory for a slot: make the memory safe by waiting for all of it.
    ++synchronizations_;
    driver_.ctx_synchronize();
    return kNone;
  }
  Slot& s = *slots_.at(token);
  s.deferred = false;
  switch (record(s)) {
    case ContextFence::Outcome::recorded:
      return token;
    case ContextFence::Outcome::capture_underway:
      // A capture luma did not see (an entry point it does not hook): recorded after it.
      s.deferred = true;
      return token;
    case ContextFence::Outcome::failed:
      break;
  }
  // Could not cover every stream: make the memory safe by waiting for all of it.
  release(token);
  ++synchronizations_;
  driver_.ctx_synchronize();
  return kNone;
}

bool FenceSlots::record_deferred(Slot& s) noexcept {
  // The capture(s) ended: the fence is recorded now, after them, and covers all the work
  // issued before its frees (and the capture's own launches since).
  ScopedContext scope(driver_, ctx_);
  if (!scope.ok()) {
    s.deferred = false;
    return true;  // the context is gone, and its work with it
  }
  const auto outcome = record_events_ ? record(s) : ContextFence::Outcome::failed;
  if (outcome == ContextFence::Outcome::capture_underway) return false;  // still deferred
  s.deferred = false;
  if (outcome == ContextFence::Outcome::failed) {
    if (record_events_) ++synchronizations_;
    synchronize();  // nothing recorded: the loop after finds no event, and the fence is done
  }
  return true;
}

bool FenceSlots::wait(std::uint64_t token) noexcept {
  const auto held = captures_.hold();
  Slot* s = slots_.at(token);
  if (s == nullptr) return token != kOwed || settle_owed();
  if (capturing()) return false;
  if (s->deferred) {
    if (poll(token)) return true;  // records it now
    if (s->deferred) return false;  // the driver still reports a capture: cannot wait
  }
  for (; s->done < s->events.size(); ++s->done)
    if (driver_.event_synchronize(s->events[s->done]) != CUDA_SUCCESS) return lost();
  return true;
}

void FenceSlots::release(std::uint64_t token) noexcept {
  Slot* s = slots_.at(token);
  if (s == nullptr) return;
  for (CUevent e : s->events) give_event(e);
  s->events.clear();
  s->done = 0;
  s->deferred = false;
  slots_.release(static_cast<Token>(token));
}

void FenceSlots::forget_events() noexcept {
  slots_.for_each([](Slot& s) {
    s.events.clear();
    s.done = 0;
  });
  spare_.clear();
}

}  // namespace luma::shim
