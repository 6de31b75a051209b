// forwarded_calls.h - what luma does after the driver served an allocation call luma
// forwards (forwarded_paths.h): count it in the exit statistics and, with LUMA_TRACE,
// record it in the trace (a forwarded_call record, docs/trace-format.md), which is opened
// for it if no allocator opened it yet. Called by hooks.cpp's forward_then_observe (the
// driver succeeded; the thread is inside luma) and by serve.cpp for a foreign free.
#pragma once

#include <cstddef>

#include "driver/cuda_abi.h"
#include "observe/forwarded_paths.h"
#include "shim_state.h"
#include "trace/trace_format.h"

namespace luma::shim {

// A forwarded call's record, built in one place.
inline core::trace::ForwardedCall call_of(core::trace::ForwardedOp op, core::trace::ForwardedEntry entry,
                                          std::uint64_t address, std::uint64_t bytes,
                                          std::uint64_t stream = 0, std::uint64_t handle = 0) noexcept {
  core::trace::ForwardedCall c;
  c.op = op;
  c.entry = entry;
  c.address = address;
  c.bytes = bytes;
  c.stream = stream;
  c.handle = handle;
  return c;
}

// One forwarded call of `path` (call.path, thread and time are filled in here): alloc and
// map count as allocations of call.bytes, free and unmap as frees. Only while luma serves,
// like the served calls (with caching off luma is not there to report).
void on_forwarded_call(State& s, ForwardedPath path, core::trace::ForwardedCall call) noexcept;

// A pinned host call the host cache served (host_cache_serve.cpp): recorded in the trace
// as a forwarded_call record under the path "pinned_host_cache", so that a program's pinned
// memory is in its trace whoever served it; not counted as forwarded (the exit statistics
// have the host cache's own section).
void on_host_cache_call(State& s, core::trace::ForwardedCall call) noexcept;

// A forwarded allocation path (forwarded_paths.h): one more call, of `bytes`.
void on_forwarded_alloc(State& s, ForwardedPath path, std::size_t bytes,
                        core::trace::ForwardedEntry entry = core::trace::ForwardedEntry::unknown,
                        const void* ptr = nullptr) noexcept;
void on_forwarded_free(State& s, ForwardedPath path,
                       core::trace::ForwardedEntry entry = core::trace::ForwardedEntry::unknown,
                       const void* ptr = nullptr) noexcept;
// cuMemAllocAsync and its _ptsz twin: the program's stream-ordered pool allocation.
void on_mem_alloc_async(State& s, CUdeviceptr* dptr, std::size_t bytes, CUstream stream) noexcept;
// The observers of the pool, managed and virtual memory hooks.
void on_mem_alloc_managed(State& s, CUdeviceptr* dptr, std::size_t bytes, unsigned flags) noexcept;
void on_mem_alloc_from_pool_async(State& s, CUdeviceptr* dptr, std::size_t bytes,
                                  CUmemoryPool pool, CUstream stream) noexcept;
void on_mem_create(State& s, CUmemGenericAllocationHandle* handle, std::size_t bytes,
                   const CUmemAllocationProp* prop, unsigned long long flags) noexcept;
void on_mem_release(State& s, CUmemGenericAllocationHandle handle) noexcept;
void on_mem_map(State& s, CUdeviceptr ptr, std::size_t bytes, std::size_t offset,
                CUmemGenericAllocationHandle handle, unsigned long long flags) noexcept;
void on_mem_unmap(State& s, CUdeviceptr ptr, std::size_t bytes) noexcept;

}  // namespace luma::shim
