// api.h - the device-memory calls the test workload makes, as one table, so the same
// workload (workload.cpp and its modes_*.cpp) runs through each way a CUDA program reaches
// the driver: the runtime linked statically or dynamically (api_runtime.cpp), the runtime
// opened with dlopen like Python ctypes (api_dlopen.cpp), the driver API linked with -lcuda
// (api_driver.cpp). Every call returns the CUDA error code of its API (0 = success).
#pragma once

#include <cstddef>

namespace luma::programs {

// Driver-API calls for IPC and stream capture, the entry points real programs (UCX, Open MPI,
// NCCL, PyTorch's CUDA graphs) use and the runtime programs here do not reach: prog_driver
// only. Handles are opaque (an IPC handle is CU_IPC_HANDLE_SIZE bytes), modes and codes are
// CUDA's numbers.
inline constexpr size_t kIpcHandleSize = 64;  // CU_IPC_HANDLE_SIZE
inline constexpr int kCaptureModeGlobal = 0;  // CU_STREAM_CAPTURE_MODE_GLOBAL
inline constexpr int kCaptureModeRelaxed = 2;  // CU_STREAM_CAPTURE_MODE_RELAXED
struct DriverCalls {
  int (*ipc_get)(void* handle, const void* p);  // cuIpcGetMemHandle
  int (*ipc_open)(void** p, const void* handle);  // cuIpcOpenMemHandle_v2, lazy peer access
  int (*ipc_close)(void* p);                     // cuIpcCloseMemHandle
  int (*buffer_id)(const void* p, unsigned long long* id);  // CU_POINTER_ATTRIBUTE_BUFFER_ID
  int (*copy_async)(void* dst, const void* src, size_t n, void* stream);  // DtoD
  int (*begin_capture)(void* stream, int mode);  // cuStreamBeginCapture_v2
  int (*end_capture)(void* stream, void** graph);
  int (*exchange_capture_mode)(int* mode);  // cuThreadExchangeStreamCaptureMode
  int (*instantiate)(void** exec, void* graph);  // cuGraphInstantiateWithFlags(0)
  int (*launch)(void* exec, void* stream);
  int (*exec_destroy)(void* exec);
  int (*graph_destroy)(void* graph);
  int (*host_alloc)(void** p, size_t n);     // cuMemAllocHost_v2
  int (*host_free)(void* p);                 // cuMemFreeHost
  int (*managed_alloc)(void** p, size_t n);  // cuMemAllocManaged(GLOBAL); freed by cuMemFree
  // Stream-ordered pools: cuMemPoolCreate (pinned memory of the current device),
  // cuMemPoolDestroy, cuMemAllocFromPoolAsync (freed by free_async).
  int (*pool_create)(void** pool);
  int (*pool_destroy)(void* pool);
  int (*pool_alloc)(void** p, size_t n, void* pool, void* stream);
  // Virtual memory management on the current device: the minimum granularity, cuMemCreate,
  // cuMemRelease, cuMemAddressReserve (default alignment), cuMemAddressFree, cuMemMap
  // (offset 0), cuMemUnmap, cuMemSetAccess (read-write for the current device).
  int (*vmm_granularity)(size_t* g);
  int (*vmm_create)(unsigned long long* handle, size_t n);
  int (*vmm_release)(unsigned long long handle);
  int (*vmm_reserve)(void** va, size_t n);
  int (*vmm_free_range)(void* va, size_t n);
  int (*vmm_map)(void* va, size_t n, unsigned long long handle);
  int (*vmm_unmap)(void* va, size_t n);
  int (*vmm_set_access)(void* va, size_t n);
  // cuMemGetAccess: what `device` may do at p (CUmemAccess_flags: 3 read-write).
  int (*vmm_get_access)(const void* p, int device, unsigned long long* flags);
  // The range holding p as cuPointerGetAttribute (RANGE_START_ADDR, RANGE_SIZE) and as one
  // cuPointerGetAttributes call (RANGE_START_ADDR, RANGE_SIZE, BUFFER_ID) give it.
  int (*pointer_range)(const void* p, void** start, size_t* size);
  int (*pointer_range_and_id)(const void* p, void** start, size_t* size, unsigned long long* id);
  // cuGraphCreate (flags 0), and cuStreamBeginCaptureToGraph into it (no dependencies).
  int (*graph_create)(void** graph);
  int (*begin_capture_to_graph)(void* stream, void* graph, int mode);
};

struct Api {
  const char* name;
  int oom_code;         // cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY (both 2)
  int invalid_code;     // cudaErrorInvalidValue / CUDA_ERROR_INVALID_VALUE (both 1)
  bool zero_size_ok;    // cudaMalloc(&p, 0) succeeds with p = null; cuMemAlloc(&p, 0) fails
  int (*device_count)(int* count);
  int (*set_device)(int device);
  int (*alloc)(void** p, size_t n);
  int (*free)(void* p);
  int (*alloc_async)(void** p, size_t n, void* stream);
  int (*free_async)(void* p, void* stream);
  int (*memset)(void* p, int value, size_t n);
  int (*memset_async)(void* p, int value, size_t n, void* stream);
  int (*htod)(void* dst, const void* src, size_t n);
  int (*dtoh)(void* dst, const void* src, size_t n);
  int (*dtoh_async)(void* dst, const void* src, size_t n, void* stream);
  int (*stream_create)(void** stream, bool non_blocking);
  int (*stream_destroy)(void* stream);
  int (*stream_sync)(void* stream);
  int (*device_sync)();
  int (*mem_info)(size_t* free, size_t* total);
  // cudaDeviceReset / cuDevicePrimaryCtxReset_v2: the current device's memory goes.
  int (*device_reset)();
  // Contexts of the program's own (driver API only; nullptr elsewhere): cuCtxCreate_v2
  // (made current), cuCtxDestroy_v2, and the release / retain of the current device's
  // primary context (its last release destroys it).
  int (*ctx_create)(void** ctx);
  int (*ctx_destroy)(void* ctx);
  int (*primary_release)();
  int (*primary_retain)();
  // cuMemGetAddressRange_v2 (driver API only): the allocation containing p.
  int (*address_range)(const void* p, void** base, size_t* size);
  const DriverCalls* driver;  // nullptr: the API has none of these entry points
};

const Api& api();

}  // namespace luma::programs
