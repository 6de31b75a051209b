// hooks.cpp - the C boundary of libluma.so: every symbol it exports (see libluma.map).
//
// One interception point at the driver: both CUDA runtimes (static and shared) reach the
// driver only through dlopen("libcuda.so.1") + dlsym(handle, "cuGetProcAddress_v2") +
// cuGetProcAddress_v2 (../shared/notes/cuda-interposition.md). luma's dlsym hands out its
// own cuGetProcAddress_v2, which hands out luma's cuMem* for the ABI luma implements; the
// same cuMem* are exported for programs linked with -lcuda. So all three kinds of program
// end up in the same few functions below.
//
// Rules kept by every hook: no exception crosses it; a call made while this thread is
// already inside luma goes straight to the real driver; anything luma cannot serve goes to
// the real driver untouched, so the caller gets the error code the real call would give.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>

#include "call_context.h"
#include "dlsym_hook.h"
#include "limited_mem_info.h"
#include "log.h"
#include "proc_address.h"
#include "real_driver.h"
#include "recursion_guard.h"
#include "shim_state.h"

#define LUMA_EXPORT extern "C" [[gnu::visibility("default")]]

namespace luma::shim {
namespace {

// pitch alignment cuMemAllocPitch gives: the driver's texture pitch alignment on every
// architecture CUDA 13 supports is at most 512 bytes.
constexpr std::size_t kPitchAlignment = 512;

void* as_ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
CUdeviceptr as_dptr(const void* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
}

// The driver to forward to from a nested call: never initialises (the initialising thread
// holds the guard, and pthread_once would deadlock).
const RealDriver* loaded_driver() noexcept {
  State* s = state_if_ready();
  return (s != nullptr && s->driver_loaded) ? &s->driver : nullptr;
}

void log_internal_error(const char* where) noexcept {
  try {
    log().error("internal error in {}; forwarding the call to the driver", where);
  } catch (...) {
  }
}

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
  try {
    log().warn("more than {} CUDA contexts in this process: allocations of further contexts go "
               "to the driver uncached and are not in luma's statistics",
               ContextTable::kMaxContexts);
  } catch (...) {
  }
}

ContextEntry* current_entry(State& s) {
  CUcontext ctx = nullptr;
  if (s.driver.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return nullptr;
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
    auto* e = new ContextEntry(s.driver, ctx, device, s.settings.core, s.streams,
                               s.plans.plan_for_new_allocator(s.driver), budget);
    if (e->allocator.has_plan()) e->allocator.set_divergence_sink(&s.divergence_log);
    e->primary = is_primary_context(s.driver, ctx, device);
    // Before the entry is published: the allocator's first event is already recorded.
    if (luma::core::EventSink* sink = s.recorder.sink_for_new_allocator(s.driver))
      e->allocator.set_event_sink(sink);
    log().debug("serving context {} of device {}", static_cast<void*>(ctx), device);
    return e;
  });
  if (found == nullptr && s.contexts.size() == ContextTable::kMaxContexts) warn_table_full();
  return found;
}

using luma::core::trace::EntryPoint;

CUresult serve_alloc(State& s, CUdeviceptr* dptr, std::size_t bytes, EntryPoint entry) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CallScope scope(entry);
  if (s.recorder.stack_depth() > 0) s.recorder.capture_stack();
  ContextEntry* e = current_entry(s);
  if (e == nullptr) return s.driver.mem_alloc(dptr, bytes);  // no context: the driver's error
  core::AllocResult r = e->allocator.allocate(bytes);
  switch (r.status) {
    case core::AllocStatus::ok:
      *dptr = as_dptr(r.ptr);
      return CUDA_SUCCESS;
    case core::AllocStatus::invalid_size:
      return CUDA_ERROR_INVALID_VALUE;
    case core::AllocStatus::out_of_memory:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case core::AllocStatus::device_error:  // the driver's own code, as the real call gives it
      return static_cast<CUresult>(r.device_error);
  }
  return CUDA_ERROR_UNKNOWN;
}

// The live luma block containing ptr (its start or any byte inside): what the program
// allocated, which the driver would describe as the allocation. False when none does.
bool block_containing(State& s, const void* ptr, core::SegmentRange* block) noexcept {
  for (std::size_t i = 0; i < s.contexts.size(); ++i) {
    ContextEntry* e = s.contexts.at(i);
    if (!e->retired.load(std::memory_order_relaxed) && e->allocator.block_of(ptr, block)) return true;
  }
  return false;
}

// Whether ptr lies in memory luma holds from the driver (a segment, or a plan's arena) -
// live, free or pending. Memory there that is in no live block is, to the program, memory
// it does not hold: freed, or never handed out.
bool in_luma_memory(State& s, const void* ptr) noexcept {
  for (std::size_t i = 0; i < s.contexts.size(); ++i) {
    ContextEntry* e = s.contexts.at(i);
    if (!e->retired.load(std::memory_order_relaxed) && e->allocator.segment_of(ptr, nullptr)) return true;
  }
  return false;
}

// The context of e is gone, its memory with it: forget it all (no driver call), and let
// the next allocation in a context with this handle start a fresh entry.
void retire_entry(State& s, ContextEntry* e) noexcept {
  e->allocator.drop_device_memory();
  if (e->limited != nullptr) e->limited->forget_reserved();  // the budget gets it back
  e->driver_device.forget_events();
  s.streams.remove_context(e->ctx);
  s.contexts.retire(e);
  try {
    log().info("context {} of device {} was destroyed; its cached memory went with it",
               static_cast<void*>(e->ctx), e->device);
  } catch (...) {
  }
}

// Retires the live entry of device's primary context, if any.
void retire_primary(State& s, CUdevice device) noexcept {
  for (std::size_t i = 0; i < s.contexts.size(); ++i) {
    ContextEntry* e = s.contexts.at(i);
    if (e->primary && e->device == device && !e->retired.load(std::memory_order_acquire)) retire_entry(s, e);
  }
}

void* hook_function(Hook h) noexcept;

// Replaces *pfn with luma's function when the request names an ABI luma serves.
void substitute(const char* symbol, void** pfn, int version) noexcept {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr) return;
  State* s = state_if_ready();
  if (s != nullptr && s->settings.disable) return;
  Hook h = hook_for_request(symbol, version);
  if (h == Hook::mem_free_async || h == Hook::mem_free_async_ptsz) {
    // Which twin the driver handed out (the request's flags and the program's default
    // stream decided): luma's hook must forward foreign pointers to that same one.
    if (s == nullptr) return;
    if (*pfn == reinterpret_cast<void*>(s->driver.mem_free_async)) h = Hook::mem_free_async;
    else if (*pfn == reinterpret_cast<void*>(s->driver.mem_free_async_ptsz)) h = Hook::mem_free_async_ptsz;
    else return;  // a variant luma does not know: the driver's, untouched
  }
  if (h != Hook::none) *pfn = hook_function(h);
}

// Whether fn lies in the real driver (a library named libcuda.so*).
bool in_libcuda(void* fn) noexcept {
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* base = std::strrchr(info.dli_fname, '/');
  base = base != nullptr ? base + 1 : info.dli_fname;
  return std::strncmp(base, "libcuda.so", 10) == 0;
}

}  // namespace
}  // namespace luma::shim

using namespace luma::shim;

// ---- memory -------------------------------------------------------------------------

LUMA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (RecursionGuard::active()) {
    const RealDriver* d = loaded_driver();
    return d && d->mem_alloc ? d->mem_alloc(dptr, bytesize) : CUDA_ERROR_NOT_INITIALIZED;
  }
  RecursionGuard guard;
  State& s = state();
  if (s.driver.mem_alloc == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!s.serves()) return s.driver.mem_alloc(dptr, bytesize);
  try {
    return serve_alloc(s, dptr, bytesize, EntryPoint::cuMemAlloc);
  } catch (...) {
    log_internal_error("cuMemAlloc_v2");
    return s.driver.mem_alloc(dptr, bytesize);
  }
}

namespace {

// A free luma answers: CUDA_SUCCESS (the block went into the cache), CUDA_ERROR_INVALID_VALUE
// (a luma segment, but not the start of a live block: a double or interior free), or
// nullopt (not luma's memory: the driver's business). Any context's allocator: a free may
// come from another thread with another device current.
std::optional<CUresult> free_in_cache(State& s, void* p) noexcept {
  for (std::size_t i = 0; i < s.contexts.size(); ++i) {
    ContextEntry* e = s.contexts.at(i);
    if (e->retired.load(std::memory_order_relaxed)) continue;
    switch (e->allocator.free(p)) {
      case luma::core::FreeStatus::ok: return CUDA_SUCCESS;
      case luma::core::FreeStatus::invalid: return CUDA_ERROR_INVALID_VALUE;
      case luma::core::FreeStatus::not_owned: break;
    }
  }
  return std::nullopt;
}

// cuMemFreeAsync and its _ptsz twin. CUDA accepts a stream-ordered free of cuMemAlloc
// memory, so a program may hand one a luma block; given to the driver, that pointer would
// free the segment under every other block carved from it (or fail). luma takes it into
// its cache like cuMemFree_v2: its fence covers all work issued before the free, on every
// stream luma tracks, which includes the work the free is ordered after. Anything else
// (cuMemAllocAsync memory above all) goes to the driver's function the request named.
CUresult free_async(CUdeviceptr dptr, CUstream stream, PFN_cuMemFreeAsync RealDriver::*real) noexcept {
  if (RecursionGuard::active()) {
    const RealDriver* d = loaded_driver();
    return d && d->*real ? (d->*real)(dptr, stream) : CUDA_ERROR_NOT_INITIALIZED;
  }
  RecursionGuard guard;
  State& s = state();
  if (s.driver.*real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == 0 || !s.serves()) return (s.driver.*real)(dptr, stream);
  CallScope scope(luma::core::trace::EntryPoint::cuMemFreeAsync);
  if (std::optional<CUresult> r = free_in_cache(s, as_ptr(dptr))) return *r;
  return (s.driver.*real)(dptr, stream);
}

}  // namespace

LUMA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (RecursionGuard::active()) {
    const RealDriver* d = loaded_driver();
    return d && d->mem_free ? d->mem_free(dptr) : CUDA_ERROR_NOT_INITIALIZED;
  }
  RecursionGuard guard;
  State& s = state();
  if (s.driver.mem_free == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  // A null pointer, or luma not serving: the driver's own answer.
  if (dptr == 0 || !s.serves()) return s.driver.mem_free(dptr);
  CallScope scope(luma::core::trace::EntryPoint::cuMemFree);
  if (std::optional<CUresult> r = free_in_cache(s, as_ptr(dptr))) return *r;
  // Allocated before luma was active, or by a path luma does not serve.
  return s.driver.mem_free(dptr);
}

LUMA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return free_async(dptr, stream, &RealDriver::mem_free_async);
}

LUMA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return free_async(dptr, stream, &RealDriver::mem_free_async_ptsz);
}

LUMA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                        size_t height, unsigned int elementSize) {
  if (RecursionGuard::active()) {
    const RealDriver* d = loaded_driver();
    return d && d->mem_alloc_pitch ? d->mem_alloc_pitch(dptr, pitch, width, height, elementSize)
                                   : CUDA_ERROR_NOT_INITIALIZED;
  }
  RecursionGuard guard;
  State& s = state();
  if (s.driver.mem_alloc_pitch == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!s.serves()) return s.driver.mem_alloc_pitch(dptr, pitch, width, height, elementSize);
  // The driver's rules: element sizes 4, 8 or 16 bytes, no empty dimension.
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0 ||
      (elementSize != 4 && elementSize != 8 && elementSize != 16))
    return CUDA_ERROR_INVALID_VALUE;
  if (width > SIZE_MAX - kPitchAlignment) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t row = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (height > SIZE_MAX / row) return CUDA_ERROR_OUT_OF_MEMORY;
  try {
    CUresult r = serve_alloc(s, dptr, row * height, EntryPoint::cuMemAllocPitch);
    if (r == CUDA_SUCCESS) *pitch = row;
    return r;
  } catch (...) {
    log_internal_error("cuMemAllocPitch_v2");
    return s.driver.mem_alloc_pitch(dptr, pitch, width, height, elementSize);
  }
}

LUMA_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  const RealDriver* d = RecursionGuard::active() ? loaded_driver() : &state().driver;
  if (d == nullptr || d->mem_get_info == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->mem_get_info(free, total);
  if (r != CUDA_SUCCESS || RecursionGuard::active() || free == nullptr) return r;
  RecursionGuard guard;
  State& s = state();
  if (!s.serves()) return r;
  const bool limited = DeviceLimits::wanted(s.settings.core);
  if (!limited && !s.settings.core.report_cached_as_free) return r;
  try {
    // Memory the cache holds but the program does not is free to the program: it gets it
    // from luma without a driver call (programs size themselves from this number). Under
    // a memory limit the limit is the total and what is left under it is free
    // (core/limited_mem_info.h): the device's entry is made now if need be, so a program
    // asking before its first allocation already sees its limit.
    ContextEntry* e = nullptr;
    if (limited) {
      e = current_entry(s);
    } else {
      CUcontext ctx = nullptr;
      if (s.driver.ctx_get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr) e = s.contexts.find(ctx);
    }
    if (e == nullptr) return r;
    luma::core::MemInfoInput in;
    in.real_free = *free;
    in.real_total = total != nullptr ? *total : SIZE_MAX;
    in.cached = s.settings.core.report_cached_as_free ? e->allocator.cached_bytes() : 0;
    if (e->limited != nullptr) {
      const luma::core::MemoryBudget& budget = e->limited->budget();
      in.limited = true;
      in.limit = budget.limit();
      in.used = budget.used();
    }
    const luma::core::MemInfo out = luma::core::limited_mem_info(in);
    *free = out.free;
    if (total != nullptr) *total = out.total;
  } catch (...) {
    log_internal_error("cuMemGetInfo_v2");
  }
  return r;
}

LUMA_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  const RealDriver* d = RecursionGuard::active() ? loaded_driver() : &state().driver;
  if (d == nullptr || d->mem_get_address_range == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!RecursionGuard::active()) {
    RecursionGuard guard;
    State& s = state();
    luma::core::SegmentRange block;
    // The program's allocation is the block, not the segment luma carved it from; a byte
    // of a segment in no live block belongs to no allocation of the program's (it freed
    // it, or never got it): what the driver says of an address it never allocated.
    if (s.serves()) {
      if (block_containing(s, as_ptr(dptr), &block)) {
        if (base != nullptr) *base = as_dptr(block.base);
        if (size != nullptr) *size = block.size;
        return CUDA_SUCCESS;
      }
      if (in_luma_memory(s, as_ptr(dptr))) return CUDA_ERROR_NOT_FOUND;
    }
  }
  return d->mem_get_address_range(base, size, dptr);
}

LUMA_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                           CUdeviceptr ptr) {
  const RealDriver* d = RecursionGuard::active() ? loaded_driver() : &state().driver;
  if (d == nullptr || d->pointer_get_attribute == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!RecursionGuard::active() && data != nullptr &&
      (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
       attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE)) {
    RecursionGuard guard;
    State& s = state();
    luma::core::SegmentRange block;
    if (s.serves() && block_containing(s, as_ptr(ptr), &block)) {
      if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *static_cast<CUdeviceptr*>(data) = as_dptr(block.base);
      else
        *static_cast<size_t*>(data) = block.size;
      return CUDA_SUCCESS;
    }
    // The range of memory the program does not hold (see cuMemGetAddressRange_v2): the
    // driver's answer for a pointer it never allocated.
    if (s.serves() && in_luma_memory(s, as_ptr(ptr))) return CUDA_ERROR_INVALID_VALUE;
  }
  return d->pointer_get_attribute(data, attribute, ptr);
}

// ---- streams (tracked for free_sync:event) --------------------------------------------

namespace {

void track_stream(CUstream stream, unsigned int flags) noexcept {
  if ((flags & CU_STREAM_NON_BLOCKING) == 0) return;  // the legacy stream covers it
  State& s = state();
  if (!s.serves()) return;
  CUcontext ctx = nullptr;
  if (s.driver.ctx_get_current(&ctx) != CUDA_SUCCESS) return;
  try {
    s.streams.add(ctx, stream);
  } catch (...) {
    log_internal_error("cuStreamCreate (stream not tracked)");
  }
}

}  // namespace

LUMA_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  const bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  if (d == nullptr || d->stream_create == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->stream_create(stream, flags);
  if (r == CUDA_SUCCESS && !nested && stream != nullptr) {
    RecursionGuard guard;
    track_stream(*stream, flags);
  }
  return r;
}

LUMA_EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags,
                                                int priority) {
  const bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  if (d == nullptr || d->stream_create_with_priority == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->stream_create_with_priority(stream, flags, priority);
  if (r == CUDA_SUCCESS && !nested && stream != nullptr) {
    RecursionGuard guard;
    track_stream(*stream, flags);
  }
  return r;
}

LUMA_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  const bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  if (d == nullptr || d->stream_destroy == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!nested) {
    RecursionGuard guard;
    state().streams.remove(stream);  // before the real destroy: no fence on a dead stream
  }
  return d->stream_destroy(stream);
}

// ---- context lifetime: a destroyed context takes its memory along ---------------------
// After the real call succeeded, the context's entry is retired (see retire_entry): the
// segments luma cached are gone with it, and a later context (even with the same handle)
// is served afresh. The calls are forwarded unchanged; their result is the driver's.

LUMA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  const bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  if (d == nullptr || d->ctx_destroy == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = d->ctx_destroy(ctx);
  if (r != CUDA_SUCCESS || nested) return r;
  RecursionGuard guard;
  State& s = state();
  if (ContextEntry* e = s.contexts.find(ctx)) retire_entry(s, e);
  return r;
}

LUMA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  const bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  if (d == nullptr || d->primary_ctx_reset == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = d->primary_ctx_reset(dev);
  if (r != CUDA_SUCCESS || nested) return r;
  RecursionGuard guard;
  retire_primary(state(), dev);
  return r;
}

LUMA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  const bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  if (d == nullptr || d->primary_ctx_release == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = d->primary_ctx_release(dev);
  if (r != CUDA_SUCCESS || nested) return r;
  RecursionGuard guard;
  State& s = state();
  // Only the last release destroys it: ask whether it is still active.
  unsigned flags = 0;
  int active = 1;
  if (s.driver.primary_ctx_get_state != nullptr &&
      s.driver.primary_ctx_get_state(dev, &flags, &active) == CUDA_SUCCESS && active == 0)
    retire_primary(s, dev);
  return r;
}

// ---- resolution -----------------------------------------------------------------------

LUMA_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* symbolStatus) {
  const bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  if (d == nullptr || d->get_proc_address_v2 == nullptr) {
    if (pfn != nullptr) *pfn = nullptr;
    if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult r = d->get_proc_address_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS && !nested) substitute(symbol, pfn, cudaVersion);
  return r;
}

LUMA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                      cuuint64_t flags) {
  const bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  if (d == nullptr || (d->get_proc_address_v1 == nullptr && d->get_proc_address_v2 == nullptr)) {
    if (pfn != nullptr) *pfn = nullptr;
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult r = d->get_proc_address_v1 != nullptr
                   ? d->get_proc_address_v1(symbol, pfn, cudaVersion, flags)
                   : d->get_proc_address_v2(symbol, pfn, cudaVersion, flags, nullptr);
  if (r == CUDA_SUCCESS && !nested) substitute(symbol, pfn, cudaVersion);
  return r;
}

namespace luma::shim {

// dlsym_hook.cpp's dlsym, for a name that starts with "cu" looked up outside luma: a driver
// entry point luma serves, found in the real driver, is answered with luma's hook.
void* dlsym_for_driver(void* handle, const char* name, DlsymFn real) noexcept {
  Hook h = hook_for_symbol(name);
  if (h == Hook::none) return real(handle, name);
  void* fn = real(handle, name);
  // Only lookups into the real driver are redirected; a name found elsewhere (luma's own
  // export through RTLD_DEFAULT, another library's) is answered as glibc would.
  if (fn != nullptr && in_libcuda(fn)) return hook_function(h);
  return fn;
}

}  // namespace luma::shim

namespace luma::shim {
namespace {

void* hook_function(Hook h) noexcept {
  switch (h) {
    case Hook::get_proc_address_v1: return reinterpret_cast<void*>(&::cuGetProcAddress);
    case Hook::get_proc_address_v2: return reinterpret_cast<void*>(&::cuGetProcAddress_v2);
    case Hook::mem_alloc: return reinterpret_cast<void*>(&::cuMemAlloc_v2);
    case Hook::mem_free: return reinterpret_cast<void*>(&::cuMemFree_v2);
    case Hook::mem_alloc_pitch: return reinterpret_cast<void*>(&::cuMemAllocPitch_v2);
    case Hook::mem_get_info: return reinterpret_cast<void*>(&::cuMemGetInfo_v2);
    case Hook::mem_get_address_range: return reinterpret_cast<void*>(&::cuMemGetAddressRange_v2);
    case Hook::pointer_get_attribute: return reinterpret_cast<void*>(&::cuPointerGetAttribute);
    case Hook::stream_create: return reinterpret_cast<void*>(&::cuStreamCreate);
    case Hook::stream_create_with_priority:
      return reinterpret_cast<void*>(&::cuStreamCreateWithPriority);
    case Hook::stream_destroy: return reinterpret_cast<void*>(&::cuStreamDestroy_v2);
    case Hook::ctx_destroy: return reinterpret_cast<void*>(&::cuCtxDestroy_v2);
    case Hook::primary_ctx_release: return reinterpret_cast<void*>(&::cuDevicePrimaryCtxRelease_v2);
    case Hook::primary_ctx_reset: return reinterpret_cast<void*>(&::cuDevicePrimaryCtxReset_v2);
    case Hook::mem_free_async: return reinterpret_cast<void*>(&::cuMemFreeAsync);
    case Hook::mem_free_async_ptsz: return reinterpret_cast<void*>(&::cuMemFreeAsync_ptsz);
    case Hook::none:
    case Hook::count: break;
  }
  return nullptr;
}

}  // namespace
}  // namespace luma::shim
