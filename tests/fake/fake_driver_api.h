// fake_driver_api.h - the driver entry points the stand-in libcuda.so.1 (a TEST DOUBLE)
// exports, under their real exported names and signatures (cuda.h of CUDA 13.0), for the
// stand-in itself, its tests and the driver-API test programs (which cannot include the
// toolkit's cuda.h where no toolkit is installed). The _ptsz/_ptds forms are the
// per-thread-default-stream variants.
#pragma once

#include "driver/cuda_abi.h"

#ifndef LUMA_FAKE_API
#define LUMA_FAKE_API
#endif

extern "C" {

LUMA_FAKE_API CUresult cuInit(unsigned int flags);
LUMA_FAKE_API CUresult cuDriverGetVersion(int* version);
LUMA_FAKE_API CUresult cuDeviceGetCount(int* count);
LUMA_FAKE_API CUresult cuDeviceGet(CUdevice* device, int ordinal);
LUMA_FAKE_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev);
LUMA_FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
LUMA_FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
LUMA_FAKE_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
LUMA_FAKE_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active);
LUMA_FAKE_API CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
LUMA_FAKE_API CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int count,
                                      unsigned int flags, CUdevice dev);
LUMA_FAKE_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                      CUdevice dev);
LUMA_FAKE_API CUresult cuCtxDestroy_v2(CUcontext ctx);
LUMA_FAKE_API CUresult cuCtxGetCurrent(CUcontext* ctx);
LUMA_FAKE_API CUresult cuCtxSetCurrent(CUcontext ctx);
LUMA_FAKE_API CUresult cuCtxPushCurrent_v2(CUcontext ctx);
LUMA_FAKE_API CUresult cuCtxPopCurrent_v2(CUcontext* ctx);
LUMA_FAKE_API CUresult cuCtxGetDevice(CUdevice* device);
LUMA_FAKE_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx);
LUMA_FAKE_API CUresult cuCtxSynchronize(void);
LUMA_FAKE_API CUresult cuCtxSynchronize_v2(CUcontext ctx);
LUMA_FAKE_API CUresult cuCtxRecordEvent(CUcontext ctx, CUevent event);

// Pre-3.2 (32-bit) ABI: distinct functions that refuse, so a caller can tell which ABI it got.
LUMA_FAKE_API CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytesize);
LUMA_FAKE_API CUresult cuMemFree(unsigned int dptr);
LUMA_FAKE_API CUresult cuMemGetInfo(unsigned int* free, unsigned int* total);
LUMA_FAKE_API CUresult cuMemGetAddressRange(unsigned int* base, unsigned int* size,
                                            unsigned int dptr);

LUMA_FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
LUMA_FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr);
LUMA_FAKE_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                          size_t height, unsigned int elementSize);
LUMA_FAKE_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total);
LUMA_FAKE_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size,
                                               CUdeviceptr dptr);
LUMA_FAKE_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                             CUdeviceptr ptr);
LUMA_FAKE_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
LUMA_FAKE_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                            CUstream stream);
LUMA_FAKE_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
LUMA_FAKE_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);

LUMA_FAKE_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n);
LUMA_FAKE_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t n);
LUMA_FAKE_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n,
                                       CUstream stream);
LUMA_FAKE_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n,
                                            CUstream stream);
LUMA_FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes);
LUMA_FAKE_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes);
LUMA_FAKE_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes);
LUMA_FAKE_API CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes);
LUMA_FAKE_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
LUMA_FAKE_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
LUMA_FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                                            CUstream stream);
LUMA_FAKE_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src,
                                                 size_t bytes, CUstream stream);
LUMA_FAKE_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes,
                                            CUstream stream);
LUMA_FAKE_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes,
                                                 CUstream stream);
LUMA_FAKE_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                            CUstream stream);
LUMA_FAKE_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src,
                                                 size_t bytes, CUstream stream);

LUMA_FAKE_API CUresult cuStreamCreate(CUstream* stream, unsigned int flags);
LUMA_FAKE_API CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags,
                                                  int priority);
LUMA_FAKE_API CUresult cuStreamDestroy(CUstream stream);
LUMA_FAKE_API CUresult cuStreamDestroy_v2(CUstream stream);
LUMA_FAKE_API CUresult cuStreamSynchronize(CUstream stream);
LUMA_FAKE_API CUresult cuStreamSynchronize_ptsz(CUstream stream);
LUMA_FAKE_API CUresult cuStreamQuery(CUstream stream);
LUMA_FAKE_API CUresult cuStreamQuery_ptsz(CUstream stream);
LUMA_FAKE_API CUresult cuStreamGetFlags(CUstream stream, unsigned int* flags);
LUMA_FAKE_API CUresult cuStreamGetFlags_ptsz(CUstream stream, unsigned int* flags);
LUMA_FAKE_API CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags);
LUMA_FAKE_API CUresult cuStreamWaitEvent_ptsz(CUstream stream, CUevent event,
                                              unsigned int flags);

LUMA_FAKE_API CUresult cuEventCreate(CUevent* event, unsigned int flags);
LUMA_FAKE_API CUresult cuEventRecord(CUevent event, CUstream stream);
LUMA_FAKE_API CUresult cuEventRecord_ptsz(CUevent event, CUstream stream);
LUMA_FAKE_API CUresult cuEventQuery(CUevent event);
LUMA_FAKE_API CUresult cuEventSynchronize(CUevent event);
LUMA_FAKE_API CUresult cuEventDestroy(CUevent event);
LUMA_FAKE_API CUresult cuEventDestroy_v2(CUevent event);

// Device queries (fake_device_queries.cpp).
LUMA_FAKE_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev);
LUMA_FAKE_API CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev);
LUMA_FAKE_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev);
LUMA_FAKE_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev);

// Host and managed memory, pointer queries (fake_driver.cpp).
LUMA_FAKE_API CUresult cuMemAllocHost_v2(void** pp, size_t bytesize);
LUMA_FAKE_API CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags);
LUMA_FAKE_API CUresult cuMemFreeHost(void* p);
LUMA_FAKE_API CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p);
LUMA_FAKE_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p,
                                                    unsigned int Flags);
LUMA_FAKE_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags);
LUMA_FAKE_API CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                              CUpointer_attribute* attributes, void** data,
                                              CUdeviceptr ptr);

// Legacy IPC (fake_ipc.cpp).
LUMA_FAKE_API CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr);
LUMA_FAKE_API CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                          unsigned int Flags);
LUMA_FAKE_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                             unsigned int Flags);
LUMA_FAKE_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr);

// Stream capture and graphs (fake_capture.cpp).
LUMA_FAKE_API CUresult cuStreamBeginCapture(CUstream hStream);
LUMA_FAKE_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream);
LUMA_FAKE_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
LUMA_FAKE_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
LUMA_FAKE_API CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                   const CUgraphNode* dependencies,
                                                   const CUgraphEdgeData* dependencyData,
                                                   size_t numDependencies, CUstreamCaptureMode mode);
LUMA_FAKE_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                        const CUgraphNode* dependencies,
                                                        const CUgraphEdgeData* dependencyData,
                                                        size_t numDependencies,
                                                        CUstreamCaptureMode mode);
LUMA_FAKE_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph);
LUMA_FAKE_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph);
LUMA_FAKE_API CUresult cuStreamIsCapturing(CUstream hStream,
                                           CUstreamCaptureStatus* captureStatus);
LUMA_FAKE_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus* captureStatus);
LUMA_FAKE_API CUresult cuStreamGetCaptureInfo(CUstream hStream,
                                              CUstreamCaptureStatus* captureStatus_out,
                                              cuuint64_t* id_out);
LUMA_FAKE_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                                   CUstreamCaptureStatus* captureStatus_out,
                                                   cuuint64_t* id_out);
LUMA_FAKE_API CUresult cuStreamGetCaptureInfo_v2(CUstream hStream,
                                                 CUstreamCaptureStatus* captureStatus_out,
                                                 cuuint64_t* id_out, CUgraph* graph_out,
                                                 const CUgraphNode** dependencies_out,
                                                 size_t* numDependencies_out);
LUMA_FAKE_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                      CUstreamCaptureStatus* captureStatus_out,
                                                      cuuint64_t* id_out, CUgraph* graph_out,
                                                      const CUgraphNode** dependencies_out,
                                                      size_t* numDependencies_out);
LUMA_FAKE_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                                 CUstreamCaptureStatus* captureStatus_out,
                                                 cuuint64_t* id_out, CUgraph* graph_out,
                                                 const CUgraphNode** dependencies_out,
                                                 const CUgraphEdgeData** edgeData_out,
                                                 size_t* numDependencies_out);
LUMA_FAKE_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                      CUstreamCaptureStatus* captureStatus_out,
                                                      cuuint64_t* id_out, CUgraph* graph_out,
                                                      const CUgraphNode** dependencies_out,
                                                      const CUgraphEdgeData** edgeData_out,
                                                      size_t* numDependencies_out);
LUMA_FAKE_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode);
LUMA_FAKE_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                   unsigned long long flags);
LUMA_FAKE_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
LUMA_FAKE_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
LUMA_FAKE_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
LUMA_FAKE_API CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags);
LUMA_FAKE_API CUresult cuGraphDestroy(CUgraph hGraph);

// Stream-ordered pools and virtual memory management (fake_vmm.cpp).
LUMA_FAKE_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev);
LUMA_FAKE_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps);
LUMA_FAKE_API CUresult cuMemPoolDestroy(CUmemoryPool pool);
LUMA_FAKE_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                               CUmemoryPool pool, CUstream hStream);
LUMA_FAKE_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                    CUmemoryPool pool, CUstream hStream);
LUMA_FAKE_API CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                     const CUmemAllocationProp* prop,
                                                     CUmemAllocationGranularity_flags option);
LUMA_FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                   const CUmemAllocationProp* prop, unsigned long long flags);
LUMA_FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
LUMA_FAKE_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                           CUdeviceptr addr, unsigned long long flags);
LUMA_FAKE_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
LUMA_FAKE_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags);
LUMA_FAKE_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
LUMA_FAKE_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                      size_t count);
LUMA_FAKE_API CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                                      CUdeviceptr ptr);
LUMA_FAKE_API CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev);

LUMA_FAKE_API CUresult cuGetErrorString(CUresult error, const char** str);
LUMA_FAKE_API CUresult cuGetErrorName(CUresult error, const char** str);
LUMA_FAKE_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                        cuuint64_t flags);
LUMA_FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* symbolStatus);

}  // extern "C"
