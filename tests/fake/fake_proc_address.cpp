// fake_proc_address.cpp - cuGetProcAddress / cuGetProcAddress_v2 of the stand-in driver (a
// TEST DOUBLE), resolving like the real one: the base name plus cudaVersion select the ABI
// (the entry with the highest first version <= cudaVersion), and
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM selects the _ptsz/_ptds variant where one
// exists. Unknown names (the runtime's ("", 0) probe among them) -> CUDA_ERROR_NOT_FOUND with
// CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; a name whose first version is above cudaVersion ->
// CUDA_ERROR_NOT_FOUND with CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT; cudaVersion above the
// driver's own version -> CUDA_ERROR_INVALID_VALUE (cuda.h). pfn is NULL on every failure.
// Playing an older driver (LUMA_FAKE_DRIVER_VERSION), rows that came later do not exist: a
// name all of whose rows came later is unknown, as it is to that driver.
// Works before cuInit, as the real one does (the runtime resolves cuInit through it).
#include <cstring>

#include "fake_state.h"

#define LUMA_FAKE_API __attribute__((visibility("default")))
#include "fake_driver_api.h"

namespace luma::fake {
namespace {

struct Entry {
  const char* name;
  int version;      // first CUDA version with this ABI (PFN_<name>_v<version> in cudaTypedefs.h)
  void* fn;
  void* per_thread;  // _ptsz / _ptds variant, or null
};

#define FN(f) reinterpret_cast<void*>(&f)

// One row per ABI of each base name; rows of one name in increasing version.
const Entry kEntries[] = {
    {"cuInit", 2000, FN(cuInit), nullptr},
    {"cuDriverGetVersion", 2020, FN(cuDriverGetVersion), nullptr},
    {"cuDeviceGetCount", 2000, FN(cuDeviceGetCount), nullptr},
    {"cuDeviceGet", 2000, FN(cuDeviceGet), nullptr},
    {"cuDeviceTotalMem", 3020, FN(cuDeviceTotalMem_v2), nullptr},
    {"cuDevicePrimaryCtxRetain", 7000, FN(cuDevicePrimaryCtxRetain), nullptr},
    {"cuDevicePrimaryCtxRelease", 11000, FN(cuDevicePrimaryCtxRelease_v2), nullptr},
    {"cuDevicePrimaryCtxReset", 11000, FN(cuDevicePrimaryCtxReset_v2), nullptr},
    {"cuDevicePrimaryCtxGetState", 7000, FN(cuDevicePrimaryCtxGetState), nullptr},
    {"cuCtxCreate", 3020, FN(cuCtxCreate_v2), nullptr},
    {"cuCtxCreate", 11040, FN(cuCtxCreate_v3), nullptr},
    {"cuCtxCreate", 12050, FN(cuCtxCreate_v4), nullptr},
    {"cuCtxDestroy", 4000, FN(cuCtxDestroy_v2), nullptr},
    {"cuCtxGetCurrent", 4000, FN(cuCtxGetCurrent), nullptr},
    {"cuCtxSetCurrent", 4000, FN(cuCtxSetCurrent), nullptr},
    {"cuCtxPushCurrent", 4000, FN(cuCtxPushCurrent_v2), nullptr},
    {"cuCtxPopCurrent", 4000, FN(cuCtxPopCurrent_v2), nullptr},
    {"cuCtxGetDevice", 2000, FN(cuCtxGetDevice), nullptr},
    {"cuCtxGetDevice", 13000, FN(cuCtxGetDevice_v2), nullptr},
    {"cuCtxSynchronize", 2000, FN(cuCtxSynchronize), nullptr},
    {"cuCtxSynchronize", 13000, FN(cuCtxSynchronize_v2), nullptr},
    {"cuCtxRecordEvent", 12050, FN(cuCtxRecordEvent), nullptr},
    {"cuMemAlloc", 2000, FN(cuMemAlloc), nullptr},
    {"cuMemAlloc", 3020, FN(cuMemAlloc_v2), nullptr},
    {"cuMemFree", 2000, FN(cuMemFree), nullptr},
    {"cuMemFree", 3020, FN(cuMemFree_v2), nullptr},
    {"cuMemAllocPitch", 3020, FN(cuMemAllocPitch_v2), nullptr},
    {"cuMemGetInfo", 2000, FN(cuMemGetInfo), nullptr},
    {"cuMemGetInfo", 3020, FN(cuMemGetInfo_v2), nullptr},
    {"cuMemGetAddressRange", 2000, FN(cuMemGetAddressRange), nullptr},
    {"cuMemGetAddressRange", 3020, FN(cuMemGetAddressRange_v2), nullptr},
    {"cuPointerGetAttribute", 4000, FN(cuPointerGetAttribute), nullptr},
    {"cuMemAllocAsync", 11020, FN(cuMemAllocAsync), FN(cuMemAllocAsync_ptsz)},
    {"cuMemFreeAsync", 11020, FN(cuMemFreeAsync), FN(cuMemFreeAsync_ptsz)},
    {"cuMemsetD8", 3020, FN(cuMemsetD8_v2), FN(cuMemsetD8_v2_ptds)},
    {"cuMemsetD8Async", 3020, FN(cuMemsetD8Async), FN(cuMemsetD8Async_ptsz)},
    {"cuMemcpyHtoD", 3020, FN(cuMemcpyHtoD_v2), FN(cuMemcpyHtoD_v2_ptds)},
    {"cuMemcpyDtoH", 3020, FN(cuMemcpyDtoH_v2), FN(cuMemcpyDtoH_v2_ptds)},
    {"cuMemcpyDtoD", 3020, FN(cuMemcpyDtoD_v2), FN(cuMemcpyDtoD_v2_ptds)},
    {"cuMemcpyHtoDAsync", 3020, FN(cuMemcpyHtoDAsync_v2), FN(cuMemcpyHtoDAsync_v2_ptsz)},
    {"cuMemcpyDtoHAsync", 3020, FN(cuMemcpyDtoHAsync_v2), FN(cuMemcpyDtoHAsync_v2_ptsz)},
    {"cuMemcpyDtoDAsync", 3020, FN(cuMemcpyDtoDAsync_v2), FN(cuMemcpyDtoDAsync_v2_ptsz)},
    {"cuStreamCreate", 2000, FN(cuStreamCreate), nullptr},
    {"cuStreamCreateWithPriority", 5050, FN(cuStreamCreateWithPriority), nullptr},
    {"cuStreamDestroy", 2000, FN(cuStreamDestroy), nullptr},
    {"cuStreamDestroy", 4000, FN(cuStreamDestroy_v2), nullptr},
    {"cuStreamSynchronize", 2000, FN(cuStreamSynchronize), FN(cuStreamSynchronize_ptsz)},
    {"cuStreamQuery", 2000, FN(cuStreamQuery), FN(cuStreamQuery_ptsz)},
    {"cuStreamGetFlags", 5050, FN(cuStreamGetFlags), FN(cuStreamGetFlags_ptsz)},
    {"cuStreamWaitEvent", 3020, FN(cuStreamWaitEvent), FN(cuStreamWaitEvent_ptsz)},
    {"cuEventCreate", 2000, FN(cuEventCreate), nullptr},
    {"cuEventRecord", 2000, FN(cuEventRecord), FN(cuEventRecord_ptsz)},
    {"cuEventQuery", 2000, FN(cuEventQuery), nullptr},
    {"cuEventSynchronize", 2000, FN(cuEventSynchronize), nullptr},
    {"cuEventDestroy", 2000, FN(cuEventDestroy), nullptr},
    {"cuEventDestroy", 4000, FN(cuEventDestroy_v2), nullptr},
    {"cuDeviceGetName", 2000, FN(cuDeviceGetName), nullptr},
    {"cuDeviceGetAttribute", 2000, FN(cuDeviceGetAttribute), nullptr},
    {"cuDeviceCanAccessPeer", 4000, FN(cuDeviceCanAccessPeer), nullptr},
    {"cuDeviceGetUuid", 9020, FN(cuDeviceGetUuid), nullptr},
    {"cuDeviceGetUuid", 11040, FN(cuDeviceGetUuid_v2), nullptr},
    {"cuMemAllocHost", 3020, FN(cuMemAllocHost_v2), nullptr},
    {"cuMemHostAlloc", 2020, FN(cuMemHostAlloc), nullptr},
    {"cuMemFreeHost", 2000, FN(cuMemFreeHost), nullptr},
    {"cuMemHostGetDevicePointer", 3020, FN(cuMemHostGetDevicePointer_v2), nullptr},
    {"cuMemHostGetFlags", 2030, FN(cuMemHostGetFlags), nullptr},
    {"cuMemAllocManaged", 6000, FN(cuMemAllocManaged), nullptr},
    {"cuPointerGetAttributes", 7000, FN(cuPointerGetAttributes), nullptr},
    {"cuIpcGetMemHandle", 4010, FN(cuIpcGetMemHandle), nullptr},
    {"cuIpcOpenMemHandle", 4010, FN(cuIpcOpenMemHandle), nullptr},
    {"cuIpcOpenMemHandle", 11000, FN(cuIpcOpenMemHandle_v2), nullptr},
    {"cuIpcCloseMemHandle", 4010, FN(cuIpcCloseMemHandle), nullptr},
    {"cuStreamBeginCapture", 10000, FN(cuStreamBeginCapture), FN(cuStreamBeginCapture_ptsz)},
    {"cuStreamBeginCapture", 10010, FN(cuStreamBeginCapture_v2),
     FN(cuStreamBeginCapture_v2_ptsz)},
    {"cuStreamBeginCaptureToGraph", 12030, FN(cuStreamBeginCaptureToGraph),
     FN(cuStreamBeginCaptureToGraph_ptsz)},
    {"cuStreamEndCapture", 10000, FN(cuStreamEndCapture), FN(cuStreamEndCapture_ptsz)},
    {"cuStreamIsCapturing", 10000, FN(cuStreamIsCapturing), FN(cuStreamIsCapturing_ptsz)},
    {"cuStreamGetCaptureInfo", 10010, FN(cuStreamGetCaptureInfo),
     FN(cuStreamGetCaptureInfo_ptsz)},
    {"cuStreamGetCaptureInfo", 11030, FN(cuStreamGetCaptureInfo_v2),
     FN(cuStreamGetCaptureInfo_v2_ptsz)},
    {"cuStreamGetCaptureInfo", 12030, FN(cuStreamGetCaptureInfo_v3),
     FN(cuStreamGetCaptureInfo_v3_ptsz)},
    {"cuThreadExchangeStreamCaptureMode", 10010, FN(cuThreadExchangeStreamCaptureMode), nullptr},
    // CUDA 12 gave cuGraphInstantiate the signature of cuGraphInstantiateWithFlags; the
    // older (error node, log buffer) form is not imitated.
    {"cuGraphInstantiate", 12000, FN(cuGraphInstantiateWithFlags), nullptr},
    {"cuGraphInstantiateWithFlags", 11040, FN(cuGraphInstantiateWithFlags), nullptr},
    {"cuGraphLaunch", 10000, FN(cuGraphLaunch), FN(cuGraphLaunch_ptsz)},
    {"cuGraphExecDestroy", 10000, FN(cuGraphExecDestroy), nullptr},
    {"cuGraphCreate", 10000, FN(cuGraphCreate), nullptr},
    {"cuGraphDestroy", 10000, FN(cuGraphDestroy), nullptr},
    // Pools (fake_vmm.cpp): CUDA 11.2; virtual memory management: CUDA 10.2.
    {"cuDeviceGetDefaultMemPool", 11020, FN(cuDeviceGetDefaultMemPool), nullptr},
    {"cuMemPoolCreate", 11020, FN(cuMemPoolCreate), nullptr},
    {"cuMemPoolDestroy", 11020, FN(cuMemPoolDestroy), nullptr},
    {"cuMemAllocFromPoolAsync", 11020, FN(cuMemAllocFromPoolAsync),
     FN(cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemGetAllocationGranularity", 10020, FN(cuMemGetAllocationGranularity), nullptr},
    {"cuMemCreate", 10020, FN(cuMemCreate), nullptr},
    {"cuMemRelease", 10020, FN(cuMemRelease), nullptr},
    {"cuMemAddressReserve", 10020, FN(cuMemAddressReserve), nullptr},
    {"cuMemAddressFree", 10020, FN(cuMemAddressFree), nullptr},
    {"cuMemMap", 10020, FN(cuMemMap), nullptr},
    {"cuMemUnmap", 10020, FN(cuMemUnmap), nullptr},
    {"cuMemSetAccess", 10020, FN(cuMemSetAccess), nullptr},
    {"cuMemGetAccess", 10020, FN(cuMemGetAccess), nullptr},
    {"cuGetErrorString", 6000, FN(cuGetErrorString), nullptr},
    {"cuGetErrorName", 6000, FN(cuGetErrorName), nullptr},
    {"cuGetProcAddress", 11030, FN(cuGetProcAddress), nullptr},
    {"cuGetProcAddress", 12000, FN(cuGetProcAddress_v2), nullptr},
};

#undef FN

CUresult lookup(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  auto set_status = [&](CUdriverProcAddressQueryResult s) {
    if (status != nullptr) *status = s;
  };
  if (pfn == nullptr || symbol == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const int driver_version = state().settings.driver_version.load();
  if (cuda_version > driver_version) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const Entry* best = nullptr;
  bool found_name = false;
  for (const Entry& e : kEntries) {
    if (e.version > driver_version || std::strcmp(e.name, symbol) != 0) continue;
    found_name = true;
    if (e.version <= cuda_version && (best == nullptr || e.version > best->version)) best = &e;
  }
  if (!found_name) {
    set_status(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return CUDA_ERROR_NOT_FOUND;
  }
  if (best == nullptr) {
    set_status(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    return CUDA_ERROR_NOT_FOUND;
  }
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  *pfn = per_thread && best->per_thread != nullptr ? best->per_thread : best->fn;
  set_status(CU_GET_PROC_ADDRESS_SUCCESS);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace luma::fake

extern "C" {

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return luma::fake::lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                             cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  return luma::fake::lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

}  // extern "C"
