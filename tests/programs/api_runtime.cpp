// api_runtime.cpp - the workload's calls through the CUDA runtime API, linked at build time:
// statically (prog_static, the stand-in for nvcc's default static runtime) or against
// libcudart.so.13 (prog_shared).
#include "api.h"
#include "fake_cuda_runtime.h"

namespace luma::programs {
namespace {

cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

const Api kApi = {
    "runtime",
    cudaErrorMemoryAllocation,
    cudaErrorInvalidValue,
    true,
    [](int* c) -> int { return cudaGetDeviceCount(c); },
    [](int d) -> int { return cudaSetDevice(d); },
    [](void** p, size_t n) -> int { return cudaMalloc(p, n); },
    [](void* p) -> int { return cudaFree(p); },
    [](void** p, size_t n, void* s) -> int { return cudaMallocAsync(p, n, st(s)); },
    [](void* p, void* s) -> int { return cudaFreeAsync(p, st(s)); },
    [](void* p, int v, size_t n) -> int { return cudaMemset(p, v, n); },
    [](void* p, int v, size_t n, void* s) -> int { return cudaMemsetAsync(p, v, n, st(s)); },
    [](void* d, const void* s, size_t n) -> int {
      return cudaMemcpy(d, s, n, cudaMemcpyHostToDevice);
    },
    [](void* d, const void* s, size_t n) -> int {
      return cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost);
    },
    [](void* d, const void* s, size_t n, void* stream) -> int {
      return cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToHost, st(stream));
    },
    [](void** s, bool nb) -> int {
      return cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(s),
                                       nb ? cudaStreamNonBlocking : cudaStreamDefault);
    },
    [](void* s) -> int { return cudaStreamDestroy(st(s)); },
    [](void* s) -> int { return cudaStreamSynchronize(st(s)); },
    []() -> int { return cudaDeviceSynchronize(); },
    [](size_t* f, size_t* t) -> int { return cudaMemGetInfo(f, t); },
    []() -> int { return cudaDeviceReset(); },
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

const Api& api() { return kApi; }

}  // namespace luma::programs
