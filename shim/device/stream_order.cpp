// stream_order.cpp - see stream_order.h.
#include "device/stream_order.h"

#include "config/log.h"

namespace luma::shim {

std::uint64_t StreamOrder::thread_number() noexcept {
  static std::atomic<std::uint64_t> next{0};
  static thread_local std::uint64_t number [[gnu::tls_model("initial-exec")]] = 0;
  if (number == 0) number = next.fetch_add(1, std::memory_order_relaxed) + 1;
  return number;
}

void StreamOrder::set_enabled(bool enabled) noexcept {
  std::lock_guard lock(facts_m_);
  facts_.reuse_allowed = enabled;
  const core::FreePathDecision d = core::decide_free_path(facts_);
  single_.store(d.path == core::FreePath::at_once, std::memory_order_release);
  legacy_.store(d.path != core::FreePath::fenced, std::memory_order_release);
}

core::FreePathDecision StreamOrder::decision() const noexcept {
  std::lock_guard lock(facts_m_);
  return core::decide_free_path(facts_);
}

bool StreamOrder::apply(core::FreePathDecision was) noexcept {
  const core::FreePathDecision now = core::decide_free_path(facts_);
  if (now.path == was.path) return false;
  if (now.path == core::FreePath::fenced) {
    // Every legacy barrier in flight has landed once this is taken (hold()).
    std::unique_lock gate(gate_);
    legacy_.store(false, std::memory_order_release);
  }
  single_.store(now.path == core::FreePath::at_once, std::memory_order_release);
  if (now.path == core::FreePath::legacy)
    log_noexcept(LogLevel::info, "{}: freed blocks are reused after a barrier on the legacy stream from now on",
                 now.why);
  else
    log_noexcept(LogLevel::info, "{}: freed blocks are fenced from now on (stream-ordered reuse ends)", now.why);
  return true;
}

bool StreamOrder::observe(core::FreePathFact fact) noexcept {
  if (!legacy()) return false;  // fenced already: nothing narrows it further
  std::lock_guard lock(facts_m_);
  if (facts_.has(fact)) return false;
  const core::FreePathDecision was = core::decide_free_path(facts_);
  facts_.add(fact);
  return apply(was);
}

bool StreamOrder::saw_current(CUcontext ctx, std::uint64_t thread) noexcept {
  if (!legacy()) return false;
  bool changed = false;
  std::uint64_t first_thread = 0;
  if (single() && !first_thread_.compare_exchange_strong(first_thread, thread, std::memory_order_acq_rel) &&
      first_thread != thread)
    changed = observe(core::FreePathFact::second_thread);
  if (ctx == nullptr) return changed;
  CUcontext first = nullptr;
  if (first_ctx_.compare_exchange_strong(first, ctx, std::memory_order_acq_rel) || first == ctx) return changed;
  return observe(core::FreePathFact::second_context) || changed;
}

}  // namespace luma::shim
