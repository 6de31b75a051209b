// stream_order.cpp - see stream_order.h.
#include "stream_order.h"

#include "log.h"

namespace luma::shim {

std::uint64_t StreamOrder::thread_number() noexcept {
  static std::atomic<std::uint64_t> next{0};
  static thread_local std::uint64_t number [[gnu::tls_model("initial-exec")]] = 0;
  if (number == 0) number = next.fetch_add(1, std::memory_order_relaxed) + 1;
  return number;
}

bool StreamOrder::end(const char* why) noexcept {
  bool was_legacy = false;
  {
    // Every legacy barrier in flight has landed once this is taken (hold()).
    std::unique_lock lock(gate_);
    was_legacy = legacy_.exchange(false, std::memory_order_acq_rel);
  }
  const bool was_single = single_.exchange(false, std::memory_order_acq_rel);
  if (!was_legacy && !was_single) return false;
  log_noexcept(LogLevel::info, "{}: freed blocks are fenced from now on (stream-ordered reuse ends)", why);
  return true;
}

bool StreamOrder::end_single(const char* why) noexcept {
  if (!single_.exchange(false, std::memory_order_acq_rel)) return false;
  if (legacy())
    log_noexcept(LogLevel::info,
                 "{}: freed blocks are reused after a barrier on the legacy stream from now on", why);
  else
    log_noexcept(LogLevel::info, "{}: freed blocks are fenced from now on (stream-ordered reuse ends)", why);
  return true;
}

bool StreamOrder::saw_current(CUcontext ctx, std::uint64_t thread) noexcept {
  if (!legacy() && !single()) return false;
  bool ended = false;
  std::uint64_t first_thread = 0;
  if (single() && !first_thread_.compare_exchange_strong(first_thread, thread, std::memory_order_acq_rel) &&
      first_thread != thread)
    ended = end_single("a second thread uses CUDA");
  if (ctx == nullptr) return ended;
  CUcontext first = nullptr;
  if (first_ctx_.compare_exchange_strong(first, ctx, std::memory_order_acq_rel) || first == ctx) return ended;
  return end("a second CUDA context is in use") || ended;
}

}  // namespace luma::shim
