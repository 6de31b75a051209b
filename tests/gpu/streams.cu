// streams.cu - the many-streams benchmark on a real GPU: what one cudaFree +
// cudaMalloc pair costs while the program holds N non-blocking streams, idle or busy.
// The same workload as tests/bench/bench_streams.cpp on the stand-in: 8 live 4 KiB blocks,
// each pair frees one and allocates its replacement. Cases: no streams, 16 idle, 256 idle,
// 16 busy (before each sample, every busy stream that is idle gets a kernel that spins
// ~400 us, untimed, so the streams have work queued most of the time, as in a program that
// keeps its GPU fed). Run plain (the driver's own cudaFree synchronizes) and under
// LD_PRELOAD=libluma.so by scripts/gpu-check; gpu_report.py sets the rows side by side.
// Prints one row per case: wall and thread-CPU nanoseconds per pair (median, p10, p90 of
// samples of kPairsPerSample pairs). Exit 0 ok, 1 a CUDA call failed, 2 usage. Needs a GPU;
// never run by CI.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "gpu_checks.cuh"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kLive = 8;
constexpr size_t kBlock = 4096;
constexpr int kPairsPerSample = 256;   // as bench_streams' top-up period
constexpr int kMaxSamples = 201;       // odd: the median is one sample
constexpr double kSecondsPerCase = 1.5;  // plain cudaFree with busy streams waits ~400 us
constexpr long long kBusyCycles = 800'000;  // ~400 us at the H200's ~1.98 GHz

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

void run_case(int n, bool busy) {
  std::vector<cudaStream_t> streams(n);
  for (cudaStream_t& s : streams) GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* live[kLive] = {};
  for (void*& p : live) GPU_CHECK(cudaMalloc(&p, kBlock));
  GPU_CHECK(cudaDeviceSynchronize());
  std::vector<double> wall, cpu;
  size_t i = 0;
  const auto start = Clock::now();
  // Warm-up sample first (luma's first segment, the driver's first fences), not kept.
  for (int sample = -1; sample < kMaxSamples; ++sample) {
    if (busy) {
      for (cudaStream_t s : streams)
        if (cudaStreamQuery(s) == cudaSuccess) spin_kernel<<<1, 1, 0, s>>>(kBusyCycles);
      GPU_CHECK(cudaGetLastError());
    }
    const double c0 = thread_cpu_ns();
    const auto t0 = Clock::now();
    for (int k = 0; k < kPairsPerSample; ++k) {
      void*& slot = live[i++ % kLive];
      GPU_CHECK(cudaFree(slot));
      GPU_CHECK(cudaMalloc(&slot, kBlock));
    }
    const double w = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    const double c = thread_cpu_ns() - c0;
    if (sample >= 0) {
      wall.push_back(w / kPairsPerSample);
      cpu.push_back(c / kPairsPerSample);
    }
    if (std::chrono::duration<double>(Clock::now() - start).count() > kSecondsPerCase &&
        wall.size() >= 5)
      break;
  }
  std::printf("  %-8d %-5s %10.0f %10.0f %10.0f %10.0f %10.0f %10.0f %8zu\n", n,
              busy ? "busy" : "idle", percentile(wall, 0.5), percentile(wall, 0.1),
              percentile(wall, 0.9), percentile(cpu, 0.5), percentile(cpu, 0.1),
              percentile(cpu, 0.9), wall.size());
  std::fflush(stdout);
  GPU_CHECK(cudaDeviceSynchronize());
  for (void* p : live) GPU_CHECK(cudaFree(p));
  for (cudaStream_t s : streams) GPU_CHECK(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: gpu_streams (no arguments)\n");
    return 2;
  }
  GPU_CHECK(cudaFree(nullptr));  // the primary context, current on this thread
  std::printf("# cudaFree+cudaMalloc pair with N non-blocking streams, ns per pair "
              "(samples of %d pairs)\n", kPairsPerSample);
  std::printf("# %-8s %-5s %10s %10s %10s %10s %10s %10s %8s\n", "streams", "state",
              "wall_med", "wall_p10", "wall_p90", "cpu_med", "cpu_p10", "cpu_p90", "samples");
  run_case(0, false);
  run_case(16, false);
  run_case(256, false);
  run_case(16, true);
  return 0;
}
