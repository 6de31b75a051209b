// cuda_abi.h - the slice of the CUDA driver ABI (CUDA 13.0, cuda.h) that luma interposes
// or calls, declared here so that libluma.so and the stand-in driver build without a
// toolkit. Values and signatures are the driver's; never change one without checking
// cuda.h. Shared by shim/ and tests/fake/ only.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int CUresult;  // enum cudaError_enum
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;  // CUdeviceptr_v2 (64-bit since the _v2 ABI, 3020)
typedef unsigned long long cuuint64_t;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef int CUpointer_attribute;
typedef int CUdriverProcAddressQueryResult;

// CUresult values.
enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};

// cuGetProcAddress flags (CUdriverProcAddress_flags).
enum : unsigned long long {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1ULL << 0,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1ULL << 1,
};

// CUdriverProcAddressQueryResult values.
enum : CUdriverProcAddressQueryResult {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

// Stream and event flags.
enum : unsigned {
  CU_STREAM_DEFAULT = 0x0,
  CU_STREAM_NON_BLOCKING = 0x1,
  CU_EVENT_DEFAULT = 0x0,
  CU_EVENT_BLOCKING_SYNC = 0x1,
  CU_EVENT_DISABLE_TIMING = 0x2,
};

// Pointer attributes luma answers for its blocks (CUpointer_attribute).
enum : CUpointer_attribute {
  CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
  CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
  CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
};

// Special stream handles (cuda.h).
#define LUMA_CU_STREAM_LEGACY ((CUstream)0x1)
#define LUMA_CU_STREAM_PER_THREAD ((CUstream)0x2)

// ABI versions at which the runtime asks for each entry point (cudaVersion argument of
// cuGetProcAddress): the _v2 ABIs of memory calls appeared in CUDA 3.2 (3020).
inline constexpr int kCudaVersionV2Memory = 3020;
inline constexpr int kCudaVersionGetProcAddressV2 = 12000;
inline constexpr int kCudaVersionCtxV2 = 13000;  // cuCtxGetDevice_v2 / cuCtxSynchronize_v2

// Signatures of the entry points luma interposes or calls (PFN_* in cudaTypedefs.h).
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char* symbol, void** pfn, int cudaVersion,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* symbolStatus);
typedef CUresult (*PFN_cuGetProcAddress_v1)(const char* symbol, void** pfn, int cudaVersion,
                                            cuuint64_t flags);
typedef CUresult (*PFN_cuInit)(unsigned int flags);
typedef CUresult (*PFN_cuDriverGetVersion)(int* version);
typedef CUresult (*PFN_cuDeviceGetCount)(int* count);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice* device, int ordinal);
typedef CUresult (*PFN_cuDeviceGetName)(char* name, int len, CUdevice dev);
typedef CUresult (*PFN_cuDeviceTotalMem_v2)(size_t* bytes, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease_v2)(CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxReset_v2)(CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int* flags, int* active);
typedef CUresult (*PFN_cuCtxCreate_v2)(CUcontext* ctx, unsigned int flags, CUdevice dev);  // 3020 ABI
typedef CUresult (*PFN_cuCtxDestroy_v2)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext* ctx);
typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxPushCurrent_v2)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxPopCurrent_v2)(CUcontext* ctx);
typedef CUresult (*PFN_cuCtxGetDevice)(CUdevice* device);  // 2000 ABI
typedef CUresult (*PFN_cuCtxSynchronize)(void);            // 2000 ABI
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr* dptr, size_t bytesize);
typedef CUresult (*PFN_cuMemAlloc_v1)(unsigned int* dptr, unsigned int bytesize);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr dptr);
typedef CUresult (*PFN_cuMemAllocPitch_v2)(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                           size_t height, unsigned int elementSize);
typedef CUresult (*PFN_cuMemGetInfo_v2)(size_t* free, size_t* total);
typedef CUresult (*PFN_cuMemGetAddressRange_v2)(CUdeviceptr* base, size_t* size,
                                                CUdeviceptr dptr);
typedef CUresult (*PFN_cuPointerGetAttribute)(void* data, CUpointer_attribute attribute,
                                              CUdeviceptr ptr);
typedef CUresult (*PFN_cuMemAllocAsync)(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
typedef CUresult (*PFN_cuMemFreeAsync)(CUdeviceptr dptr, CUstream stream);
typedef CUresult (*PFN_cuStreamCreate)(CUstream* stream, unsigned int flags);
typedef CUresult (*PFN_cuStreamCreateWithPriority)(CUstream* stream, unsigned int flags,
                                                   int priority);
typedef CUresult (*PFN_cuStreamDestroy_v2)(CUstream stream);
typedef CUresult (*PFN_cuStreamSynchronize)(CUstream stream);
typedef CUresult (*PFN_cuStreamGetFlags)(CUstream stream, unsigned int* flags);
typedef CUresult (*PFN_cuEventCreate)(CUevent* event, unsigned int flags);
typedef CUresult (*PFN_cuEventRecord)(CUevent event, CUstream stream);
typedef CUresult (*PFN_cuEventQuery)(CUevent event);
typedef CUresult (*PFN_cuEventSynchronize)(CUevent event);
typedef CUresult (*PFN_cuEventDestroy_v2)(CUevent event);
typedef CUresult (*PFN_cuMemsetD8_v2)(CUdeviceptr dst, unsigned char value, size_t n);
typedef CUresult (*PFN_cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n,
                                        CUstream stream);
typedef CUresult (*PFN_cuMemcpyHtoD_v2)(CUdeviceptr dst, const void* src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyDtoH_v2)(void* dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyHtoDAsync_v2)(CUdeviceptr dst, const void* src, size_t bytes,
                                             CUstream stream);
typedef CUresult (*PFN_cuMemcpyDtoHAsync_v2)(void* dst, CUdeviceptr src, size_t bytes,
                                             CUstream stream);
typedef CUresult (*PFN_cuGetErrorString)(CUresult error, const char** str);

}  // extern "C"

// Appended for the stand-in driver and runtime (tests/fake): CUDA 13 forms of the context
// calls (same base names, new signatures at 13000), device-to-device copies, memory type.
extern "C" {
typedef CUresult (*PFN_cuCtxGetDevice_v2)(CUdevice* device, CUcontext ctx);  // 13000 ABI
typedef CUresult (*PFN_cuCtxSynchronize_v2)(CUcontext ctx);                  // 13000 ABI
typedef CUresult (*PFN_cuMemcpyDtoD_v2)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyDtoDAsync_v2)(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                             CUstream stream);
enum : unsigned { CU_MEMORYTYPE_HOST = 0x1, CU_MEMORYTYPE_DEVICE = 0x2 };  // CUmemorytype
}  // extern "C"
