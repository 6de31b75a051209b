// real_driver.h - the real CUDA driver as luma reaches it: glibc's own dlsym, and the
// driver entry points luma forwards to or calls itself, resolved once at run time from
// dlopen("libcuda.so.1") (no link-time dependency on libcuda).
//
// Every pointer is the real driver's and never one of luma's hooks, so calling through
// this table can never come back into the cache. Must never be used before load()
// succeeded; a missing entry point is nullptr and its users fall back or report an error.
#pragma once

#include "cuda_abi.h"

namespace luma::shim {

struct RealDriver {
  void* handle = nullptr;  // of libcuda.so.1
  PFN_cuGetProcAddress_v2 get_proc_address_v2 = nullptr;
  PFN_cuGetProcAddress_v1 get_proc_address_v1 = nullptr;
  // The memory ABI luma serves (the _v2 ABI of CUDA 3.2 and later).
  PFN_cuMemAlloc_v2 mem_alloc = nullptr;
  PFN_cuMemFree_v2 mem_free = nullptr;
  PFN_cuMemAllocPitch_v2 mem_alloc_pitch = nullptr;
  PFN_cuMemGetInfo_v2 mem_get_info = nullptr;
  PFN_cuMemGetAddressRange_v2 mem_get_address_range = nullptr;
  PFN_cuPointerGetAttribute pointer_get_attribute = nullptr;
  // A stream-ordered free may name a luma block (CUDA allows cuMemFreeAsync on cuMemAlloc
  // memory); anything else goes to the one of these the program's request resolved to.
  PFN_cuMemFreeAsync mem_free_async = nullptr;
  PFN_cuMemFreeAsync mem_free_async_ptsz = nullptr;
  // Streams, tracked for the free_sync:event policy.
  PFN_cuStreamCreate stream_create = nullptr;
  PFN_cuStreamCreateWithPriority stream_create_with_priority = nullptr;
  PFN_cuStreamDestroy_v2 stream_destroy = nullptr;
  // What luma itself needs: contexts, synchronization and events (fences).
  PFN_cuCtxGetCurrent ctx_get_current = nullptr;
  PFN_cuCtxPushCurrent_v2 ctx_push_current = nullptr;
  PFN_cuCtxPopCurrent_v2 ctx_pop_current = nullptr;
  PFN_cuCtxGetDevice ctx_get_device = nullptr;    // the CUDA 2.0 ABI: (CUdevice*)
  PFN_cuCtxSynchronize ctx_synchronize = nullptr;  // the CUDA 2.0 ABI: (void)
  PFN_cuEventCreate event_create = nullptr;
  PFN_cuEventRecord event_record = nullptr;
  PFN_cuEventQuery event_query = nullptr;
  PFN_cuEventSynchronize event_synchronize = nullptr;
  PFN_cuEventDestroy_v2 event_destroy = nullptr;
  // Context lifetime: a destroyed context takes its memory with it (hooks.cpp).
  PFN_cuCtxDestroy_v2 ctx_destroy = nullptr;
  PFN_cuDevicePrimaryCtxRetain primary_ctx_retain = nullptr;
  PFN_cuDevicePrimaryCtxRelease_v2 primary_ctx_release = nullptr;
  PFN_cuDevicePrimaryCtxReset_v2 primary_ctx_reset = nullptr;
  PFN_cuDevicePrimaryCtxGetState primary_ctx_get_state = nullptr;
  // Optional: the devices named in a trace's header (absent ones leave the fields empty).
  PFN_cuDeviceGetCount device_get_count = nullptr;
  PFN_cuDeviceGet device_get = nullptr;
  PFN_cuDeviceGetName device_get_name = nullptr;
  PFN_cuDeviceTotalMem_v2 device_total_mem = nullptr;

  // True when everything luma needs to serve allocations was found.
  bool can_serve() const noexcept;
};

// glibc's dlsym (the one luma's exported dlsym overrides). Never nullptr after the first
// call on a glibc system; resolved without calling dlsym itself.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym() noexcept;

// Loads libcuda.so.1 and resolves the table; false (and a table of nullptrs) when the
// driver is absent. Not thread-safe: called once, from the shim's one-time initialisation.
bool load_real_driver(RealDriver& out) noexcept;

}  // namespace luma::shim
