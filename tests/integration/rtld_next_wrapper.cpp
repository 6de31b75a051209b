// rtld_next_wrapper.cpp - a test library that wraps two driver functions the usual way
// (defines them, forwards with dlsym(RTLD_NEXT, ...)), as profilers and GPU-sharing layers
// do: one luma serves (cuMemAlloc_v2) and one it does not (cuDeviceGetCount). Each counts
// its depth and ends the process with 9 if the forward led back to itself.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>

#include "fake_driver_api.h"

namespace {

template <typename Fn>
Fn next_definition(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

struct Depth {
  explicit Depth(int& d, const char* name) : depth(++d) {
    if (depth > 8) {
      std::fprintf(stderr, "rtld_next_wrapper: %s forwarded to itself\n", name);
      _exit(9);
    }
  }
  int depth;
};

thread_local int g_count_depth = 0;
thread_local int g_alloc_depth = 0;

}  // namespace

extern "C" [[gnu::visibility("default")]] CUresult cuDeviceGetCount(int* n) {
  Depth d(g_count_depth, "cuDeviceGetCount");
  auto next = next_definition<CUresult (*)(int*)>("cuDeviceGetCount");
  const CUresult r = next != nullptr ? next(n) : CUDA_ERROR_NOT_FOUND;
  --g_count_depth;
  return r;
}

extern "C" [[gnu::visibility("default")]] CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  Depth d(g_alloc_depth, "cuMemAlloc_v2");
  auto next = next_definition<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  const CUresult r = next != nullptr ? next(p, bytes) : CUDA_ERROR_NOT_FOUND;
  --g_alloc_depth;
  return r;
}
