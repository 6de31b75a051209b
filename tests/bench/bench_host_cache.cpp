// bench_host_cache.cpp - pinned host alloc+free pairs of mixed sizes through libluma.so's
// host cache against the stand-in driver alone, in the same run. Linked with the stand-in
// (libcuda.so.1); run it under LD_PRELOAD=libluma.so: the program's calls then reach luma,
// and the "stand_in" rows call the stand-in's own functions (found with glibc's dlsym,
// which libluma.so's dlsym would otherwise answer). Without the preload both rows are the
// stand-in. The stand-in populates pinned pages (pinning faults every page in) and adds
// LUMA_FAKE_HOST_ALLOC_US per allocation (the real driver's pinning costs milliseconds).
//   LD_LIBRARY_PATH=build/tests/fake LD_PRELOAD=$PWD/build/shim/libluma.so LUMA_STATS=off
//     build/tests/bench/bench_host_cache   (one command line)
// Each pair: allocate, touch the first and last byte, free, then cuCtxSynchronize (a
// staging loop waits for its copies before it reads their results).
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "fake_driver_api.h"

namespace {

// Mixed sizes, none a power of two: what staging buffers of tensors look like.
constexpr std::size_t kSizes[] = {64 * 1024 + 100, (1u << 20) + 1, 3u << 20, (16u << 20) - 3,
                                  256 * 1024, 5u << 20, 700 * 1024, (2u << 20) + 4096};
constexpr std::size_t kSizeCount = sizeof kSizes / sizeof kSizes[0];

struct Calls {
  CUresult (*alloc)(void**, size_t, unsigned);
  CUresult (*free)(void*);
};

bool g_ready = false;

void init() {
  if (g_ready) return;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "bench_host_cache: no stand-in device\n");
    std::exit(1);
  }
  g_ready = true;
}

// The stand-in's own entry points, past any preloaded library.
Calls stand_in() {
  using Dlsym = void* (*)(void*, const char*);
  Dlsym glibc_dlsym = nullptr;
  for (const char* v : {"GLIBC_2.34", "GLIBC_2.2.5"})
    if (glibc_dlsym == nullptr) glibc_dlsym = reinterpret_cast<Dlsym>(dlvsym(RTLD_NEXT, "dlsym", v));
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (glibc_dlsym == nullptr || lib == nullptr) {
    std::fprintf(stderr, "bench_host_cache: the stand-in's functions not found\n");
    std::exit(1);
  }
  return {reinterpret_cast<CUresult (*)(void**, size_t, unsigned)>(glibc_dlsym(lib, "cuMemHostAlloc")),
          reinterpret_cast<CUresult (*)(void*)>(glibc_dlsym(lib, "cuMemFreeHost"))};
}

// The program's calls: luma's under LD_PRELOAD.
Calls program() { return {&cuMemHostAlloc, &cuMemFreeHost}; }

void pairs(benchmark::State& state, Calls calls) {
  init();
  std::size_t k = 0, bytes = 0;
  for (auto _ : state) {
    const std::size_t n = kSizes[k++ % kSizeCount];
    void* p = nullptr;
    if (calls.alloc(&p, n, 0) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemHostAlloc failed");
      break;
    }
    static_cast<volatile char*>(p)[0] = 1;
    static_cast<volatile char*>(p)[n - 1] = 1;
    calls.free(p);
    cuCtxSynchronize();
    bytes += n;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

void BM_PinnedPairs_StandIn(benchmark::State& state) { pairs(state, stand_in()); }
void BM_PinnedPairs_Luma(benchmark::State& state) { pairs(state, program()); }

BENCHMARK(BM_PinnedPairs_StandIn)->Unit(benchmark::kMicrosecond)->MinTime(0.5);
BENCHMARK(BM_PinnedPairs_Luma)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
