// serve.h - what luma does for each hooked driver call, once hooks.cpp has decided that
// luma serves it (the calling thread is not already inside luma, the state is built and
// caching is on). Each function gets the process state and the call's own arguments and
// returns the driver's error code for the same situation; hooks.cpp turns an exception
// into the real driver's answer. Nothing here is exported.
#pragma once

#include <cstddef>
#include <optional>

#include "driver/cuda_abi.h"
#include "driver/proc_address.h"
#include "shim_state.h"
#include "trace/trace_format.h"

namespace luma::shim {

// The driver to forward to from a nested call: never initialises (the initialising thread
// holds the guard, and pthread_once would deadlock). nullptr before the driver is loaded.
const RealDriver* loaded_driver() noexcept;
// One log line: luma failed inside `where` and forwards the call to the driver.
void log_internal_error(const char* where) noexcept;

// ---- memory ----
CUresult serve_mem_alloc(State& s, CUdeviceptr* dptr, std::size_t bytes);
CUresult serve_mem_alloc_pitch(State& s, CUdeviceptr* dptr, std::size_t* pitch,
                               std::size_t width, std::size_t height, unsigned element_size);
// cuMemFree_v2 and both cuMemFreeAsync twins: a luma block goes into the cache; anything
// else goes to `real` (the driver function the program's request resolved to;
// `per_thread`: the _ptsz twin, whose NULL stream is the per-thread stream).
CUresult serve_mem_free(State& s, CUdeviceptr dptr);
CUresult serve_mem_free_async(State& s, CUdeviceptr dptr, CUstream stream,
                              PFN_cuMemFreeAsync real, bool per_thread);
CUresult serve_mem_get_info(State& s, std::size_t* free, std::size_t* total);
// cuIpcGetMemHandle: the driver exports the whole allocation, a luma segment; luma keeps
// that segment from the driver for good and says so when the block is not its start.
CUresult serve_ipc_get_mem_handle(State& s, CUipcMemHandle* handle, CUdeviceptr dptr);
// Pointer queries. The driver describes a luma block as the allocation it lies in: for an
// ordinary segment that is the segment (docs/architecture.md, "Pointer queries and IPC"),
// but for a block of an expandable segment it would be the one memory (a cuMemCreate
// handle) mapped at the pointer, which need not hold the block. There luma answers the range itself
// - the block, whatever byte of it is asked about - and the buffer id of the block's first
// byte; every other attribute, and every other pointer, gets the driver's answer.
CUresult serve_mem_get_address_range(State& s, CUdeviceptr* pbase, std::size_t* psize, CUdeviceptr dptr);
CUresult serve_pointer_get_attribute(State& s, void* data, CUpointer_attribute attribute, CUdeviceptr ptr);
CUresult serve_pointer_get_attributes(State& s, unsigned count, CUpointer_attribute* attributes,
                                      void** data, CUdeviceptr ptr);

// ---- pinned host memory (host_cache_serve.cpp): the cache when it is on, else forwarded ----
// and counted. `real` of cuMemAllocHost is the program's ABI, asked on a miss.
CUresult serve_mem_host_alloc(State& s, void** pp, std::size_t bytes, unsigned flags);
CUresult serve_mem_alloc_host(State& s, void** pp, std::size_t bytes);
CUresult serve_mem_free_host(State& s, void* p);

// ---- observers: the real call succeeded, luma updates what it knows ----
void on_stream_created(State& s, CUstream stream, unsigned flags) noexcept;
void on_stream_destroying(State& s, CUstream stream) noexcept;  // before the real destroy
// The calling thread made ctx current (cuCtxSetCurrent, cuCtxPushCurrent); its current
// context became one luma does not know (a pop, a create); any thread's may have changed
// (an attach, a detach). current_context.h.
void on_current_context(State& s, CUcontext ctx) noexcept;
void on_current_context_unknown(State& s) noexcept;
void on_contexts_changed() noexcept;
// cuGreenCtxStreamCreate succeeded: a stream of the program's own (stream_order.h).
void on_green_stream_created(State& s) noexcept;
// Stream capture (CUDA graphs): a capture of `stream` in `mode` is about to begin on the
// calling thread (announced before the driver is asked: capture_registry.h; the ticket,
// 0 when luma could not track it), the driver refused it (withdrawn), it ended (whatever
// cuStreamEndCapture answered), or this thread's capture mode became `mode`.
std::uint64_t on_capture_beginning(State& s, CUstream stream, CUstreamCaptureMode mode) noexcept;
void on_capture_refused(State& s, std::uint64_t ticket) noexcept;
void on_capture_ended(State& s, CUstream stream) noexcept;
void on_thread_capture_mode(CUstreamCaptureMode mode) noexcept;

// ---- resolution ----
// Replaces *pfn (the driver's answer to cuGetProcAddress(symbol, ..., version)) with luma's
// function when the request names an ABI luma serves.
void substitute(const char* symbol, void** pfn, int version) noexcept;
// Whether fn lies in the real driver (a library named libcuda.so*).
bool in_libcuda(void* fn) noexcept;
// hooks.cpp: the exported function of a hook.
void* hook_function(Hook h) noexcept;
// The real driver's function behind a hook.
void* real_function(const RealDriver& d, Hook h) noexcept;

}  // namespace luma::shim
