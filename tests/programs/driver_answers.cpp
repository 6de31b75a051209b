// driver_answers.cpp - what the driver answers in the corners where the stand-in driver
// had to choose (all since observed on an H200, driver 580: tests/fake/README.md; the
// program keeps checking them on every GPU and driver it meets) and where luma's hooks must
// answer as the driver does: frees with no current context, stream-ordered frees of
// cuMemAlloc memory, capture misuse, queries of a capturing stream, cuCtxRecordEvent's
// errors, IPC with a bad handle,
// managed memory's type, the VMM granularity; for expandable segments: cuMemMap at an
// offset, the range and the IPC answer of mapped memory, cuMemCreate in a capture, a
// device as its own peer. Each probe prints the code (or value) it got
// beside the one expected, that is what the stand-in answers and tests/fake/README.md says;
// a probe that differs prints DIFFERS and the exit is 1.
// Run against the stand-in by the integration tests (plain and under LD_PRELOAD=libluma.so:
// the same lines, exit 0), and against the real driver by scripts/gpu-check (plain: a
// DIFFERS line there is a stand-in choice the GPU contradicts; under luma: the same lines as
// plain). Linked with -lcuda (DT_NEEDED libcuda.so.1) like prog_driver.
// Exit: 0 every answer as expected, 1 some differ, 2 usage, 77 no device.
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "driver/cuda_abi.h"

extern "C" {
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize();
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
CUresult cuMemAllocHost_v2(void** p, size_t bytesize);
CUresult cuMemFreeHost(void* p);
CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags);
CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr ptr);
CUresult cuStreamCreate(CUstream* stream, unsigned int flags);
CUresult cuStreamGetFlags(CUstream stream, unsigned int* flags);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuStreamBeginCapture_v2(CUstream stream, int mode);
CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph);
CUresult cuGraphDestroy(CUgraph graph);
CUresult cuEventCreate(CUevent* event, unsigned int flags);
CUresult cuEventDestroy_v2(CUevent event);
CUresult cuCtxRecordEvent(CUcontext ctx, CUevent event);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags);
CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       int option);
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count);
CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr);
CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr);
CUresult cuDeviceCanAccessPeer(int* can_access, CUdevice dev, CUdevice peer);
}

namespace {

struct Probe {
  const char* name;
  long long expected;
  const char* source;  // where the expectation comes from (tests/fake/README.md)
  std::function<long long()> run;
};

CUcontext g_ctx = nullptr;
CUstream g_stream = nullptr;
constexpr size_t kBlock = 4096;

CUdeviceptr alloc_block() {
  CUdeviceptr p = 0;
  cuCtxSetCurrent(g_ctx);
  return cuMemAlloc_v2(&p, kBlock) == CUDA_SUCCESS ? p : 0;
}

// Frees p unless the probe already did (its code was success), with the context current.
void release_unless_freed(CUdeviceptr p, CUresult probe_code) {
  cuCtxSetCurrent(g_ctx);
  cuCtxSynchronize();
  if (p != 0 && probe_code != CUDA_SUCCESS) cuMemFree_v2(p);
}

// Allocates a block, calls `free_call` on it with the context current or with none, and
// frees the block afterwards unless that call did: the code of `free_call`.
template <typename Free>
long long free_probe(bool context_current, Free free_call) {
  const CUdeviceptr p = alloc_block();
  if (!context_current) cuCtxSetCurrent(nullptr);
  const CUresult r = free_call(p);
  release_unless_freed(p, r);
  return static_cast<long long>(r);
}

// A 4-byte pointer attribute (MEMORY_TYPE, IS_MANAGED) of a fresh managed block: the
// value, or minus the error code.
long long managed_attribute(int attribute) {
  CUdeviceptr p = 0;
  if (cuMemAllocManaged(&p, kBlock, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS) return -1LL;
  unsigned value = 0;
  const CUresult r = cuPointerGetAttribute(&value, attribute, p);
  cuMemFree_v2(p);
  return r == CUDA_SUCCESS ? static_cast<long long>(value) : -static_cast<long long>(r);
}

// Virtual memory as expandable segments use it (docs/cuda-facts.md, "Virtual memory"): a
// range of four 2 MiB pages with its first two pages mapped, one handle each, readable and
// writable by device 0. `use` gets the range's base; everything is given back after it.
constexpr size_t kPage = size_t{2} << 20;
CUmemAllocationProp page_prop() {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}
long long with_two_mapped_pages(const std::function<long long(CUdeviceptr)>& use) {
  const CUmemAllocationProp prop = page_prop();
  CUdeviceptr va = 0;
  if (cuMemAddressReserve(&va, 4 * kPage, 0, 0, 0) != CUDA_SUCCESS) return -1LL;
  CUmemGenericAllocationHandle h[2] = {};
  long long result = -2LL;
  if (cuMemCreate(&h[0], kPage, &prop, 0) == CUDA_SUCCESS && cuMemCreate(&h[1], kPage, &prop, 0) == CUDA_SUCCESS &&
      cuMemMap(va, kPage, 0, h[0], 0) == CUDA_SUCCESS && cuMemMap(va + kPage, kPage, 0, h[1], 0) == CUDA_SUCCESS) {
    CUmemAccessDesc access;
    std::memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (cuMemSetAccess(va, 2 * kPage, &access, 1) == CUDA_SUCCESS) result = use(va);
  }
  cuMemUnmap(va, kPage);
  cuMemUnmap(va + kPage, kPage);
  for (CUmemGenericAllocationHandle x : h)
    if (x != 0) cuMemRelease(x);
  cuMemAddressFree(va, 4 * kPage);
  return result;
}

// Ends a capture a probe began, whatever state it is in, and drops its graph.
void end_capture(CUstream s) {
  CUgraph g = nullptr;
  cuStreamEndCapture(s, &g);
  if (g != nullptr) cuGraphDestroy(g);
}

std::vector<Probe> probes() {
  return {
      {"cuMemFree of a live block, no current context", CUDA_SUCCESS,
       "observed on an H200, driver 580",
       [] { return free_probe(false, [](CUdeviceptr p) { return cuMemFree_v2(p); }); }},
      {"cuMemFreeAsync on the legacy stream, no current context", CUDA_ERROR_INVALID_CONTEXT,
       "observed on an H200, driver 580",
       [] {
         return free_probe(false, [](CUdeviceptr p) { return cuMemFreeAsync(p, nullptr); });
       }},
      {"cuMemFreeAsync on a stream of the context, no current context", CUDA_SUCCESS,
       "observed on an H200, driver 580",
       [] {
         return free_probe(false, [](CUdeviceptr p) { return cuMemFreeAsync(p, g_stream); });
       }},
      {"cuMemFreeAsync of a cuMemAlloc block", CUDA_SUCCESS,
       "observed on an H200, driver 580",
       [] {
         return free_probe(true, [](CUdeviceptr p) { return cuMemFreeAsync(p, g_stream); });
       }},
      {"cuMemFree twice", CUDA_ERROR_INVALID_VALUE, "observed on an H200, driver 580",
       [] {
         const CUdeviceptr p = alloc_block();
         cuMemFree_v2(p);
         return static_cast<long long>(cuMemFree_v2(p));
       }},
      {"cuMemFree(0)", CUDA_SUCCESS, "observed on an H200, driver 580",
       [] { return static_cast<long long>(cuMemFree_v2(0)); }},
      {"cuMemFreeHost(NULL)", CUDA_SUCCESS, "observed on an H200, driver 580",
       [] { return static_cast<long long>(cuMemFreeHost(nullptr)); }},
      {"cuMemFree of pinned host memory", CUDA_ERROR_INVALID_VALUE, "observed on an H200, driver 580",
       [] {
         void* h = nullptr;
         if (cuMemAllocHost_v2(&h, kBlock) != CUDA_SUCCESS) return -1LL;
         const CUresult r = cuMemFree_v2(reinterpret_cast<CUdeviceptr>(h));
         if (r != CUDA_SUCCESS) cuMemFreeHost(h);
         return static_cast<long long>(r);
       }},
      {"cuMemAlloc with no current context", CUDA_ERROR_INVALID_CONTEXT, "observed on an H200, driver 580",
       [] {
         CUdeviceptr p = 0;
         cuCtxSetCurrent(nullptr);
         const CUresult r = cuMemAlloc_v2(&p, kBlock);
         cuCtxSetCurrent(g_ctx);
         if (r == CUDA_SUCCESS) cuMemFree_v2(p);
         return static_cast<long long>(r);
       }},
      {"managed memory: CU_POINTER_ATTRIBUTE_MEMORY_TYPE", CU_MEMORYTYPE_DEVICE,
       "observed on an H200, driver 580",
       [] { return managed_attribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE); }},
      {"managed memory: CU_POINTER_ATTRIBUTE_IS_MANAGED", 1, "observed on an H200, driver 580",
       [] { return managed_attribute(CU_POINTER_ATTRIBUTE_IS_MANAGED); }},
      {"cuStreamEndCapture of a stream not capturing", CUDA_ERROR_ILLEGAL_STATE, "observed on an H200, driver 580",
       [] {
         CUgraph g = nullptr;
         return static_cast<long long>(cuStreamEndCapture(g_stream, &g));
       }},
      {"cuStreamBeginCapture on the legacy stream", CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
       "observed on an H200, driver 580",
       [] {
         const CUresult r = cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_RELAXED);
         if (r == CUDA_SUCCESS) end_capture(nullptr);
         return static_cast<long long>(r);
       }},
      {"cuStreamBeginCapture on a capturing stream", CUDA_ERROR_ILLEGAL_STATE,
       "observed on an H200, driver 580",
       [] {
         if (cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS)
           return -1LL;
         const CUresult r = cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_RELAXED);
         end_capture(g_stream);
         return static_cast<long long>(r);
       }},
      {"cuCtxRecordEvent with a NULL context", CUDA_ERROR_INVALID_CONTEXT, "observed on an H200, driver 580",
       [] {
         CUevent e = nullptr;
         if (cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return -1LL;
         const CUresult r = cuCtxRecordEvent(nullptr, e);
         cuCtxSynchronize();
         cuEventDestroy_v2(e);
         return static_cast<long long>(r);
       }},
      {"cuCtxRecordEvent while a stream of the context captures",
       CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "observed on an H200, driver 580",
       [] {
         CUevent e = nullptr;
         if (cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return -1LL;
         if (cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS)
           return -1LL;
         const CUresult r = cuCtxRecordEvent(g_ctx, e);
         end_capture(g_stream);
         cuCtxSynchronize();
         cuEventDestroy_v2(e);
         return static_cast<long long>(r);
       }},
      {"cuStreamEndCapture after that cuCtxRecordEvent", CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
       "observed on an H200, driver 580",
       [] {
         CUevent e = nullptr;
         if (cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return -1LL;
         if (cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS)
           return -1LL;
         cuCtxRecordEvent(g_ctx, e);
         CUgraph g = nullptr;
         const CUresult r = cuStreamEndCapture(g_stream, &g);
         if (g != nullptr) cuGraphDestroy(g);
         cuCtxSynchronize();
         cuEventDestroy_v2(e);
         return static_cast<long long>(r);
       }},
      {"cuStreamGetFlags of a capturing stream", CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "observed on an H200, driver 580",
       [] {
         if (cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS)
           return -1LL;
         unsigned flags = 0;
         const CUresult r = cuStreamGetFlags(g_stream, &flags);
         end_capture(g_stream);
         return static_cast<long long>(r);
       }},
      {"cuStreamEndCapture after that cuStreamGetFlags", CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "observed on an H200, driver 580",
       [] {
         if (cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS)
           return -1LL;
         unsigned flags = 0;
         cuStreamGetFlags(g_stream, &flags);
         CUgraph g = nullptr;
         const CUresult r = cuStreamEndCapture(g_stream, &g);
         if (g != nullptr) cuGraphDestroy(g);
         return static_cast<long long>(r);
       }},
      {"cuMemFreeAsync of a cuMemAlloc block in a global capture", CUDA_ERROR_INVALID_VALUE, "observed on an H200, driver 580",
       [] {
         const CUdeviceptr p = alloc_block();
         if (cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS)
           return -1LL;
         const CUresult r = cuMemFreeAsync(p, g_stream);
         end_capture(g_stream);
         release_unless_freed(p, r);
         return static_cast<long long>(r);
       }},
      {"cuStreamEndCapture after that cuMemFreeAsync", CUDA_SUCCESS, "observed on an H200, driver 580",
       [] {
         const CUdeviceptr p = alloc_block();
         if (cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS)
           return -1LL;
         const CUresult freed = cuMemFreeAsync(p, g_stream);
         CUgraph g = nullptr;
         const CUresult r = cuStreamEndCapture(g_stream, &g);
         if (g != nullptr) cuGraphDestroy(g);
         release_unless_freed(p, freed);
         return static_cast<long long>(r);
       }},
      {"cuIpcOpenMemHandle of a handle nobody made", CUDA_ERROR_INVALID_VALUE, "observed on an H200, driver 580",
       [] {
         CUipcMemHandle h;
         std::memset(&h, 0xAB, sizeof h);
         CUdeviceptr p = 0;
         const CUresult r = cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
         return static_cast<long long>(r);
       }},
      {"cuMemGetAllocationGranularity (minimum, device 0), bytes", 2 << 20,
       "observed on an H200, driver 580",
       [] {
         CUmemAllocationProp prop;
         std::memset(&prop, 0, sizeof prop);
         prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
         prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
         prop.location.id = 0;
         size_t g = 0;
         const CUresult r =
             cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
         return r == CUDA_SUCCESS ? static_cast<long long>(g) : -static_cast<long long>(r);
       }},
      {"cuMemMap of a handle at offset 2 MiB", CUDA_ERROR_INVALID_VALUE,
       "cuda.h 13.0 (\"currently must be zero\"); the code: not yet observed",
       [] {
         const CUmemAllocationProp prop = page_prop();
         CUmemGenericAllocationHandle h = 0;
         CUdeviceptr va = 0;
         if (cuMemCreate(&h, 2 * kPage, &prop, 0) != CUDA_SUCCESS) return -1LL;
         if (cuMemAddressReserve(&va, 2 * kPage, 0, 0, 0) != CUDA_SUCCESS) return -1LL;
         const CUresult r = cuMemMap(va + kPage, kPage, kPage, h, 0);
         if (r == CUDA_SUCCESS) cuMemUnmap(va + kPage, kPage);
         cuMemAddressFree(va, 2 * kPage);
         cuMemRelease(h);
         return static_cast<long long>(r);
       }},
      {"cuMemGetAddressRange of the 2nd of two page mappings, size", static_cast<long long>(kPage),
       "UCX and libfabric: the handle holding the pointer; not yet observed",
       [] {
         return with_two_mapped_pages([](CUdeviceptr va) {
           CUdeviceptr base = 0;
           size_t size = 0;
           const CUresult r = cuMemGetAddressRange_v2(&base, &size, va + kPage + 100);
           if (r != CUDA_SUCCESS) return -static_cast<long long>(r);
           return base == va + kPage ? static_cast<long long>(size) : -1000LL;
         });
       }},
      {"cuIpcGetMemHandle of mapped memory", CUDA_ERROR_INVALID_VALUE, "cuda.h; the code: not yet observed",
       [] {
         return with_two_mapped_pages([](CUdeviceptr va) {
           CUipcMemHandle h;
           return static_cast<long long>(cuIpcGetMemHandle(&h, va));
         });
       }},
      {"cuMemCreate in a global capture", CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "not yet observed: strict",
       [] {
         const CUmemAllocationProp prop = page_prop();
         if (cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS) return -1LL;
         CUmemGenericAllocationHandle h = 0;
         const CUresult r = cuMemCreate(&h, kPage, &prop, 0);
         end_capture(g_stream);
         if (r == CUDA_SUCCESS) cuMemRelease(h);
         return static_cast<long long>(r);
       }},
      {"cuDeviceCanAccessPeer of device 0 and itself", 0, "not yet observed",
       [] {
         int can = -1;
         const CUresult r = cuDeviceCanAccessPeer(&can, 0, 0);
         return r == CUDA_SUCCESS ? static_cast<long long>(can) : -static_cast<long long>(r);
       }},
  };
}

}  // namespace

int main(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: driver_answers (no arguments)\n");
    return 2;
  }
  CUdevice dev = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&g_ctx, dev) != CUDA_SUCCESS) {
    std::printf("driver_answers: no device\n");
    return 77;
  }
  cuCtxSetCurrent(g_ctx);
  if (cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    std::printf("driver_answers: cuStreamCreate failed\n");
    return 1;
  }
  int differ = 0;
  for (const Probe& p : probes()) {
    cuCtxSetCurrent(g_ctx);
    const long long got = p.run();
    const bool same = got == p.expected;
    differ += same ? 0 : 1;
    std::printf("%-62s got %-9lld expected %-9lld %s (%s)\n", p.name, got, p.expected,
                same ? "ok" : "DIFFERS", p.source);
  }
  cuCtxSetCurrent(g_ctx);
  cuCtxSynchronize();
  cuStreamDestroy_v2(g_stream);
  cuDevicePrimaryCtxRelease_v2(dev);
  std::printf("driver_answers: %d of %zu answers differ from the expected ones\n", differ,
              probes().size());
  return differ == 0 ? 0 : 1;
}
