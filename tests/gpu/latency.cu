// latency.cu - the cost of one cudaMalloc + cudaFree pair on a real GPU, per size from 1 KiB
// to 256 MiB: run it plain (the driver's own cost) and under LD_PRELOAD=libluma.so (luma's
// cached path) and compare the medians. Built with nvcc's default static runtime, so luma
// sees the driver calls through cuGetProcAddress, as with most CUDA programs.
// Prints one row per size: bytes, median, p10 and p90 nanoseconds per pair, samples, pairs
// per sample. Exit 0 ok, 1 a CUDA call failed, 2 usage. Needs a GPU; never run by CI.
// It must never time anything but the pair: no kernels, no copies, no host clocks inside.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu_checks.cuh"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMaxSize = size_t{256} << 20;  // 256 MiB: the largest size timed
// Up to 1 MiB a pair under luma is a few hundred ns, under the host clock's resolution
// and call cost; timing 16 pairs per sample keeps that error under a few percent.
constexpr size_t kBatchedUpTo = size_t{1} << 20;
constexpr int kPairsPerSmallSample = 16;
constexpr int kWarmupPairs = 20;       // first touch, driver-side pools, luma's first segment
constexpr int kDefaultSamples = 301;   // odd: the median is one sample
// Each size stops early after this long, so the slowest size (raw 256 MiB) keeps the whole
// run near 10 seconds per configuration.
constexpr double kSecondsPerSize = 1.0;

void pair(size_t n) {
  void* p = nullptr;
  GPU_CHECK(cudaMalloc(&p, n));
  GPU_CHECK(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  int samples = kDefaultSamples;
  if (argc > 2 || (argc == 2 && (samples = std::atoi(argv[1])) < 1)) {
    std::fprintf(stderr, "usage: %s [samples per size, default %d]\n", argv[0],
                 kDefaultSamples);
    return 2;
  }
  GPU_CHECK(cudaFree(nullptr));  // creates the context outside every timed region
  std::printf("# cudaMalloc+cudaFree pair latency, ns per pair\n");
  std::printf("# %12s %12s %12s %12s %8s %6s\n", "bytes", "median_ns", "p10_ns", "p90_ns",
              "samples", "batch");
  for (size_t n = kKiB; n <= kMaxSize; n *= 4) {
    const int batch = n <= kBatchedUpTo ? kPairsPerSmallSample : 1;
    for (int i = 0; i < kWarmupPairs; ++i) pair(n);
    std::vector<double> ns;
    ns.reserve(static_cast<size_t>(samples));
    const auto size_start = Clock::now();
    while (static_cast<int>(ns.size()) < samples) {
      const auto t0 = Clock::now();
      for (int b = 0; b < batch; ++b) pair(n);
      const auto t1 = Clock::now();
      ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / batch);
      if (std::chrono::duration<double>(t1 - size_start).count() > kSecondsPerSize &&
          ns.size() >= 11)
        break;
    }
    std::printf("  %12zu %12.0f %12.0f %12.0f %8zu %6d\n", n, percentile(ns, 0.5),
                percentile(ns, 0.1), percentile(ns, 0.9), ns.size(), batch);
    std::fflush(stdout);
  }
  return 0;
}
