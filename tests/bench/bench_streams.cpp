// bench_streams.cpp - what an intercepted alloc+free pair costs while the program holds
// many streams (docs/architecture.md, "Fences with many streams"): 8 live 4 KiB blocks,
// each iteration frees one and allocates a replacement through cuMemAlloc_v2 / cuMemFree_v2,
// with N non-blocking streams created beforehand, idle or busy. Linked against the stand-in
// driver; run with LUMA_FAKE_CALL_COST=realistic (the stand-in then charges cuEventRecord /
// cuEventQuery / cuStreamQuery / cuCtxRecordEvent what a GPU does, tests/fake/README.md)
// plain and under LD_PRELOAD=libluma.so: tests/bench/bench_streams.sh does both, and an
// older libluma.so too when given one. Busy streams: every kTopUpPairs pairs, each busy
// stream that the driver reports idle gets a 1-byte cuMemsetD8Async, which the stand-in runs
// after its LUMA_FAKE_DELAY_US-like delay (kBusyDelayUs): the stream then has work queued
// most of the time, as a stream of a program that keeps its GPU fed. The top-up's own calls
// are the program's, paid with and without luma alike, and not timed. Never asserts
// anything: numbers only.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "driver/cuda_abi.h"

extern "C" {
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize();
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuStreamCreate(CUstream* stream, unsigned int flags);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuStreamQuery(CUstream stream);
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream);
void luma_fake_set_delay_us(uint64_t us);  // the stand-in's control API (fake_control.h)
}

namespace {

constexpr std::size_t kLive = 8;
constexpr std::size_t kBlock = 4096;
// Few top-ups (their calls are the program's, not luma's), each long enough to keep the
// stream busy until the next.
constexpr std::size_t kTopUpPairs = 256;
constexpr std::uint64_t kBusyDelayUs = 400;

CUcontext primary_context() {
  static CUcontext ctx = [] {
    CUcontext c = nullptr;
    CUdevice dev = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS)
      std::fprintf(stderr, "bench_streams: no stand-in device\n");
    return c;
  }();
  return ctx;
}

// range(0): non-blocking streams held; range(1): 1 when they are busy.
void BM_PairWithStreams(benchmark::State& state) {
  cuCtxSetCurrent(primary_context());
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool busy = state.range(1) != 0;
  std::vector<CUstream> streams(n);
  std::vector<CUdeviceptr> targets(busy ? n : 0);
  for (CUstream& s : streams)
    if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      state.SkipWithError("cuStreamCreate failed");
      return;
    }
  for (CUdeviceptr& t : targets) cuMemAlloc_v2(&t, 256);
  if (busy) luma_fake_set_delay_us(kBusyDelayUs);
  CUdeviceptr live[kLive] = {};
  for (CUdeviceptr& p : live) cuMemAlloc_v2(&p, kBlock);
  std::size_t i = 0;
  bool failed = false;
  for (auto _ : state) {
    if (busy && i % kTopUpPairs == 0) {
      // Not timed: the program's own work, the same with and without luma (timed, it was
      // 89-100 ns per pair, docs/architecture.md).
      state.PauseTiming();
      for (std::size_t k = 0; k < n; ++k)
        if (cuStreamQuery(streams[k]) == CUDA_SUCCESS) cuMemsetD8Async(targets[k], 1, 1, streams[k]);
      state.ResumeTiming();
    }
    CUdeviceptr& slot = live[i++ % kLive];
    cuMemFree_v2(slot);
    failed |= cuMemAlloc_v2(&slot, kBlock) != CUDA_SUCCESS;
    benchmark::DoNotOptimize(slot);
  }
  if (failed) state.SkipWithError("an allocation failed in the timed loop");
  // Not timed: give everything back, so the next case starts from the same state.
  luma_fake_set_delay_us(0);
  cuCtxSynchronize();
  for (CUdeviceptr p : live) cuMemFree_v2(p);
  for (CUdeviceptr t : targets) cuMemFree_v2(t);
  for (CUstream s : streams) cuStreamDestroy_v2(s);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(busy ? "busy streams" : "idle streams");
}
BENCHMARK(BM_PairWithStreams)
    ->ArgNames({"streams", "busy"})
    ->Args({0, 0})
    ->Args({16, 0})
    ->Args({256, 0})
    ->Args({16, 1})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
