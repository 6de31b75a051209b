// bench_shim.cpp - what an intercepted cuMemAlloc_v2 + cuMemFree_v2 pair costs. Linked
// against the stand-in driver (-lcuda, like a driver-API program); run it once plain (the
// stand-in's own cost) and once with LD_PRELOAD=libluma.so (luma's cost, which replaces
// the driver's): scripts/bench-shim runs both and prints the difference.
// Never asserts anything: numbers only.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <mutex>

#include "driver/cuda_abi.h"

extern "C" {
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
}

namespace {

CUcontext primary_context() {
  static CUcontext ctx = [] {
    CUcontext c = nullptr;
    CUdevice dev = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS)
      std::fprintf(stderr, "bench_shim: no stand-in device\n");
    return c;
  }();
  return ctx;
}

void BM_AllocFreePair(benchmark::State& state) {
  cuCtxSetCurrent(primary_context());
  const auto bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemAlloc_v2 failed");
      break;
    }
    benchmark::DoNotOptimize(p);
    cuMemFree_v2(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllocFreePair)->Arg(4096)->Arg(1 << 20)->Threads(1)->Threads(8)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
