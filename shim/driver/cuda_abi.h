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
  CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY = 224,
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
// cuCtxCreate's later ABIs take parameter blocks luma only passes on (cudaTypedefs.h:
// PFN_cuCtxCreate_v11040 with CUexecAffinityParam*, PFN_cuCtxCreate_v12050 with
// CUctxCreateParams*).
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCreateParams_st CUctxCreateParams;
typedef CUresult (*PFN_cuCtxCreate_v3)(CUcontext* ctx, CUexecAffinityParam* params, int count,
                                       unsigned int flags, CUdevice dev);  // 11040 ABI
typedef CUresult (*PFN_cuCtxCreate_v4)(CUcontext* ctx, CUctxCreateParams* params,
                                       unsigned int flags, CUdevice dev);  // 12050 ABI
typedef CUresult (*PFN_cuCtxAttach)(CUcontext* ctx, unsigned int flags);   // 2000 ABI
typedef struct CUgreenCtx_st* CUgreenCtx;
typedef CUresult (*PFN_cuGreenCtxStreamCreate)(CUstream* stream, CUgreenCtx green, unsigned int flags,
                                              int priority);  // 12050 ABI
typedef CUresult (*PFN_cuCtxDetach)(CUcontext ctx);                        // 2000 ABI
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
typedef CUresult (*PFN_cuStreamQuery)(CUstream stream);
typedef CUresult (*PFN_cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned int flags);
typedef CUresult (*PFN_cuEventCreate)(CUevent* event, unsigned int flags);
typedef CUresult (*PFN_cuEventRecord)(CUevent event, CUstream stream);
typedef CUresult (*PFN_cuEventQuery)(CUevent event);
typedef CUresult (*PFN_cuEventSynchronize)(CUevent event);
typedef CUresult (*PFN_cuEventDestroy_v2)(CUevent event);
typedef CUresult (*PFN_cuCtxRecordEvent)(CUcontext hCtx, CUevent hEvent);  // 12050 ABI
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

// Appended for the stand-in driver's IPC, pointer, stream-capture, graph, device-query and
// host/managed-memory entry points. Names, values and signatures are cuda.h's
// (CUDA 13.0); the PFN_* names carry no version suffix, the comment says which ABI.
extern "C" {
typedef int CUdevice_attribute;   // enum CUdevice_attribute_enum
typedef int CUstreamCaptureMode;  // enum CUstreamCaptureMode_enum
typedef int CUstreamCaptureStatus;  // enum CUstreamCaptureStatus_enum
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUgraphEdgeData_st {
  unsigned char from_port;
  unsigned char to_port;
  unsigned char type;
  unsigned char reserved[5];
} CUgraphEdgeData;

#define CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
  char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;

// CUresult values of these areas.
enum : CUresult {
  CUDA_ERROR_MAP_FAILED = 205,
  CUDA_ERROR_ALREADY_MAPPED = 208,
  CUDA_ERROR_NOT_MAPPED = 211,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_STREAM_CAPTURE_MERGE = 902,
  CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
  CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
  CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
  CUDA_ERROR_CAPTURED_EVENT = 907,
  CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
};

// CUipcMem_flags.
enum : unsigned { CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1 };

// CUmemAttach_flags (cuMemAllocManaged).
enum : unsigned { CU_MEM_ATTACH_GLOBAL = 0x1, CU_MEM_ATTACH_HOST = 0x2, CU_MEM_ATTACH_SINGLE = 0x4 };

// cuMemHostAlloc flags.
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04

// CUmemorytype values beyond HOST and DEVICE.
enum : unsigned { CU_MEMORYTYPE_ARRAY = 0x3, CU_MEMORYTYPE_UNIFIED = 0x4 };

// The other CUpointer_attribute values.
enum : CUpointer_attribute {
  CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
  CU_POINTER_ATTRIBUTE_P2P_TOKENS = 5,
  CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6,
  CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
  CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10,
  CU_POINTER_ATTRIBUTE_MAPPED = 13,
  CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES = 14,
  CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE = 15,
  CU_POINTER_ATTRIBUTE_ACCESS_FLAGS = 16,
  CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17,
  CU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18,
  CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19,
  CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID = 20,
  CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE = 21,
};

// CUstreamCaptureStatus and CUstreamCaptureMode.
enum : CUstreamCaptureStatus {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};
enum : CUstreamCaptureMode {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

// The CUdevice_attribute values the stand-in answers (cuda.h numbering).
enum : CUdevice_attribute {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11,
  CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
  CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
  CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT = 14,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT = 17,
  CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
  CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
  CU_DEVICE_ATTRIBUTE_COMPUTE_MODE = 20,
  CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31,
  CU_DEVICE_ATTRIBUTE_ECC_ENABLED = 32,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  CU_DEVICE_ATTRIBUTE_TCC_DRIVER = 35,
  CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
  CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
  CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
  CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
  CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD = 84,
  CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS = 88,
  CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89,
  CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
  CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
  CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110,
  CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
  CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED = 125,
  CU_DEVICE_ATTRIBUTE_MAX = 148,  // one past the last attribute of CUDA 13.0
};

// IPC (cuIpcOpenMemHandle resolves to cuIpcOpenMemHandle_v2 since 11000; same signature).
typedef CUresult (*PFN_cuIpcGetMemHandle)(CUipcMemHandle* pHandle, CUdeviceptr dptr);  // 4010
typedef CUresult (*PFN_cuIpcOpenMemHandle_v2)(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                              unsigned int Flags);  // 11000
typedef CUresult (*PFN_cuIpcCloseMemHandle)(CUdeviceptr dptr);     // 4010
// Pointer queries.
typedef CUresult (*PFN_cuPointerGetAttributes)(unsigned int numAttributes,
                                               CUpointer_attribute* attributes, void** data,
                                               CUdeviceptr ptr);  // 7000
// Stream capture and graphs (cuStreamBeginCapture -> _v2 at 10010, cuStreamGetCaptureInfo ->
// _v3 at 12030, cuGraphInstantiate -> cuGraphInstantiateWithFlags at 12000).
typedef CUresult (*PFN_cuStreamBeginCapture_v2)(CUstream hStream, CUstreamCaptureMode mode);
typedef CUresult (*PFN_cuStreamBeginCapture_v1)(CUstream hStream);  // 10000: global mode
typedef CUresult (*PFN_cuStreamBeginCaptureToGraph)(CUstream hStream, CUgraph hGraph,
                                                    const CUgraphNode* dependencies,
                                                    const CUgraphEdgeData* dependencyData,
                                                    size_t numDependencies,
                                                    CUstreamCaptureMode mode);  // 12030
typedef CUresult (*PFN_cuStreamEndCapture)(CUstream hStream, CUgraph* phGraph);  // 10000
typedef CUresult (*PFN_cuStreamIsCapturing)(CUstream hStream,
                                            CUstreamCaptureStatus* captureStatus);  // 10000
typedef CUresult (*PFN_cuStreamGetCaptureInfo_v3)(CUstream hStream,
                                                  CUstreamCaptureStatus* captureStatus_out,
                                                  cuuint64_t* id_out, CUgraph* graph_out,
                                                  const CUgraphNode** dependencies_out,
                                                  const CUgraphEdgeData** edgeData_out,
                                                  size_t* numDependencies_out);  // 12030
typedef CUresult (*PFN_cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode* mode);  // 10010
typedef CUresult (*PFN_cuGraphInstantiateWithFlags)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                    unsigned long long flags);  // 11040
typedef CUresult (*PFN_cuGraphLaunch)(CUgraphExec hGraphExec, CUstream hStream);  // 10000
typedef CUresult (*PFN_cuGraphExecDestroy)(CUgraphExec hGraphExec);               // 10000
typedef CUresult (*PFN_cuGraphDestroy)(CUgraph hGraph);                           // 10000
// Device queries.
typedef CUresult (*PFN_cuDeviceGetAttribute)(int* pi, CUdevice_attribute attrib,
                                             CUdevice dev);              // 2000
typedef CUresult (*PFN_cuDeviceGetUuid_v2)(CUuuid* uuid, CUdevice dev);  // 11040
typedef CUresult (*PFN_cuDeviceCanAccessPeer)(int* canAccessPeer, CUdevice dev,
                                              CUdevice peerDev);  // 4000
// Host and managed memory.
typedef CUresult (*PFN_cuMemAllocHost_v2)(void** pp, size_t bytesize);  // 3020
typedef CUresult (*PFN_cuMemHostAlloc)(void** pp, size_t bytesize, unsigned int Flags);  // 2020
typedef CUresult (*PFN_cuMemFreeHost)(void* p);                                         // 2000
typedef CUresult (*PFN_cuMemHostGetDevicePointer_v2)(CUdeviceptr* pdptr, void* p,
                                                     unsigned int Flags);  // 3020
typedef CUresult (*PFN_cuMemAllocManaged)(CUdeviceptr* dptr, size_t bytesize,
                                          unsigned int flags);  // 6000
}  // extern "C"

// Stream-ordered memory pools (CUDA 11.2) and the virtual memory management calls (CUDA
// 10.2), which luma forwards and counts (shim/observe/forwarded_paths.h) and the stand-in driver
// imitates (tests/fake/fake_vmm.cpp). Names, values, layouts and signatures are cuda.h's
// (CUDA 13.0); the comment after each PFN_* says which ABI (first cudaVersion).
extern "C" {
typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;  // CUmemGenericAllocationHandle_v1
typedef int CUmemAllocationType;        // enum CUmemAllocationType_enum
typedef int CUmemAllocationHandleType;  // enum CUmemAllocationHandleType_enum
typedef int CUmemLocationType;          // enum CUmemLocationType_enum
typedef int CUmemAllocationGranularity_flags;
typedef int CUmemAccess_flags;

enum : CUmemAllocationType { CU_MEM_ALLOCATION_TYPE_INVALID = 0, CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
enum : CUmemAllocationHandleType {
  CU_MEM_HANDLE_TYPE_NONE = 0,
  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
};
enum : CUmemLocationType {
  CU_MEM_LOCATION_TYPE_INVALID = 0,
  CU_MEM_LOCATION_TYPE_DEVICE = 1,
  CU_MEM_LOCATION_TYPE_HOST = 2,
};
enum : CUmemAllocationGranularity_flags {
  CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
  CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
};
enum : CUmemAccess_flags {
  CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
  CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
  CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
};
enum : CUresult { CUDA_ERROR_NOT_PERMITTED = 800 };

typedef struct CUmemLocation_st {
  CUmemLocationType type;
  int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
  CUmemLocation location;
  CUmemAccess_flags flags;
} CUmemAccessDesc;

typedef struct CUmemPoolProps_st {
  CUmemAllocationType allocType;
  CUmemAllocationHandleType handleTypes;
  CUmemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;
static_assert(sizeof(CUmemAllocationProp) == 32, "cuda.h's CUmemAllocationProp layout");
static_assert(sizeof(CUmemPoolProps) == 88, "cuda.h's CUmemPoolProps layout");

// Pools (11020; cuMemAllocFromPoolAsync has a _ptsz twin).
typedef CUresult (*PFN_cuMemPoolCreate)(CUmemoryPool* pool, const CUmemPoolProps* poolProps);
typedef CUresult (*PFN_cuMemPoolDestroy)(CUmemoryPool pool);
typedef CUresult (*PFN_cuDeviceGetDefaultMemPool)(CUmemoryPool* pool_out, CUdevice dev);
typedef CUresult (*PFN_cuMemAllocFromPoolAsync)(CUdeviceptr* dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream);
// Virtual memory management (10020).
typedef CUresult (*PFN_cuMemGetAllocationGranularity)(size_t* granularity,
                                                      const CUmemAllocationProp* prop,
                                                      CUmemAllocationGranularity_flags option);
typedef CUresult (*PFN_cuMemCreate)(CUmemGenericAllocationHandle* handle, size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags);
typedef CUresult (*PFN_cuMemRelease)(CUmemGenericAllocationHandle handle);
typedef CUresult (*PFN_cuMemAddressReserve)(CUdeviceptr* ptr, size_t size, size_t alignment,
                                            CUdeviceptr addr, unsigned long long flags);
typedef CUresult (*PFN_cuMemAddressFree)(CUdeviceptr ptr, size_t size);
typedef CUresult (*PFN_cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle, unsigned long long flags);
typedef CUresult (*PFN_cuMemUnmap)(CUdeviceptr ptr, size_t size);
typedef CUresult (*PFN_cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                       size_t count);
}  // extern "C"
