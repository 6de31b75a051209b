// api_dlopen.cpp - the workload's calls through a runtime opened at run time, the way
// Python ctypes does it: dlopen("libcudart.so.13") and dlsym of each cuda* function. No
// link-time dependency on any CUDA library.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "api.h"
#include "fake_cuda_runtime.h"

namespace luma::programs {
namespace {

struct Runtime {
  decltype(&cudaGetDeviceCount) get_device_count;
  decltype(&cudaSetDevice) set_device;
  decltype(&cudaMalloc) malloc;
  decltype(&cudaFree) free;
  decltype(&cudaMallocAsync) malloc_async;
  decltype(&cudaFreeAsync) free_async;
  decltype(&cudaMemset) memset;
  decltype(&cudaMemsetAsync) memset_async;
  decltype(&cudaMemcpy) memcpy;
  decltype(&cudaMemcpyAsync) memcpy_async;
  decltype(&cudaStreamCreateWithFlags) stream_create;
  decltype(&cudaStreamDestroy) stream_destroy;
  decltype(&cudaStreamSynchronize) stream_sync;
  decltype(&cudaDeviceSynchronize) device_sync;
  decltype(&cudaMemGetInfo) mem_info;
  decltype(&cudaDeviceReset) device_reset;
};

template <class F>
void sym(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr) {
    std::fprintf(stderr, "prog_dlopen: libcudart.so.13 has no %s\n", name);
    std::exit(2);
  }
}

const Runtime& rt() {
  static const Runtime r = [] {
    Runtime x{};
    void* lib = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::fprintf(stderr, "prog_dlopen: cannot open libcudart.so.13: %s\n", dlerror());
      std::exit(2);
    }
    sym(lib, "cudaGetDeviceCount", x.get_device_count);
    sym(lib, "cudaSetDevice", x.set_device);
    sym(lib, "cudaMalloc", x.malloc);
    sym(lib, "cudaFree", x.free);
    sym(lib, "cudaMallocAsync", x.malloc_async);
    sym(lib, "cudaFreeAsync", x.free_async);
    sym(lib, "cudaMemset", x.memset);
    sym(lib, "cudaMemsetAsync", x.memset_async);
    sym(lib, "cudaMemcpy", x.memcpy);
    sym(lib, "cudaMemcpyAsync", x.memcpy_async);
    sym(lib, "cudaStreamCreateWithFlags", x.stream_create);
    sym(lib, "cudaStreamDestroy", x.stream_destroy);
    sym(lib, "cudaStreamSynchronize", x.stream_sync);
    sym(lib, "cudaDeviceSynchronize", x.device_sync);
    sym(lib, "cudaMemGetInfo", x.mem_info);
    sym(lib, "cudaDeviceReset", x.device_reset);
    return x;
  }();
  return r;
}

cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

const Api kApi = {
    "dlopen",
    cudaErrorMemoryAllocation,
    cudaErrorInvalidValue,
    true,
    [](int* c) -> int { return rt().get_device_count(c); },
    [](int d) -> int { return rt().set_device(d); },
    [](void** p, size_t n) -> int { return rt().malloc(p, n); },
    [](void* p) -> int { return rt().free(p); },
    [](void** p, size_t n, void* s) -> int { return rt().malloc_async(p, n, st(s)); },
    [](void* p, void* s) -> int { return rt().free_async(p, st(s)); },
    [](void* p, int v, size_t n) -> int { return rt().memset(p, v, n); },
    [](void* p, int v, size_t n, void* s) -> int { return rt().memset_async(p, v, n, st(s)); },
    [](void* d, const void* s, size_t n) -> int {
      return rt().memcpy(d, s, n, cudaMemcpyHostToDevice);
    },
    [](void* d, const void* s, size_t n) -> int {
      return rt().memcpy(d, s, n, cudaMemcpyDeviceToHost);
    },
    [](void* d, const void* s, size_t n, void* stream) -> int {
      return rt().memcpy_async(d, s, n, cudaMemcpyDeviceToHost, st(stream));
    },
    [](void** s, bool nb) -> int {
      return rt().stream_create(reinterpret_cast<cudaStream_t*>(s),
                                nb ? cudaStreamNonBlocking : cudaStreamDefault);
    },
    [](void* s) -> int { return rt().stream_destroy(st(s)); },
    [](void* s) -> int { return rt().stream_sync(st(s)); },
    []() -> int { return rt().device_sync(); },
    [](size_t* f, size_t* t) -> int { return rt().mem_info(f, t); },
    []() -> int { return rt().device_reset(); },
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
