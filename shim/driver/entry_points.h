// entry_points.h - the one table of driver entry points luma touches. Everything about a
// hook is written here once: the enum (proc_address.h), the cuGetProcAddress answer with
// its ABI versions (proc_address.cpp), the real driver's pointer and how it is resolved
// (real_driver.h/.cpp), the exported function's address (hooks.cpp) and the export list
// (libluma.map.in, generated at build time). Adding a hook is one line here plus its
// exported function in hooks.cpp; a missing function fails the link.
//
// Pure preprocessor lists (mimalloc's MI_STAT_FIELDS style), no includes, so the linker
// script can be generated from the same lines by the C preprocessor.
//
// LUMA_HOOKS(X): entry points libluma.so exports and hands out instead of the driver's.
//   X(id, symbol, request, min_version, max_version, pfn, how, driver_name)
//   id           RealDriver field and Hook enumerator
//   symbol       the exported name of the ABI luma implements
//   request      the name a caller passes to cuGetProcAddress
//   min_version  the first cudaVersion that means that ABI (cuda.h's "_v2 since" version)
//   max_version  the first cudaVersion that no longer does (0: none)
//   pfn          its signature (cuda_abi.h)
//   how          how the real function is found: by_dlsym (glibc dlsym on libcuda.so.1),
//                legacy (cuGetProcAddress_v2, legacy default stream), per_thread (the
//                per-thread-default-stream variant)
//   driver_name  the name resolved in the real driver (the request, except for a twin)
// Versions: the 64-bit _v2 memory calls came in CUDA 3.2 (3020); cuStreamDestroy_v2,
// cuCtxDestroy_v2 and cuPointerGetAttribute in 4.0; cuStreamCreateWithPriority in 5.5; the
// _v2 ABI of cuDevicePrimaryCtxRelease/Reset in 11.0 (the 7.0 ABI is forwarded untouched);
// cuMemAllocAsync, cuMemFreeAsync and cuMemAllocFromPoolAsync (with its _ptsz twin) in
// 11.2; the virtual memory calls (cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap) in 10.2; cuMemAllocManaged in 6.0; cuMemHostAlloc in
// 2.2 and cuMemFreeHost in 2.0 (one ABI each); cuMemAllocHost's _v2 in 3.2; cuGetProcAddress
// in 11.3 and its _v2 ABI (symbolStatus) in 12.0;
// cuIpcGetMemHandle in 4.1; cuMemGetAddressRange's _v2 in 3.2, cuPointerGetAttribute in 4.0 and
// cuPointerGetAttributes in 7.0 (one ABI each); stream capture in 10.0 (global mode only) and its _v2 ABI with a
// mode, with cuThreadExchangeStreamCaptureMode, in 10.1; capture into an existing graph
// (cuStreamBeginCaptureToGraph) in 12.3. The calls that change a thread's
// current context (current_context.h): cuCtxSetCurrent and the _v2 ABIs of
// cuCtxPushCurrent/cuCtxPopCurrent in 4.0, cuCtxCreate's _v2 in 3.2, _v3 (execution
// affinity) in 11.4, _v4 (CUctxCreateParams) in 12.5; cuCtxAttach/cuCtxDetach have only
// the 2.0 ABI (cudaTypedefs.h). Their older ABIs are not hooked: a request for one stops
// the tracking of current contexts. cuGreenCtxStreamCreate came in 12.5 (a stream of the
// program's own: it ends stream-ordered reuse, stream_order.h).
// Twins: two rows with the same driver_name and min_version (legacy and per_thread) are the
// two variants of one function; which one a request gets is the driver's decision, and
// luma hands out its hook of that same variant (serve.cpp, substitute()).
#pragma once

// clang-format off
#define LUMA_HOOKS(X) \
  X(get_proc_address_v1, cuGetProcAddress, "cuGetProcAddress", 11030, 12000, PFN_cuGetProcAddress_v1, by_dlsym, "cuGetProcAddress") \
  X(get_proc_address_v2, cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, PFN_cuGetProcAddress_v2, by_dlsym, "cuGetProcAddress_v2") \
  X(mem_alloc, cuMemAlloc_v2, "cuMemAlloc", 3020, 0, PFN_cuMemAlloc_v2, legacy, "cuMemAlloc") \
  X(mem_free, cuMemFree_v2, "cuMemFree", 3020, 0, PFN_cuMemFree_v2, legacy, "cuMemFree") \
  X(mem_alloc_pitch, cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0, PFN_cuMemAllocPitch_v2, legacy, "cuMemAllocPitch") \
  X(mem_get_info, cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0, PFN_cuMemGetInfo_v2, legacy, "cuMemGetInfo") \
  X(stream_create, cuStreamCreate, "cuStreamCreate", 2000, 0, PFN_cuStreamCreate, legacy, "cuStreamCreate") \
  X(stream_create_with_priority, cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 5050, 0, PFN_cuStreamCreateWithPriority, legacy, "cuStreamCreateWithPriority") \
  X(stream_destroy, cuStreamDestroy_v2, "cuStreamDestroy", 4000, 0, PFN_cuStreamDestroy_v2, legacy, "cuStreamDestroy") \
  X(ctx_destroy, cuCtxDestroy_v2, "cuCtxDestroy", 4000, 0, PFN_cuCtxDestroy_v2, legacy, "cuCtxDestroy") \
  X(primary_ctx_release, cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, 0, PFN_cuDevicePrimaryCtxRelease_v2, legacy, "cuDevicePrimaryCtxRelease") \
  X(primary_ctx_reset, cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, 0, PFN_cuDevicePrimaryCtxReset_v2, legacy, "cuDevicePrimaryCtxReset") \
  X(mem_free_async, cuMemFreeAsync, "cuMemFreeAsync", 11020, 0, PFN_cuMemFreeAsync, legacy, "cuMemFreeAsync") \
  X(mem_free_async_ptsz, cuMemFreeAsync_ptsz, "cuMemFreeAsync_ptsz", 11020, 0, PFN_cuMemFreeAsync, per_thread, "cuMemFreeAsync") \
  X(mem_alloc_async, cuMemAllocAsync, "cuMemAllocAsync", 11020, 0, PFN_cuMemAllocAsync, legacy, "cuMemAllocAsync") \
  X(mem_alloc_async_ptsz, cuMemAllocAsync_ptsz, "cuMemAllocAsync_ptsz", 11020, 0, PFN_cuMemAllocAsync, per_thread, "cuMemAllocAsync") \
  X(mem_alloc_from_pool_async, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0, PFN_cuMemAllocFromPoolAsync, legacy, "cuMemAllocFromPoolAsync") \
  X(mem_alloc_from_pool_async_ptsz, cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync_ptsz", 11020, 0, PFN_cuMemAllocFromPoolAsync, per_thread, "cuMemAllocFromPoolAsync") \
  X(mem_create, cuMemCreate, "cuMemCreate", 10020, 0, PFN_cuMemCreate, legacy, "cuMemCreate") \
  X(mem_release, cuMemRelease, "cuMemRelease", 10020, 0, PFN_cuMemRelease, legacy, "cuMemRelease") \
  X(mem_map, cuMemMap, "cuMemMap", 10020, 0, PFN_cuMemMap, legacy, "cuMemMap") \
  X(mem_unmap, cuMemUnmap, "cuMemUnmap", 10020, 0, PFN_cuMemUnmap, legacy, "cuMemUnmap") \
  X(mem_alloc_managed, cuMemAllocManaged, "cuMemAllocManaged", 6000, 0, PFN_cuMemAllocManaged, legacy, "cuMemAllocManaged") \
  X(mem_alloc_host, cuMemAllocHost_v2, "cuMemAllocHost", 3020, 0, PFN_cuMemAllocHost_v2, legacy, "cuMemAllocHost") \
  X(mem_host_alloc, cuMemHostAlloc, "cuMemHostAlloc", 2020, 0, PFN_cuMemHostAlloc, legacy, "cuMemHostAlloc") \
  X(mem_free_host, cuMemFreeHost, "cuMemFreeHost", 2000, 0, PFN_cuMemFreeHost, legacy, "cuMemFreeHost") \
  X(ipc_get_mem_handle, cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, 0, PFN_cuIpcGetMemHandle, legacy, "cuIpcGetMemHandle") \
  X(mem_get_address_range, cuMemGetAddressRange_v2, "cuMemGetAddressRange", 3020, 0, PFN_cuMemGetAddressRange_v2, legacy, "cuMemGetAddressRange") \
  X(pointer_get_attribute, cuPointerGetAttribute, "cuPointerGetAttribute", 4000, 0, PFN_cuPointerGetAttribute, legacy, "cuPointerGetAttribute") \
  X(pointer_get_attributes, cuPointerGetAttributes, "cuPointerGetAttributes", 7000, 0, PFN_cuPointerGetAttributes, legacy, "cuPointerGetAttributes") \
  X(stream_begin_capture_v1, cuStreamBeginCapture, "cuStreamBeginCapture", 10000, 10010, PFN_cuStreamBeginCapture_v1, legacy, "cuStreamBeginCapture") \
  X(stream_begin_capture_v1_ptsz, cuStreamBeginCapture_ptsz, "cuStreamBeginCapture_ptsz", 10000, 10010, PFN_cuStreamBeginCapture_v1, per_thread, "cuStreamBeginCapture") \
  X(stream_begin_capture, cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, 0, PFN_cuStreamBeginCapture_v2, legacy, "cuStreamBeginCapture") \
  X(stream_begin_capture_ptsz, cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture_v2_ptsz", 10010, 0, PFN_cuStreamBeginCapture_v2, per_thread, "cuStreamBeginCapture") \
  X(stream_begin_capture_to_graph, cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", 12030, 0, PFN_cuStreamBeginCaptureToGraph, legacy, "cuStreamBeginCaptureToGraph") \
  X(stream_begin_capture_to_graph_ptsz, cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph_ptsz", 12030, 0, PFN_cuStreamBeginCaptureToGraph, per_thread, "cuStreamBeginCaptureToGraph") \
  X(stream_end_capture, cuStreamEndCapture, "cuStreamEndCapture", 10000, 0, PFN_cuStreamEndCapture, legacy, "cuStreamEndCapture") \
  X(stream_end_capture_ptsz, cuStreamEndCapture_ptsz, "cuStreamEndCapture_ptsz", 10000, 0, PFN_cuStreamEndCapture, per_thread, "cuStreamEndCapture") \
  X(thread_exchange_capture_mode, cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010, 0, PFN_cuThreadExchangeStreamCaptureMode, legacy, "cuThreadExchangeStreamCaptureMode") \
  X(ctx_set_current, cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0, PFN_cuCtxSetCurrent, legacy, "cuCtxSetCurrent") \
  X(ctx_push_current, cuCtxPushCurrent_v2, "cuCtxPushCurrent", 4000, 0, PFN_cuCtxPushCurrent_v2, legacy, "cuCtxPushCurrent") \
  X(ctx_pop_current, cuCtxPopCurrent_v2, "cuCtxPopCurrent", 4000, 0, PFN_cuCtxPopCurrent_v2, legacy, "cuCtxPopCurrent") \
  X(ctx_create_v2, cuCtxCreate_v2, "cuCtxCreate", 3020, 11040, PFN_cuCtxCreate_v2, legacy, "cuCtxCreate") \
  X(ctx_create_v3, cuCtxCreate_v3, "cuCtxCreate", 11040, 12050, PFN_cuCtxCreate_v3, legacy, "cuCtxCreate") \
  X(ctx_create_v4, cuCtxCreate_v4, "cuCtxCreate", 12050, 0, PFN_cuCtxCreate_v4, legacy, "cuCtxCreate") \
  X(ctx_attach, cuCtxAttach, "cuCtxAttach", 2000, 0, PFN_cuCtxAttach, legacy, "cuCtxAttach") \
  X(ctx_detach, cuCtxDetach, "cuCtxDetach", 2000, 0, PFN_cuCtxDetach, legacy, "cuCtxDetach") \
  X(green_ctx_stream_create, cuGreenCtxStreamCreate, "cuGreenCtxStreamCreate", 12050, 0, PFN_cuGreenCtxStreamCreate, legacy, "cuGreenCtxStreamCreate")

// LUMA_DRIVER_CALLS(X): entry points luma calls itself but does not hook.
//   X(id, driver_name, version, pfn) - resolved with cuGetProcAddress_v2 at that ABI
//   (legacy default stream); versions as cuda.h declares them. cuCtxRecordEvent came in
//   12.5 (PFN_cuCtxRecordEvent_v12050): older drivers do not have it, and fences then go
//   stream by stream (context_fence.h). Expandable segments (driver_device.h) reserve,
//   map and grant access with the virtual memory calls of 10.2 (cuMemCreate, cuMemRelease,
//   cuMemMap and cuMemUnmap are hooks above: luma calls their real functions), and ask
//   cuDeviceCanAccessPeer (4.0) which devices to grant. cuStreamWaitEvent on the legacy
//   stream is the barrier of the legacy order (stream_order.h).
#define LUMA_DRIVER_CALLS(X) \
  X(ctx_get_current, "cuCtxGetCurrent", 4000, PFN_cuCtxGetCurrent) \
  X(ctx_get_device, "cuCtxGetDevice", 2000, PFN_cuCtxGetDevice) \
  X(ctx_synchronize, "cuCtxSynchronize", 2000, PFN_cuCtxSynchronize) \
  X(event_create, "cuEventCreate", 2000, PFN_cuEventCreate) \
  X(event_record, "cuEventRecord", 2000, PFN_cuEventRecord) \
  X(event_query, "cuEventQuery", 2000, PFN_cuEventQuery) \
  X(event_synchronize, "cuEventSynchronize", 2000, PFN_cuEventSynchronize) \
  X(event_destroy, "cuEventDestroy", 4000, PFN_cuEventDestroy_v2) \
  X(primary_ctx_retain, "cuDevicePrimaryCtxRetain", 7000, PFN_cuDevicePrimaryCtxRetain) \
  X(primary_ctx_get_state, "cuDevicePrimaryCtxGetState", 7000, PFN_cuDevicePrimaryCtxGetState) \
  X(device_get_count, "cuDeviceGetCount", 2000, PFN_cuDeviceGetCount) \
  X(device_get, "cuDeviceGet", 2000, PFN_cuDeviceGet) \
  X(device_get_name, "cuDeviceGetName", 2000, PFN_cuDeviceGetName) \
  X(device_total_mem, "cuDeviceTotalMem", 3020, PFN_cuDeviceTotalMem_v2) \
  X(stream_is_capturing, "cuStreamIsCapturing", 10000, PFN_cuStreamIsCapturing) \
  X(stream_query, "cuStreamQuery", 2000, PFN_cuStreamQuery) \
  X(stream_wait_event, "cuStreamWaitEvent", 3020, PFN_cuStreamWaitEvent) \
  X(ctx_record_event, "cuCtxRecordEvent", 12050, PFN_cuCtxRecordEvent) \
  X(device_get_attribute, "cuDeviceGetAttribute", 2000, PFN_cuDeviceGetAttribute) \
  X(device_can_access_peer, "cuDeviceCanAccessPeer", 4000, PFN_cuDeviceCanAccessPeer) \
  X(mem_get_allocation_granularity, "cuMemGetAllocationGranularity", 10020, PFN_cuMemGetAllocationGranularity) \
  X(mem_address_reserve, "cuMemAddressReserve", 10020, PFN_cuMemAddressReserve) \
  X(mem_address_free, "cuMemAddressFree", 10020, PFN_cuMemAddressFree) \
  X(mem_set_access, "cuMemSetAccess", 10020, PFN_cuMemSetAccess)
// clang-format on
