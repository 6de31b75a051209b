// hooks.cpp - the C boundary of libluma.so: every driver symbol it exports, one short
// function each (the list is LUMA_HOOKS in entry_points.h; libluma.map is generated from
// it). What luma does for a call is in serve.cpp; this file only decides whether luma may
// do it.
//
// Rules kept by every hook: no exception crosses it; a call made while this thread is
// already inside luma (the driver calling back, luma's own initialisation) goes straight
// to the real driver; a missing real entry point is CUDA_ERROR_NOT_INITIALIZED; anything
// luma does not serve goes to the real driver untouched, so the caller gets the error code
// the real call would give.
#include <algorithm>
#include <cstring>
#include <string>

#include "driver/dlsym_hook.h"
#include "forwarded_calls.h"
#include "threads/recursion_guard.h"
#include "context_entries.h"
#include "observe/footprint.h"
#include "serve.h"

#define LUMA_EXPORT extern "C" [[gnu::visibility("default")]]

namespace luma::shim {
namespace {

// The opening every forwarding wrapper shares: whether this call is nested inside luma
// (the driver calling back, luma's own initialisation), and the real driver to call - the
// loaded one from a nested call, which never initialises (the initialising thread holds
// the guard, and pthread_once would deadlock), else the process's.
template <auto Real>
struct Opening {
  bool nested = RecursionGuard::active();
  const RealDriver* d = nested ? loaded_driver() : &state().driver;
  // The driver or its entry point is not there: CUDA_ERROR_NOT_INITIALIZED.
  bool missing() const noexcept { return d == nullptr || d->*Real == nullptr; }
};

// A served call: serve(state, args...) when luma serves, else the real function. An
// exception inside luma is logged and the call forwarded, as if luma were not there.
template <auto Real, typename Serve, typename... Args>
CUresult serve_or_forward(const char* name, Serve serve, Args... args) noexcept {
  if (RecursionGuard::active()) {
    const RealDriver* d = loaded_driver();
    return d != nullptr && d->*Real != nullptr ? (d->*Real)(args...) : CUDA_ERROR_NOT_INITIALIZED;
  }
  RecursionGuard guard;
  State& s = state();
  const auto real = s.driver.*Real;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!s.serves()) return real(args...);
  try {
    return serve(s, args...);
  } catch (...) {
    log_internal_error(name);
    return real(args...);
  }
}

// An observed call: the real function, then (on success, or whatever it answered when
// `always`; outside a nested call) observe(state, args...) so luma learns what changed.
template <auto Real, bool always = false, typename Observe, typename... Args>
CUresult forward_then_observe(Observe observe, Args... args) noexcept {
  const Opening<Real> o;
  if (o.missing()) return CUDA_ERROR_NOT_INITIALIZED;
  const bool nested = o.nested;
  const RealDriver* d = o.d;
  const CUresult r = (d->*Real)(args...);
  if ((always || r == CUDA_SUCCESS) && !nested) {
    RecursionGuard guard;
    observe(state(), args...);
  }
  return r;
}

// A capture's beginning: announced to luma before the real function runs (ticket, nested
// calls excepted), withdrawn when the driver refuses it (capture_registry.h). `mode` is
// the capture mode the call asks for.
template <auto Real, typename... Args>
CUresult announce_then_forward(CUstream stream, CUstreamCaptureMode mode, Args... args) noexcept {
  const Opening<Real> o;
  if (o.missing()) return CUDA_ERROR_NOT_INITIALIZED;
  const bool nested = o.nested;
  const RealDriver* d = o.d;
  if (nested) return (d->*Real)(args...);
  std::uint64_t ticket = 0;
  {
    RecursionGuard guard;
    ticket = on_capture_beginning(state(), stream, mode);
  }
  const CUresult r = (d->*Real)(args...);
  if (r != CUDA_SUCCESS) {
    RecursionGuard guard;
    on_capture_refused(state(), ticket);
  }
  return r;
}

// A context's destruction: announced to luma before the real function runs (announce gives
// the ticket; nested calls excepted), so that no call of luma's names the context while the
// driver destroys it or after (capture_registry.h); settled with the driver's answer.
template <auto Real, typename Arg, typename Announce, typename Settle>
CUresult announce_end_then_forward(Announce announce, Settle settle, Arg arg) noexcept {
  const Opening<Real> o;
  if (o.missing()) return CUDA_ERROR_NOT_INITIALIZED;
  const bool nested = o.nested;
  const RealDriver* d = o.d;
  if (nested) return (d->*Real)(arg);
  std::uint64_t ticket = 0;
  {
    RecursionGuard guard;
    ticket = announce(state(), arg);
  }
  const CUresult r = (d->*Real)(arg);
  {
    RecursionGuard guard;
    settle(state(), arg, r, ticket);
  }
  return r;
}

// cuGetProcAddress and _v2: the driver's answer, with luma's function substituted for the
// ABIs luma serves. `ask` calls the real function with the driver table it is given.
template <typename Ask>
CUresult resolve_for_program(const char* symbol, void** pfn, int cuda_version,
                             CUdriverProcAddressQueryResult* status, Ask ask) noexcept {
  const Opening<&RealDriver::get_proc_address_v2> o;
  const bool nested = o.nested;
  const RealDriver* d = o.d;
  if (o.missing()) {
    if (pfn != nullptr) *pfn = nullptr;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  const CUresult r = ask(*d);
  if (r == CUDA_SUCCESS && !nested) substitute(symbol, pfn, cuda_version);
  return r;
}

}  // namespace
}  // namespace luma::shim

using namespace luma::shim;

// ---- memory -------------------------------------------------------------------------

LUMA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return serve_or_forward<&RealDriver::mem_alloc>("cuMemAlloc_v2", serve_mem_alloc, dptr, bytesize);
}

LUMA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                        size_t height, unsigned int elementSize) {
  return serve_or_forward<&RealDriver::mem_alloc_pitch>("cuMemAllocPitch_v2", serve_mem_alloc_pitch,
                                                        dptr, pitch, width, height, elementSize);
}

LUMA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return serve_or_forward<&RealDriver::mem_free>("cuMemFree_v2", serve_mem_free, dptr);
}

LUMA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return serve_or_forward<&RealDriver::mem_free_async>(
      "cuMemFreeAsync",
      [](State& s, CUdeviceptr p, CUstream st) {
        return serve_mem_free_async(s, p, st, s.driver.mem_free_async, false);
      },
      dptr, stream);
}

LUMA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return serve_or_forward<&RealDriver::mem_free_async_ptsz>(
      "cuMemFreeAsync_ptsz",
      [](State& s, CUdeviceptr p, CUstream st) {
        return serve_mem_free_async(s, p, st, s.driver.mem_free_async_ptsz, true);
      },
      dptr, stream);
}

// ---- forwarded allocation paths: the driver serves them, luma counts them ------------

LUMA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return forward_then_observe<&RealDriver::mem_alloc_async>(on_mem_alloc_async, dptr, bytesize,
                                                            hStream);
}

LUMA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return forward_then_observe<&RealDriver::mem_alloc_async_ptsz>(on_mem_alloc_async, dptr,
                                                                 bytesize, hStream);
}

LUMA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                             CUmemoryPool pool, CUstream hStream) {
  return forward_then_observe<&RealDriver::mem_alloc_from_pool_async>(
      on_mem_alloc_from_pool_async, dptr, bytesize, pool, hStream);
}

LUMA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream hStream) {
  return forward_then_observe<&RealDriver::mem_alloc_from_pool_async_ptsz>(
      on_mem_alloc_from_pool_async, dptr, bytesize, pool, hStream);
}

LUMA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  return forward_then_observe<&RealDriver::mem_alloc_managed>(on_mem_alloc_managed, dptr,
                                                              bytesize, flags);
}

// ---- virtual memory management: the program builds its own address space ---------------

LUMA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                 const CUmemAllocationProp* prop, unsigned long long flags) {
  return forward_then_observe<&RealDriver::mem_create>(on_mem_create, handle, size, prop, flags);
}

LUMA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return forward_then_observe<&RealDriver::mem_release>(on_mem_release, handle);
}

LUMA_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags) {
  return forward_then_observe<&RealDriver::mem_map>(on_mem_map, ptr, size, offset, handle, flags);
}

LUMA_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return forward_then_observe<&RealDriver::mem_unmap>(on_mem_unmap, ptr, size);
}

// Pinned host memory: luma's host cache when serving (host_cache_serve.cpp; it forwards
// and counts what the cache leaves to the driver), else forwarded and counted.
static bool serves_host_memory() noexcept { return !RecursionGuard::active() && state().serves(); }

LUMA_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  if (serves_host_memory())
    return serve_or_forward<&RealDriver::mem_alloc_host>("cuMemAllocHost_v2", serve_mem_alloc_host,
                                                         pp, bytesize);
  return forward_then_observe<&RealDriver::mem_alloc_host>(
      [](State& s, void** q, size_t n) {
        on_forwarded_alloc(s, ForwardedPath::pinned_host, n, luma::core::trace::ForwardedEntry::cuMemAllocHost, *q);
      },
      pp, bytesize);
}

LUMA_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if (serves_host_memory())
    return serve_or_forward<&RealDriver::mem_host_alloc>("cuMemHostAlloc", serve_mem_host_alloc, pp,
                                                         bytesize, Flags);
  return forward_then_observe<&RealDriver::mem_host_alloc>(
      [](State& s, void** q, size_t n, unsigned) {
        on_forwarded_alloc(s, ForwardedPath::pinned_host, n, luma::core::trace::ForwardedEntry::cuMemHostAlloc, *q);
      },
      pp, bytesize, Flags);
}

LUMA_EXPORT CUresult cuMemFreeHost(void* p) {
  if (serves_host_memory())
    return serve_or_forward<&RealDriver::mem_free_host>("cuMemFreeHost", serve_mem_free_host, p);
  return forward_then_observe<&RealDriver::mem_free_host>(
      [](State& s, void* q) {
        if (q != nullptr)
          on_forwarded_free(s, ForwardedPath::pinned_host, luma::core::trace::ForwardedEntry::cuMemFreeHost, q);
      },
      p);
}

LUMA_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  return serve_or_forward<&RealDriver::mem_get_info>("cuMemGetInfo_v2", serve_mem_get_info, free,
                                                     total);
}

LUMA_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  return serve_or_forward<&RealDriver::ipc_get_mem_handle>("cuIpcGetMemHandle",
                                                           serve_ipc_get_mem_handle, pHandle, dptr);
}

// Pointer queries: the driver's answer, except for the range (and buffer id) of a block of
// an expandable segment, which the driver would give as one memory of it (serve.h).
LUMA_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return serve_or_forward<&RealDriver::mem_get_address_range>(
      "cuMemGetAddressRange_v2", serve_mem_get_address_range, pbase, psize, dptr);
}

LUMA_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return serve_or_forward<&RealDriver::pointer_get_attribute>(
      "cuPointerGetAttribute", serve_pointer_get_attribute, data, attribute, ptr);
}

LUMA_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                            void** data, CUdeviceptr ptr) {
  return serve_or_forward<&RealDriver::pointer_get_attributes>(
      "cuPointerGetAttributes", serve_pointer_get_attributes, numAttributes, attributes, data, ptr);
}

// ---- stream capture (CUDA graphs): luma must know what a capture forbids --------------

LUMA_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
  return announce_then_forward<&RealDriver::stream_begin_capture_v1>(
      hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, hStream);
}

LUMA_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return announce_then_forward<&RealDriver::stream_begin_capture_v1_ptsz>(
      hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, hStream);
}

LUMA_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return announce_then_forward<&RealDriver::stream_begin_capture>(hStream, mode, hStream, mode);
}

LUMA_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return announce_then_forward<&RealDriver::stream_begin_capture_ptsz>(hStream, mode, hStream,
                                                                       mode);
}

// A capture into the program's own graph: the same rules as any capture.
LUMA_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                 const CUgraphNode* dependencies,
                                                 const CUgraphEdgeData* dependencyData,
                                                 size_t numDependencies, CUstreamCaptureMode mode) {
  return announce_then_forward<&RealDriver::stream_begin_capture_to_graph>(
      hStream, mode, hStream, hGraph, dependencies, dependencyData, numDependencies, mode);
}

LUMA_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                      const CUgraphNode* dependencies,
                                                      const CUgraphEdgeData* dependencyData,
                                                      size_t numDependencies,
                                                      CUstreamCaptureMode mode) {
  return announce_then_forward<&RealDriver::stream_begin_capture_to_graph_ptsz>(
      hStream, mode, hStream, hGraph, dependencies, dependencyData, numDependencies, mode);
}

// A capture's end: luma forgets the capture only once the driver has ended it, so until
// then its calls still treat the stream as capturing, the safe side of the end's window.
// The driver ends it whatever the outcome (an invalidated or unjoined capture ends with an
// error; "not capturing" means there is none), except when it refuses the call itself:
// from a thread that may not end it, or on a stream that is not the capture's origin.
template <auto Real>
CUresult forward_then_end(CUstream stream, CUgraph* graph) noexcept {
  const Opening<Real> o;
  if (o.missing()) return CUDA_ERROR_NOT_INITIALIZED;
  const bool nested = o.nested;
  const RealDriver* d = o.d;
  const CUresult r = (d->*Real)(stream, graph);
  const bool still_capturing = r == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD ||
                               r == CUDA_ERROR_STREAM_CAPTURE_UNMATCHED ||
                               r == CUDA_ERROR_INVALID_VALUE;
  if (!nested && !still_capturing) {
    RecursionGuard guard;
    on_capture_ended(state(), stream);
  }
  return r;
}

LUMA_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return forward_then_end<&RealDriver::stream_end_capture>(hStream, phGraph);
}

LUMA_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return forward_then_end<&RealDriver::stream_end_capture_ptsz>(hStream, phGraph);
}

// *mode is the new mode on the way in and the old one on the way out: luma keeps the new.
LUMA_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  const CUstreamCaptureMode wanted = mode != nullptr ? *mode : CU_STREAM_CAPTURE_MODE_GLOBAL;
  return forward_then_observe<&RealDriver::thread_exchange_capture_mode>(
      [wanted](State&, CUstreamCaptureMode*) { on_thread_capture_mode(wanted); }, mode);
}

// ---- streams (tracked for free_sync:event) --------------------------------------------

LUMA_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return forward_then_observe<&RealDriver::stream_create>(
      [](State& s, CUstream* st, unsigned f) {
        if (st != nullptr) on_stream_created(s, *st, f);
      }, stream, flags);
}

LUMA_EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags,
                                                int priority) {
  return forward_then_observe<&RealDriver::stream_create_with_priority>(
      [](State& s, CUstream* st, unsigned f, int) {
        if (st != nullptr) on_stream_created(s, *st, f);
      }, stream,
      flags, priority);
}

LUMA_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  const Opening<&RealDriver::stream_destroy> o;
  if (o.missing()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!o.nested) {
    RecursionGuard guard;
    on_stream_destroying(state(), stream);
  }
  return o.d->stream_destroy(stream);
}

// ---- current context: followed so that an allocation asks the driver nothing -----------
// (current_context.h). Each call is the driver's; luma notes what it left current.

LUMA_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  return forward_then_observe<&RealDriver::ctx_set_current>(
      [](State& st, CUcontext c) { on_current_context(st, c); }, ctx);
}

LUMA_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  return forward_then_observe<&RealDriver::ctx_push_current>(
      [](State& st, CUcontext c) { on_current_context(st, c); }, ctx);
}

// What a pop leaves current is the context below on the stack, which luma does not keep:
// the next allocation of this thread asks. Likewise for a create (it pushes), whose new
// context luma learns at its first allocation.
LUMA_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  return forward_then_observe<&RealDriver::ctx_pop_current, true>(
      [](State& st, CUcontext*) { on_current_context_unknown(st); }, pctx);
}

LUMA_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return forward_then_observe<&RealDriver::ctx_create_v2, true>(
      [](State& st, CUcontext*, unsigned, CUdevice) { on_current_context_unknown(st); }, pctx, flags, dev);
}

LUMA_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int count,
                                    unsigned int flags, CUdevice dev) {
  return forward_then_observe<&RealDriver::ctx_create_v3, true>(
      [](State& st, CUcontext*, CUexecAffinityParam*, int, unsigned, CUdevice) { on_current_context_unknown(st); },
      pctx, params, count, flags, dev);
}

LUMA_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                    CUdevice dev) {
  return forward_then_observe<&RealDriver::ctx_create_v4, true>(
      [](State& st, CUcontext*, CUctxCreateParams*, unsigned, CUdevice) { on_current_context_unknown(st); },
      pctx, params, flags, dev);
}

// The deprecated attach/detach pair may make a context current or destroy it anywhere.
LUMA_EXPORT CUresult cuCtxAttach(CUcontext* pctx, unsigned int flags) {
  return forward_then_observe<&RealDriver::ctx_attach, true>(
      [](State&, CUcontext*, unsigned) { on_contexts_changed(); }, pctx, flags);
}

LUMA_EXPORT CUresult cuCtxDetach(CUcontext ctx) {
  return forward_then_observe<&RealDriver::ctx_detach, true>(
      [](State&, CUcontext) { on_contexts_changed(); }, ctx);
}

LUMA_EXPORT CUresult cuGreenCtxStreamCreate(CUstream* stream, CUgreenCtx green, unsigned int flags,
                                            int priority) {
  return forward_then_observe<&RealDriver::green_ctx_stream_create>(
      [](State& st, CUstream*, CUgreenCtx, unsigned, int) { on_green_stream_created(st); }, stream,
      green, flags, priority);
}

// ---- context lifetime: a destroyed context takes its memory along ---------------------

LUMA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  return announce_end_then_forward<&RealDriver::ctx_destroy, CUcontext>(
      on_context_destroying, on_context_destroy_answered, ctx);
}

LUMA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return announce_end_then_forward<&RealDriver::primary_ctx_reset, CUdevice>(
      on_primary_context_ending, on_primary_context_reset_answered, dev);
}

LUMA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return announce_end_then_forward<&RealDriver::primary_ctx_release, CUdevice>(
      on_primary_context_ending, on_primary_context_release_answered, dev);
}

// ---- resolution -----------------------------------------------------------------------

LUMA_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* symbolStatus) {
  return resolve_for_program(symbol, pfn, cudaVersion, symbolStatus, [&](const RealDriver& d) {
    return d.get_proc_address_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  });
}

LUMA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                      cuuint64_t flags) {
  return resolve_for_program(symbol, pfn, cudaVersion, nullptr, [&](const RealDriver& d) {
    return d.get_proc_address_v1 != nullptr
               ? d.get_proc_address_v1(symbol, pfn, cudaVersion, flags)
               : d.get_proc_address_v2(symbol, pfn, cudaVersion, flags, nullptr);
  });
}

void* luma::shim::real_function(const RealDriver& d, Hook h) noexcept {
  switch (h) {
#define LUMA_REAL_FUNCTION(id, ...) \
  case Hook::id: return reinterpret_cast<void*>(d.id);
    LUMA_HOOKS(LUMA_REAL_FUNCTION)
#undef LUMA_REAL_FUNCTION
    case Hook::none:
    case Hook::count: break;
  }
  return nullptr;
}

// The exported function of each hook, from the same table (a hook without its function
// above fails to compile).
void* luma::shim::hook_function(Hook h) noexcept {
  static void* const functions[] = {
      nullptr,  // Hook::none
#define LUMA_HOOK_FUNCTION(id, symbol, ...) reinterpret_cast<void*>(&::symbol),
      LUMA_HOOKS(LUMA_HOOK_FUNCTION)
#undef LUMA_HOOK_FUNCTION
  };
  static_assert(sizeof(functions) / sizeof(functions[0]) == static_cast<std::size_t>(Hook::count));
  const auto i = static_cast<std::size_t>(h);
  return i < static_cast<std::size_t>(Hook::count) ? functions[i] : nullptr;
}

// luma_footprint(buf, size): luma's own records now (observe/footprint.h), as a JSON
// object written into buf (NUL-terminated, cut to size); returns the length the whole text
// needs, like snprintf, or 0 before luma served anything. A program asks for it through
// dlsym(RTLD_DEFAULT, "luma_footprint").
LUMA_EXPORT std::size_t luma_footprint(char* buf, std::size_t size) noexcept {
  using namespace luma::shim;
  State* s = state_if_ready();
  if (s == nullptr) return 0;
  RecursionGuard guard;  // no hook of this thread comes back in meanwhile
  try {
    const std::string text =
        footprint_json(footprint(s->contexts, s->streams, s->captures, s->recorder, s->oom));
    if (buf != nullptr && size > 0) {
      const std::size_t n = std::min(size - 1, text.size());
      std::memcpy(buf, text.data(), n);
      buf[n] = '\0';
    }
    return text.size();
  } catch (...) {
    return 0;
  }
}
