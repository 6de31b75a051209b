// context_entries.cpp - a context entry's life (context_entries.h): made at the context's
// first allocation with everything attached to its allocator (plan, sinks, live slots),
// retired when the context is destroyed, its statistics folded, freed after its grace
// period; the end of stream-ordered reuse.
#include "context_entries.h"

#include <atomic>
#include <optional>

#include "device/capture_registry.h"
#include "config/log.h"
#include "serve.h"
#include "observe/nvtx_memory.h"
#include "signal_flush.h"

namespace luma::shim {
namespace {

// Whether ctx (current on this thread) is the primary context of device: its reset or
// last release destroys it. Asked only while that primary context is active, so the
// retain/release pair changes nothing (an inactive one cannot be current).
bool is_primary_context(const RealDriver& d, CUcontext ctx, CUdevice device) noexcept {
  if (d.primary_ctx_get_state == nullptr || d.primary_ctx_retain == nullptr ||
      d.primary_ctx_release == nullptr)
    return false;
  unsigned flags = 0;
  int active = 0;
  if (d.primary_ctx_get_state(device, &flags, &active) != CUDA_SUCCESS || active == 0) return false;
  CUcontext primary = nullptr;
  if (d.primary_ctx_retain(&primary, device) != CUDA_SUCCESS) return false;
  d.primary_ctx_release(device);
  return primary == ctx;
}

// Said once: the context table is full, so allocations of new contexts go to the driver.
void warn_table_full() noexcept {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  log_noexcept(LogLevel::warn,
               "more than {} CUDA contexts alive at once in this process: allocations of "
               "further contexts go to the driver uncached and are not in luma's statistics",
               ContextTable::kMaxContexts);
}

// Frees the retired entries whose grace period has passed (context_table.h): the caller
// holds no pointer to a retired entry. Their sinks go with them; the trace's goes back to
// the recorder for the next allocator.
void free_ended_entries(State& s) noexcept {
  for (ContextEntry* e : s.contexts.reclaimable()) {
    s.recorder.give_back(e->trace_sink);
    delete e;
  }
}

// The context of e is gone, its memory with it: forget it all (no driver call), and let
// the next allocation in a context with this handle start a fresh entry. Retired first:
// another thread that finds it live afterwards (the pinned host cache making a fence in
// every live context) would make a part of it again after the host cache forgot it, and
// call the driver in the dead context at its next poll.
void retire_entry(State& s, ContextEntry* e) noexcept {
  s.contexts.retire(e);
  e->allocator.drop_device_memory();
  if (e->limited != nullptr) e->limited->forget_reserved();  // the budget gets it back
  e->driver_device.forget_events();
  e->driver_device.give_back_virtual_memory();
  if (s.host_cache != nullptr) s.host_cache->forget_context(e->ctx);
  s.streams.remove_context(e->ctx);
  // No writer of the allocator's may touch the slots once they are released (a thread still
  // inside it would write into a slot a new allocator took).
  e->allocator.set_live_writers(nullptr, nullptr);
  s.live.release(&e->allocator.cache());  // after its memory was dropped: its slots read 0
  s.live.release(&e->allocator);
  s.oom.forget(&e->allocator);
  log_noexcept(LogLevel::info,
               "context {} of device {} was destroyed; its cached memory went with it",
               static_cast<void*>(e->ctx), e->device);
  // What the report at exit needs is folded into the device's record; the entry waits for
  // its grace period in the graveyard, and those whose period passed are freed.
  std::optional<core::ReplayStats> replay;
  if (s.plans.wanted()) replay = e->allocator.replay_stats();
  s.contexts.bury(e, e->allocator.stats(), replay);
  free_ended_entries(s);
}

// Retires the live entry of device's primary context, if any.
void retire_primary(State& s, CUdevice device) noexcept {
  ContextEntry* primary = nullptr;
  s.contexts.for_each_live([&](ContextEntry& e) {
    if (e.primary && e.device == device) primary = &e;
  });
  if (primary != nullptr) retire_entry(s, primary);
}

}  // namespace

// The first allocation in a context: its entry is made (once), published, and the
// process's late duties done (the signal flush of a child forked before serving).
[[gnu::noinline]] ContextEntry* new_entry(State& s, CUcontext ctx) {
  // Making an entry asks the driver about the context (its device, whether it is the
  // primary one, its memory for a limit): calls not observed to be allowed while one of the
  // context's streams captures (docs/cuda-facts.md, "Calls during a capture"). So a context
  // first met during its own capture is left to the driver until the capture ends: its
  // allocations then are the driver's (uncached), as without luma. The captures' gate is
  // held until the entry is made: no capture begins under those questions.
  const auto held = s.captures.hold();
  if (s.captures.any() && s.captures.any_in(ctx)) return nullptr;
  free_ended_entries(s);  // a context may have ended with none made since
  // A program cache loaded before the program's first allocation is known from the start.
  s.program_cache.check(s.settings.core.program_cache);
  ContextEntry* found = s.contexts.find_or_create(ctx, [&]() -> ContextEntry* {
    CUdevice device = 0;
    if (s.driver.ctx_get_device(&device) != CUDA_SUCCESS) device = 0;
    // The device's memory limit (made with its first context; memory_fraction needs the
    // device's size: cuDeviceTotalMem, else cuMemGetInfo's total, this context being
    // current).
    core::MemoryBudget* budget = nullptr;
    if (DeviceLimits::wanted(s.settings.core) || !s.settings.core.limit_group.empty()) {
      std::size_t total = 0, free = 0;
      if (s.driver.device_total_mem == nullptr ||
          s.driver.device_total_mem(&total, device) != CUDA_SUCCESS) {
        total = 0;
        if (s.driver.mem_get_info == nullptr || s.driver.mem_get_info(&free, &total) != CUDA_SUCCESS)
          total = 0;
      }
      budget = s.contexts.limits().budget_for(device, total, s.settings.core);
    }
    auto* e = new ContextEntry(s.driver, ctx, device, s.settings.core, s.streams, s.captures,
                               s.plans.plan_for_new_allocator(s.driver), budget, &s.stream_order);
    e->allocator.cache().set_reuse_at_once(s.stream_order.single());
    if (e->allocator.has_plan()) e->allocator.set_divergence_sink(&s.divergence_log);
    e->primary = is_primary_context(s.driver, ctx, device);
    // Expandable segments: the device's virtual memory is asked now, while no capture of
    // this context can be underway (an entry is not made during one), rather than at the
    // allocator's first growth, which may come inside a capture.
    if (s.settings.core.allocator.expandable_segments) (void)e->driver_device.virtual_memory();
    // Before the entry is published: the allocator's first event is already recorded
    // (and published in the live record, live_publisher.h: the cache and the plan's arena
    // each have a slot).
    // The trace's sink is the recorder's (given back when the entry is freed); the watch's
    // and NVTX's are the entry's own.
    luma::core::EventSink* trace = s.recorder.sink_for_new_allocator(s.driver);
    e->trace_sink = trace;
    luma::core::EventSink* sink = s.oom.sink_for_new_allocator(&e->allocator, trace);
    if (sink != trace) e->sinks.emplace_back(sink);
    if (luma::core::EventSink* nvtx = nvtx_memory_sink(sink, e->driver_device)) {  // a tool reads NVTX
      e->sinks.emplace_back(nvtx);
      sink = nvtx;
    }
    if (sink != nullptr) e->allocator.set_event_sink(sink);
    if (s.live.wanted()) {
      std::optional<std::uint64_t> limit;
      if (budget != nullptr) limit = budget->limit();
      const std::string group = s.contexts.limits().grouped() ? s.settings.core.limit_group : std::string();
      e->allocator.set_live_writers(
          s.live.writer_for(&e->allocator.cache(), device, limit, group),
          e->allocator.has_plan() ? s.live.writer_for(&e->allocator, device, limit, group) : nullptr);
    }
    log_noexcept(LogLevel::debug, "serving context {} of device {}", static_cast<void*>(ctx), device);
    return e;
  });
  // The order may have ended while the entry was made, before the allocators were walked.
  if (found != nullptr && !s.stream_order.single()) found->allocator.cache().set_reuse_at_once(false);
  if (s.signal_flush_after_fork.load(std::memory_order_relaxed) &&
      s.signal_flush_after_fork.exchange(false))
    install_signal_flush(s);
  if (found == nullptr && s.contexts.full()) warn_table_full();
  return found;
}

// Every use of device memory stopped being in one stream's order: each allocator fences
// its frees from now on (stream_order.h).
// Blocks freed while it held were reusable at once, and some are still free or were handed
// out again: work issued before their frees may still run, in the order the ended rule
// guaranteed, which the cause of its end (another thread's per-thread stream, a
// non-blocking stream, another context) does not follow. So the context waits for that
// work now, before the hook that ended the order returns to the program, hence before any
// work of the new kind is issued (docs/architecture.md, "Stream-ordered reuse").
void stream_order_ended(State& s) noexcept {
  s.contexts.for_each_live([](ContextEntry& e) {
    e.allocator.cache().set_reuse_at_once(false);
    e.driver_device.synchronize();
  });
}

// ctx is current on the calling thread (a hook made it so, or the driver said so).
void note_current(State& s, CUcontext ctx) noexcept {
  CurrentContext::remember(ctx);
  if (s.stream_order.saw_current(ctx, StreamOrder::thread_number())) stream_order_ended(s);
}

// A context about to be destroyed, announced like a capture before the driver is asked:
// from here on no other thread's fence, query, synchronization or release names it
// (capture_registry.h), and those already under way have landed. The documentation
// forbids any call naming a context while cuCtxDestroy runs, and its events after
// (docs/architecture.md, "Contexts destroyed by another thread").
std::uint64_t on_context_destroying(State& s, CUcontext ctx) noexcept {
  if (ctx == nullptr) return 0;
  try {
    return s.captures.announce_context_end(ctx);
  } catch (...) {
    log_internal_error("a context's destruction (not announced)");
    return 0;
  }
}

// A destroyed context takes its memory along: after the real call succeeded, the
// context's entry is retired (retire_entry): the segments luma cached are gone with it,
// and a later context (even with the same handle) is served afresh. Only then does its
// announcement go (end_context): until the entry is gone, another thread could still find
// it live and call the driver in it.
void on_context_destroy_answered(State& s, CUcontext ctx, CUresult r, std::uint64_t ticket) noexcept {
  if (r == CUDA_SUCCESS) {
    CurrentContext::forget_everywhere();  // it was current here (popped) or elsewhere
    if (ContextEntry* e = s.contexts.find(ctx)) {
      retire_entry(s, e);
    } else {  // luma served nothing in it, yet may track its streams and host-cache fences
      if (s.host_cache != nullptr) s.host_cache->forget_context(ctx);
      s.streams.remove_context(ctx);
    }
    s.captures.end_context(ctx);
  }
  if (ticket != 0) s.captures.withdraw(ticket);
}

std::uint64_t on_primary_context_ending(State& s, CUdevice device) noexcept {
  CUcontext ctx = nullptr;
  s.contexts.for_each_live([&](const ContextEntry& e) {
    if (e.primary && e.device == device) ctx = e.ctx;
  });
  return on_context_destroying(s, ctx);
}

void on_primary_context_reset_answered(State& s, CUdevice device, CUresult r, std::uint64_t ticket) noexcept {
  if (r == CUDA_SUCCESS) {
    CurrentContext::forget_everywhere();
    retire_primary(s, device);
  }
  if (ticket != 0) s.captures.withdraw(ticket);
}

void on_primary_context_release_answered(State& s, CUdevice device, CUresult r, std::uint64_t ticket) noexcept {
  if (r == CUDA_SUCCESS) {
    CurrentContext::forget_everywhere();
    // Only the last release destroys it: ask whether it is still active.
    unsigned flags = 0;
    int active = 1;
    if (s.driver.primary_ctx_get_state != nullptr &&
        s.driver.primary_ctx_get_state(device, &flags, &active) == CUDA_SUCCESS && active == 0)
      retire_primary(s, device);
  }
  if (ticket != 0) s.captures.withdraw(ticket);
}


}  // namespace luma::shim
