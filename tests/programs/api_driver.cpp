// api_driver.cpp - the workload's calls through the driver API, linked with -lcuda
// (prog_driver): cuInit, the primary context of each thread's device made current, then
// cuMemAlloc_v2 / cuMemFree_v2 / ... called through the PLT by their exported names.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "api.h"
#include "fake_driver_api.h"

namespace luma::programs {
namespace {

constexpr int kMaxDevices = 64;
std::once_flag g_once;
int g_count = 0;
CUcontext g_ctx[kMaxDevices] = {};
thread_local int t_device = 0;
thread_local CUcontext t_bound = nullptr;
thread_local CUcontext t_own = nullptr;  // a context this thread created (ctx_create), if any

// cuInit once, then this thread's device context current (a new thread has none).
CUresult ready() {
  static CUresult init_result = CUDA_SUCCESS;
  std::call_once(g_once, [] {
    init_result = cuInit(0);
    if (init_result != CUDA_SUCCESS) return;
    init_result = cuDeviceGetCount(&g_count);
    if (g_count > kMaxDevices) g_count = kMaxDevices;
    for (int d = 0; d < g_count && init_result == CUDA_SUCCESS; ++d) {
      CUdevice dev = 0;
      init_result = cuDeviceGet(&dev, d);
      if (init_result == CUDA_SUCCESS) init_result = cuDevicePrimaryCtxRetain(&g_ctx[d], dev);
    }
  });
  if (init_result != CUDA_SUCCESS) return init_result;
  CUcontext want = t_own != nullptr ? t_own : g_ctx[t_device];
  if (t_bound != want) {
    if (CUresult r = cuCtxSetCurrent(want)) return r;
    t_bound = want;
  }
  return CUDA_SUCCESS;
}

#define READY()                          \
  do {                                   \
    if (CUresult r_ = ready()) return r_; \
  } while (0)

CUdeviceptr dp(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
CUstream st(void* s) { return static_cast<CUstream>(s); }

// Pinned memory of this thread's device (cuMemCreate, cuMemGetAllocationGranularity).
CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = t_device;
  return prop;
}

const DriverCalls kDriverCalls = {
    [](void* h, const void* p) -> int {
      READY();
      CUipcMemHandle handle{};
      CUresult r = cuIpcGetMemHandle(&handle, dp(p));
      std::memcpy(h, &handle, sizeof handle);
      return r;
    },
    [](void** p, const void* h) -> int {
      READY();
      CUipcMemHandle handle{};
      std::memcpy(&handle, h, sizeof handle);
      CUdeviceptr d = 0;
      CUresult r = cuIpcOpenMemHandle_v2(&d, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      *p = reinterpret_cast<void*>(d);
      return r;
    },
    [](void* p) -> int {
      READY();
      return cuIpcCloseMemHandle(dp(p));
    },
    [](const void* p, unsigned long long* id) -> int {
      READY();
      return cuPointerGetAttribute(id, CU_POINTER_ATTRIBUTE_BUFFER_ID, dp(p));
    },
    [](void* d, const void* s, size_t n, void* stream) -> int {
      READY();
      return cuMemcpyDtoDAsync_v2(dp(d), dp(s), n, st(stream));
    },
    [](void* s, int mode) -> int {
      READY();
      return cuStreamBeginCapture_v2(st(s), static_cast<CUstreamCaptureMode>(mode));
    },
    [](void* s, void** graph) -> int {
      READY();
      CUgraph g = nullptr;
      CUresult r = cuStreamEndCapture(st(s), &g);
      *graph = g;
      return r;
    },
    [](int* mode) -> int {
      READY();
      auto m = static_cast<CUstreamCaptureMode>(*mode);
      CUresult r = cuThreadExchangeStreamCaptureMode(&m);
      *mode = static_cast<int>(m);
      return r;
    },
    [](void** exec, void* graph) -> int {
      READY();
      CUgraphExec e = nullptr;
      CUresult r = cuGraphInstantiateWithFlags(&e, static_cast<CUgraph>(graph), 0);
      *exec = e;
      return r;
    },
    [](void* exec, void* s) -> int {
      READY();
      return cuGraphLaunch(static_cast<CUgraphExec>(exec), st(s));
    },
    [](void* exec) -> int {
      READY();
      return cuGraphExecDestroy(static_cast<CUgraphExec>(exec));
    },
    [](void* graph) -> int {
      READY();
      return cuGraphDestroy(static_cast<CUgraph>(graph));
    },
    [](void** p, size_t n) -> int {
      READY();
      return cuMemAllocHost_v2(p, n);
    },
    [](void* p) -> int {
      READY();
      return cuMemFreeHost(p);
    },
    [](void** p, size_t n) -> int {
      READY();
      CUdeviceptr d = 0;
      CUresult r = cuMemAllocManaged(&d, n, CU_MEM_ATTACH_GLOBAL);
      *p = reinterpret_cast<void*>(d);
      return r;
    },
    [](void** pool) -> int {
      READY();
      CUmemPoolProps props{};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      props.location.id = t_device;
      CUmemoryPool m = nullptr;
      CUresult r = cuMemPoolCreate(&m, &props);
      *pool = m;
      return r;
    },
    [](void* pool) -> int {
      READY();
      return cuMemPoolDestroy(static_cast<CUmemoryPool>(pool));
    },
    [](void** p, size_t n, void* pool, void* stream) -> int {
      READY();
      CUdeviceptr d = 0;
      CUresult r = cuMemAllocFromPoolAsync(&d, n, static_cast<CUmemoryPool>(pool), st(stream));
      *p = reinterpret_cast<void*>(d);
      return r;
    },
    [](size_t* g) -> int {
      READY();
      const CUmemAllocationProp prop = device_prop();
      return cuMemGetAllocationGranularity(g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    },
    [](unsigned long long* h, size_t n) -> int {
      READY();
      const CUmemAllocationProp prop = device_prop();
      return cuMemCreate(h, n, &prop, 0);
    },
    [](unsigned long long h) -> int {
      READY();
      return cuMemRelease(h);
    },
    [](void** va, size_t n) -> int {
      READY();
      CUdeviceptr d = 0;
      CUresult r = cuMemAddressReserve(&d, n, 0, 0, 0);
      *va = reinterpret_cast<void*>(d);
      return r;
    },
    [](void* va, size_t n) -> int {
      READY();
      return cuMemAddressFree(dp(va), n);
    },
    [](void* va, size_t n, unsigned long long h) -> int {
      READY();
      return cuMemMap(dp(va), n, 0, h, 0);
    },
    [](void* va, size_t n) -> int {
      READY();
      return cuMemUnmap(dp(va), n);
    },
    [](void* va, size_t n) -> int {
      READY();
      CUmemAccessDesc access{};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = t_device;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      return cuMemSetAccess(dp(va), n, &access, 1);
    },
    [](const void* p, int device, unsigned long long* flags) -> int {
      READY();
      CUmemLocation where{CU_MEM_LOCATION_TYPE_DEVICE, device};
      return cuMemGetAccess(flags, &where, dp(p));
    },
    [](const void* p, void** start, size_t* size) -> int {
      READY();
      CUdeviceptr s = 0;
      if (CUresult r = cuPointerGetAttribute(&s, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dp(p))) return r;
      *start = reinterpret_cast<void*>(s);
      return cuPointerGetAttribute(size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dp(p));
    },
    [](const void* p, void** start, size_t* size, unsigned long long* id) -> int {
      READY();
      CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                     CU_POINTER_ATTRIBUTE_BUFFER_ID};
      CUdeviceptr s = 0;
      void* data[] = {&s, size, id};
      CUresult r = cuPointerGetAttributes(3, attrs, data, dp(p));
      *start = reinterpret_cast<void*>(s);
      return r;
    },
    [](void** graph) -> int {
      READY();
      CUgraph g = nullptr;
      CUresult r = cuGraphCreate(&g, 0);
      *graph = g;
      return r;
    },
    [](void* s, void* graph, int mode) -> int {
      READY();
      return cuStreamBeginCaptureToGraph(st(s), static_cast<CUgraph>(graph), nullptr, nullptr, 0,
                                         static_cast<CUstreamCaptureMode>(mode));
    },
};

const Api kApi = {
    "driver",
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_ERROR_INVALID_VALUE,
    false,
    [](int* c) -> int {
      READY();
      *c = g_count;
      return CUDA_SUCCESS;
    },
    [](int d) -> int {
      READY();
      if (d < 0 || d >= g_count) return CUDA_ERROR_INVALID_DEVICE;
      t_device = d;
      return ready();
    },
    [](void** p, size_t n) -> int {
      READY();
      CUdeviceptr d = 0;
      CUresult r = cuMemAlloc_v2(&d, n);
      *p = r == CUDA_SUCCESS ? reinterpret_cast<void*>(d) : nullptr;
      return r;
    },
    [](void* p) -> int {
      READY();
      return cuMemFree_v2(dp(p));
    },
    [](void** p, size_t n, void* s) -> int {
      READY();
      CUdeviceptr d = 0;
      CUresult r = cuMemAllocAsync(&d, n, st(s));
      *p = r == CUDA_SUCCESS ? reinterpret_cast<void*>(d) : nullptr;
      return r;
    },
    [](void* p, void* s) -> int {
      READY();
      return cuMemFreeAsync(dp(p), st(s));
    },
    [](void* p, int v, size_t n) -> int {
      READY();
      return cuMemsetD8_v2(dp(p), static_cast<unsigned char>(v), n);
    },
    [](void* p, int v, size_t n, void* s) -> int {
      READY();
      return cuMemsetD8Async(dp(p), static_cast<unsigned char>(v), n, st(s));
    },
    [](void* d, const void* s, size_t n) -> int {
      READY();
      return cuMemcpyHtoD_v2(dp(d), s, n);
    },
    [](void* d, const void* s, size_t n) -> int {
      READY();
      return cuMemcpyDtoH_v2(d, dp(s), n);
    },
    [](void* d, const void* s, size_t n, void* stream) -> int {
      READY();
      return cuMemcpyDtoHAsync_v2(d, dp(s), n, st(stream));
    },
    [](void** s, bool nb) -> int {
      READY();
      return cuStreamCreate(reinterpret_cast<CUstream*>(s),
                            nb ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT);
    },
    [](void* s) -> int {
      READY();
      return cuStreamDestroy_v2(st(s));
    },
    [](void* s) -> int {
      READY();
      return cuStreamSynchronize(st(s));
    },
    []() -> int {
      READY();
      return cuCtxSynchronize();
    },
    [](size_t* f, size_t* t) -> int {
      READY();
      return cuMemGetInfo_v2(f, t);
    },
    []() -> int {
      READY();
      return cuDevicePrimaryCtxReset_v2(t_device);  // the handle stays: ready() rebinds it
    },
    [](void** ctx) -> int {
      READY();
      CUcontext c = nullptr;
      CUresult r = cuCtxCreate_v2(&c, 0, t_device);
      *ctx = c;
      if (r == CUDA_SUCCESS) t_bound = t_own = c;  // made current by cuCtxCreate
      return r;
    },
    [](void* ctx) -> int {
      CUresult r = cuCtxDestroy_v2(static_cast<CUcontext>(ctx));
      if (t_own == ctx) t_own = nullptr;
      t_bound = nullptr;  // the next call makes this thread's device context current again
      return r;
    },
    []() -> int {
      READY();
      return cuDevicePrimaryCtxRelease_v2(t_device);
    },
    []() -> int {
      READY();
      CUcontext c = nullptr;
      return cuDevicePrimaryCtxRetain(&c, t_device);
    },
    [](const void* p, void** base, size_t* size) -> int {
      READY();
      CUdeviceptr b = 0;
      CUresult r = cuMemGetAddressRange_v2(&b, size, dp(p));
      *base = reinterpret_cast<void*>(b);
      return r;
    },
    &kDriverCalls,
};

}  // namespace

const Api& api() { return kApi; }

}  // namespace luma::programs
