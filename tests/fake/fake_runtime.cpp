// fake_runtime.cpp - the stand-in CUDA runtime (a TEST DOUBLE for libcudart.so.13 and for
// nvcc's default static runtime). It reaches the driver exactly as the real runtime does:
// dlopen("libcuda.so.1", RTLD_NOW), one dlsym(handle, "cuGetProcAddress_v2"), the real
// runtime's probes, then every entry point through the cuGetProcAddress it was handed, with
// the cudaVersion of the ABI it was written against. Lazy, thread-safe initialisation on the
// first call; per-thread current device with the device's primary context made current;
// teardown registered with atexit at initialisation, after which calls return
// cudaErrorCudartUnloading. It never calls a driver function by its exported name.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "driver/cuda_abi.h"
#include "fake_cuda_runtime.h"

namespace luma::fake_rt {
namespace {

inline constexpr int kRuntimeVersion = 13000;
inline constexpr int kMaxDevices = 64;

struct Driver {
  PFN_cuGetProcAddress_v2 get_proc = nullptr;
  PFN_cuInit init = nullptr;
  PFN_cuDriverGetVersion driver_get_version = nullptr;
  PFN_cuDeviceGetCount device_get_count = nullptr;
  PFN_cuDeviceGet device_get = nullptr;
  PFN_cuDevicePrimaryCtxRetain primary_ctx_retain = nullptr;
  PFN_cuDevicePrimaryCtxReset_v2 primary_ctx_reset = nullptr;
  PFN_cuCtxGetCurrent ctx_get_current = nullptr;
  PFN_cuCtxSetCurrent ctx_set_current = nullptr;
  PFN_cuCtxGetDevice ctx_get_device = nullptr;            // 2000 ABI
  PFN_cuCtxGetDevice_v2 ctx_get_device_v2 = nullptr;      // 13000 ABI
  PFN_cuCtxSynchronize ctx_synchronize = nullptr;         // 2000 ABI
  PFN_cuCtxSynchronize_v2 ctx_synchronize_v2 = nullptr;   // 13000 ABI
  PFN_cuMemAlloc_v2 mem_alloc = nullptr;
  PFN_cuMemFree_v2 mem_free = nullptr;
  PFN_cuMemGetInfo_v2 mem_get_info = nullptr;
  PFN_cuMemGetAddressRange_v2 mem_get_address_range = nullptr;
  PFN_cuPointerGetAttribute pointer_get_attribute = nullptr;
  PFN_cuMemAllocAsync mem_alloc_async = nullptr;
  PFN_cuMemAllocAsync mem_alloc_async_ptsz = nullptr;
  PFN_cuMemFreeAsync mem_free_async = nullptr;
  PFN_cuMemFreeAsync mem_free_async_ptsz = nullptr;
  PFN_cuMemsetD8_v2 memset_d8 = nullptr;
  PFN_cuMemsetD8Async memset_d8_async = nullptr;
  PFN_cuMemcpyHtoD_v2 memcpy_htod = nullptr;
  PFN_cuMemcpyDtoH_v2 memcpy_dtoh = nullptr;
  PFN_cuMemcpyDtoD_v2 memcpy_dtod = nullptr;
  PFN_cuMemcpyHtoDAsync_v2 memcpy_htod_async = nullptr;
  PFN_cuMemcpyDtoHAsync_v2 memcpy_dtoh_async = nullptr;
  PFN_cuMemcpyDtoDAsync_v2 memcpy_dtod_async = nullptr;
  PFN_cuStreamCreate stream_create = nullptr;
  PFN_cuStreamDestroy_v2 stream_destroy = nullptr;
  PFN_cuStreamSynchronize stream_synchronize = nullptr;
  PFN_cuEventCreate event_create = nullptr;
  PFN_cuEventRecord event_record = nullptr;
  PFN_cuEventSynchronize event_synchronize = nullptr;
  PFN_cuEventDestroy_v2 event_destroy = nullptr;
};

Driver g_drv;
std::once_flag g_init_once;
cudaError_t g_init_error = cudaSuccess;
int g_device_count = 0;
CUcontext g_primary[kMaxDevices] = {};
std::once_flag g_primary_once[kMaxDevices];
std::atomic<bool> g_unloading{false};

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t from_driver(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    default: return cudaErrorUnknown;
  }
}

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

cudaError_t record(CUresult r) { return record(from_driver(r)); }

template <class F>
void resolve(F& out, const char* name, int version, cuuint64_t flags = 0) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  if (g_drv.get_proc(name, &fn, version, flags, &status) != CUDA_SUCCESS ||
      status != CU_GET_PROC_ADDRESS_SUCCESS) {
    fn = nullptr;
  }
  out = reinterpret_cast<F>(fn);
}

void teardown() { g_unloading = true; }

void initialise() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    g_init_error = cudaErrorInsufficientDriver;
    return;
  }
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v2>(dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) {
    g_init_error = cudaErrorInsufficientDriver;
    return;
  }
  g_drv.get_proc = gpa;
  // The real runtime's first probes, in its order; from here on it resolves through the
  // cuGetProcAddress the driver returned for 12000 (a preloaded library may hand out its own).
  void* probe = nullptr;
  CUdriverProcAddressQueryResult status;
  gpa("", &probe, 0, 0, &status);
  gpa("cuInit", &probe, 2000, 0, &status);
  gpa("cuGetProcAddress", &probe, 11030, 0, &status);
  probe = nullptr;
  if (gpa("cuGetProcAddress", &probe, kCudaVersionGetProcAddressV2, 0, &status) ==
          CUDA_SUCCESS &&
      probe != nullptr) {
    g_drv.get_proc = reinterpret_cast<PFN_cuGetProcAddress_v2>(probe);
  }
  Driver& d = g_drv;
  resolve(d.init, "cuInit", 2000);
  resolve(d.driver_get_version, "cuDriverGetVersion", 2020);
  resolve(d.device_get_count, "cuDeviceGetCount", 2000);
  resolve(d.device_get, "cuDeviceGet", 2000);
  resolve(d.primary_ctx_retain, "cuDevicePrimaryCtxRetain", 7000);
  resolve(d.primary_ctx_reset, "cuDevicePrimaryCtxReset", 11000);
  resolve(d.ctx_get_current, "cuCtxGetCurrent", 4000);
  resolve(d.ctx_set_current, "cuCtxSetCurrent", 4000);
  resolve(d.ctx_get_device, "cuCtxGetDevice", 2000);
  resolve(d.ctx_get_device_v2, "cuCtxGetDevice", kCudaVersionCtxV2);
  resolve(d.ctx_synchronize, "cuCtxSynchronize", 2000);
  resolve(d.ctx_synchronize_v2, "cuCtxSynchronize", kCudaVersionCtxV2);
  resolve(d.mem_alloc, "cuMemAlloc", kCudaVersionV2Memory);
  resolve(d.mem_free, "cuMemFree", kCudaVersionV2Memory);
  resolve(d.mem_get_info, "cuMemGetInfo", kCudaVersionV2Memory);
  resolve(d.mem_get_address_range, "cuMemGetAddressRange", kCudaVersionV2Memory);
  resolve(d.pointer_get_attribute, "cuPointerGetAttribute", 4000);
  resolve(d.mem_alloc_async, "cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_DEFAULT);
  resolve(d.mem_alloc_async_ptsz, "cuMemAllocAsync", 11020,
          CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  resolve(d.mem_free_async, "cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_DEFAULT);
  resolve(d.mem_free_async_ptsz, "cuMemFreeAsync", 11020,
          CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  resolve(d.memset_d8, "cuMemsetD8", kCudaVersionV2Memory);
  resolve(d.memset_d8_async, "cuMemsetD8Async", kCudaVersionV2Memory);
  resolve(d.memcpy_htod, "cuMemcpyHtoD", kCudaVersionV2Memory);
  resolve(d.memcpy_dtoh, "cuMemcpyDtoH", kCudaVersionV2Memory);
  resolve(d.memcpy_dtod, "cuMemcpyDtoD", kCudaVersionV2Memory);
  resolve(d.memcpy_htod_async, "cuMemcpyHtoDAsync", kCudaVersionV2Memory);
  resolve(d.memcpy_dtoh_async, "cuMemcpyDtoHAsync", kCudaVersionV2Memory);
  resolve(d.memcpy_dtod_async, "cuMemcpyDtoDAsync", kCudaVersionV2Memory);
  resolve(d.stream_create, "cuStreamCreate", 2000);
  resolve(d.stream_destroy, "cuStreamDestroy", 4000);
  resolve(d.stream_synchronize, "cuStreamSynchronize", 2000);
  resolve(d.event_create, "cuEventCreate", 2000);
  resolve(d.event_record, "cuEventRecord", 2000);
  resolve(d.event_synchronize, "cuEventSynchronize", 2000);
  resolve(d.event_destroy, "cuEventDestroy", 4000);
  if (d.init == nullptr || d.device_get_count == nullptr || d.primary_ctx_retain == nullptr ||
      d.ctx_get_current == nullptr || d.ctx_set_current == nullptr || d.mem_alloc == nullptr ||
      d.mem_free == nullptr) {
    g_init_error = cudaErrorInsufficientDriver;
    return;
  }
  if (CUresult r = d.init(0); r != CUDA_SUCCESS) {
    g_init_error = from_driver(r);
    return;
  }
  int count = 0;
  if (d.device_get_count(&count) != CUDA_SUCCESS || count <= 0) {
    g_init_error = cudaErrorNoDevice;
    return;
  }
  g_device_count = count < kMaxDevices ? count : kMaxDevices;
  std::atexit(teardown);
}

// Brings the runtime up (once, from whichever thread comes first).
cudaError_t start() {
  if (g_unloading.load()) return cudaErrorCudartUnloading;
  std::call_once(g_init_once, initialise);
  return g_init_error;
}

cudaError_t primary_context(int device, CUcontext* out) {
  std::call_once(g_primary_once[device], [device] {
    CUdevice dev = 0;
    if (g_drv.device_get != nullptr && g_drv.device_get(&dev, device) == CUDA_SUCCESS) {
      g_drv.primary_ctx_retain(&g_primary[device], dev);
    }
  });
  *out = g_primary[device];
  return *out == nullptr ? cudaErrorDeviceUninitialized : cudaSuccess;
}

// start() plus a current context: the primary context of this thread's device unless the
// program made another context current itself.
cudaError_t enter() {
  if (cudaError_t e = start()) return e;
  CUcontext cur = nullptr;
  if (g_drv.ctx_get_current(&cur) != CUDA_SUCCESS) return cudaErrorInitializationError;
  if (cur != nullptr) return cudaSuccess;
  CUcontext ctx = nullptr;
  if (cudaError_t e = primary_context(t_device, &ctx)) return e;
  return from_driver(g_drv.ctx_set_current(ctx));
}

#define LUMA_RT_ENTER()                         \
  do {                                          \
    if (cudaError_t e_ = enter()) return record(e_); \
  } while (0)

template <class F>
cudaError_t call(F* fn) {
  return fn == nullptr ? record(cudaErrorNotSupported) : cudaSuccess;
}

bool is_device(const void* p) {
  if (g_drv.pointer_get_attribute == nullptr) return false;
  unsigned type = 0;
  return g_drv.pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                     reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS &&
         type == CU_MEMORYTYPE_DEVICE;
}

cudaMemcpyKind infer(const void* dst, const void* src) {
  bool d = is_device(dst), s = is_device(src);
  if (d && s) return cudaMemcpyDeviceToDevice;
  if (d) return cudaMemcpyHostToDevice;
  if (s) return cudaMemcpyDeviceToHost;
  return cudaMemcpyHostToHost;
}

CUdeviceptr dev(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};

const ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer",
     "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized",
     "invalid device context"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle",
     "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* find_error(cudaError_t e) {
  for (const ErrorText& t : kErrors) {
    if (t.code == e) return &t;
  }
  return nullptr;
}

}  // namespace
}  // namespace luma::fake_rt

using namespace luma::fake_rt;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  LUMA_RT_ENTER();
  if (devPtr == nullptr) return record(cudaErrorInvalidValue);
  if (size == 0) {  // the real runtime succeeds with a null pointer
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  CUresult r = g_drv.mem_alloc(&p, size);
  *devPtr = r == CUDA_SUCCESS ? reinterpret_cast<void*>(p) : nullptr;
  return record(r);
}

cudaError_t cudaFree(void* devPtr) {
  LUMA_RT_ENTER();
  if (devPtr == nullptr) return cudaSuccess;
  return record(g_drv.mem_free(dev(devPtr)));
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  LUMA_RT_ENTER();
  if (cudaError_t e = call(g_drv.mem_alloc_async)) return e;
  if (devPtr == nullptr) return record(cudaErrorInvalidValue);
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  CUresult r = g_drv.mem_alloc_async(&p, size, stream);
  *devPtr = r == CUDA_SUCCESS ? reinterpret_cast<void*>(p) : nullptr;
  return record(r);
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  LUMA_RT_ENTER();
  if (cudaError_t e = call(g_drv.mem_free_async)) return e;
  if (devPtr == nullptr) return cudaSuccess;
  return record(g_drv.mem_free_async(dev(devPtr), stream));
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  LUMA_RT_ENTER();
  if (cudaError_t e = call(g_drv.mem_get_info)) return e;
  return record(g_drv.mem_get_info(free, total));
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  LUMA_RT_ENTER();
  if (cudaError_t e = call(g_drv.memset_d8)) return e;
  return record(g_drv.memset_d8(dev(devPtr), static_cast<unsigned char>(value), count));
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  LUMA_RT_ENTER();
  if (cudaError_t e = call(g_drv.memset_d8_async)) return e;
  return record(
      g_drv.memset_d8_async(dev(devPtr), static_cast<unsigned char>(value), count, stream));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  LUMA_RT_ENTER();
  if (kind == cudaMemcpyDefault) kind = infer(dst, src);
  switch (kind) {
    case cudaMemcpyHostToHost:
      if (g_drv.ctx_synchronize != nullptr) g_drv.ctx_synchronize();
      std::memmove(dst, src, count);
      return cudaSuccess;
    case cudaMemcpyHostToDevice:
      return record(g_drv.memcpy_htod(dev(dst), src, count));
    case cudaMemcpyDeviceToHost:
      return record(g_drv.memcpy_dtoh(dst, dev(src), count));
    case cudaMemcpyDeviceToDevice:
      return record(g_drv.memcpy_dtod(dev(dst), dev(src), count));
    default:
      return record(cudaErrorInvalidMemcpyDirection);
  }
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream) {
  LUMA_RT_ENTER();
  if (kind == cudaMemcpyDefault) kind = infer(dst, src);
  switch (kind) {
    case cudaMemcpyHostToHost:
      if (CUresult r = g_drv.stream_synchronize(stream)) return record(r);
      std::memmove(dst, src, count);
      return cudaSuccess;
    case cudaMemcpyHostToDevice:
      return record(g_drv.memcpy_htod_async(dev(dst), src, count, stream));
    case cudaMemcpyDeviceToHost:
      return record(g_drv.memcpy_dtoh_async(dst, dev(src), count, stream));
    case cudaMemcpyDeviceToDevice:
      return record(g_drv.memcpy_dtod_async(dev(dst), dev(src), count, stream));
    default:
      return record(cudaErrorInvalidMemcpyDirection);
  }
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  LUMA_RT_ENTER();
  if (pStream == nullptr) return record(cudaErrorInvalidValue);
  return record(g_drv.stream_create(pStream, flags));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  LUMA_RT_ENTER();
  return record(g_drv.stream_destroy(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  LUMA_RT_ENTER();
  return record(g_drv.stream_synchronize(stream));
}

cudaError_t cudaDeviceSynchronize(void) {
  LUMA_RT_ENTER();
  if (g_drv.ctx_synchronize_v2 != nullptr) return record(g_drv.ctx_synchronize_v2(nullptr));
  return record(g_drv.ctx_synchronize());
}

// The real runtime resets the current device's primary context (cuDevicePrimaryCtxReset_v2)
// and brings it back at the next call; the stand-in driver keeps its handle, so the
// runtime's cached primary context stays right.
cudaError_t cudaDeviceReset(void) {
  LUMA_RT_ENTER();
  if (g_drv.primary_ctx_reset == nullptr) return record(cudaErrorNotSupported);
  return record(g_drv.primary_ctx_reset(t_device));
}

cudaError_t cudaSetDevice(int device) {
  if (cudaError_t e = start()) return record(e);
  if (device < 0 || device >= g_device_count) return record(cudaErrorInvalidDevice);
  CUcontext ctx = nullptr;
  if (cudaError_t e = primary_context(device, &ctx)) return record(e);
  t_device = device;
  return record(g_drv.ctx_set_current(ctx));
}

cudaError_t cudaGetDevice(int* device) {
  LUMA_RT_ENTER();
  if (device == nullptr) return record(cudaErrorInvalidValue);
  CUdevice d = 0;
  CUresult r = g_drv.ctx_get_device_v2 != nullptr ? g_drv.ctx_get_device_v2(&d, nullptr)
                                                  : g_drv.ctx_get_device(&d);
  if (r == CUDA_SUCCESS) *device = d;
  return record(r);
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return record(cudaErrorInvalidValue);
  if (cudaError_t e = start()) {
    *count = 0;
    return record(e);
  }
  *count = g_device_count;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* t = find_error(error);
  return t == nullptr ? "unrecognized error code" : t->text;
}

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* t = find_error(error);
  return t == nullptr ? "cudaErrorUnknown" : t->name;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return record(cudaErrorInvalidValue);
  if (cudaError_t e = start()) return record(e);
  return record(g_drv.driver_get_version(driverVersion));
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (runtimeVersion == nullptr) return record(cudaErrorInvalidValue);
  *runtimeVersion = kRuntimeVersion;
  return cudaSuccess;
}

}  // extern "C"
