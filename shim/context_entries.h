// context_entries.h - a context entry's life: found for the calling thread (the common
// case inline, on every allocation), made at the context's first allocation, retired when
// the context ends (announced before the driver is asked), freed after its grace period
// (device/context_table.h); and the end of stream-ordered reuse, which walks every entry.
#pragma once

#include <cstdint>

#include "device/current_context.h"
#include "shim_state.h"

namespace luma::shim {

// The first allocation in a context: its entry, made once and published (nullptr: left to
// the driver, e.g. during the context's own capture, or the table is full).
ContextEntry* new_entry(State& s, CUcontext ctx);
// Every use of device memory stopped being in one stream's order: each allocator fences its
// frees from now on, after the work issued so far is waited for.
void stream_order_ended(State& s) noexcept;
// ctx is current on the calling thread (a hook made it so, or the driver said so).
void note_current(State& s, CUcontext ctx) noexcept;

// The context current on this thread: what the context calls left current
// (device/current_context.h), else the driver's answer, remembered. False: the driver failed.
[[gnu::always_inline]] inline bool current_context(State& s, CUcontext* ctx) noexcept {
  if (CurrentContext::known(ctx)) [[likely]]
    return true;
  if (s.driver.ctx_get_current(ctx) != CUDA_SUCCESS) return false;
  note_current(s, *ctx);
  return true;
}

// The entry of the context current on this thread (nullptr: none current). The common
// case - the context is known - stays in the caller: no driver call and a short scan.
[[gnu::always_inline]] inline ContextEntry* current_entry(State& s) {
  CUcontext ctx = nullptr;
  if (!current_context(s, &ctx) || ctx == nullptr) return nullptr;
  if (ContextEntry* e = s.contexts.find(ctx)) [[likely]]
    return e;
  return new_entry(s, ctx);
}

// A context's destruction (cuCtxDestroy, a primary context's reset or last release):
// announced before the driver is asked, settled with its answer (docs/architecture.md,
// "Contexts destroyed by another thread").
std::uint64_t on_context_destroying(State& s, CUcontext ctx) noexcept;
void on_context_destroy_answered(State& s, CUcontext ctx, CUresult r, std::uint64_t ticket) noexcept;
std::uint64_t on_primary_context_ending(State& s, CUdevice device) noexcept;
void on_primary_context_reset_answered(State& s, CUdevice device, CUresult r, std::uint64_t ticket) noexcept;
void on_primary_context_release_answered(State& s, CUdevice device, CUresult r, std::uint64_t ticket) noexcept;

}  // namespace luma::shim
