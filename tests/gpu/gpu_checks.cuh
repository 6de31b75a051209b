// gpu_checks.cuh - kernels and helpers shared by the real-GPU test programs (tests/gpu):
// kernels write a pattern into a block and count the bytes that differ, so every check is
// made on the device by the code that used the memory. Needs a GPU; never run by CI.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define GPU_CHECK(call)                                                              \
  do {                                                                               \
    auto r_ = (call);                                                                \
    if (r_ != 0) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call,     \
                   static_cast<int>(r_));                                            \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// The q-quantile (0..1) of the samples, the nearest one: what the timing programs
// (latency.cu, fence_costs.cu, streams.cu) report as median, p10 and p90.
inline double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// Writes v into p[0..n); `spin` iterations of busy work per thread first make it slow, so a
// premature reuse of the block is observable.
__global__ void fill_kernel(unsigned char* p, size_t n, unsigned char v, long long spin) {
  long long t0 = clock64();
  while (spin > 0 && clock64() - t0 < spin) {
  }
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p[i] = v;
  }
}

// Counts the bytes of p[0..n) that are not v into *bad.
__global__ void count_kernel(const unsigned char* p, size_t n, unsigned char v,
                             unsigned long long* bad) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (p[i] != v) atomicAdd(bad, 1ULL);
  }
}

// Counts on the device the bytes of p that are not v; returns the count.
inline unsigned long long device_mismatches(const void* p, size_t n, unsigned char v,
                                            cudaStream_t s) {
  unsigned long long* bad = nullptr;
  GPU_CHECK(cudaMallocManaged(&bad, sizeof *bad));
  *bad = 0;
  count_kernel<<<64, 256, 0, s>>>(static_cast<const unsigned char*>(p), n, v, bad);
  GPU_CHECK(cudaGetLastError());
  GPU_CHECK(cudaStreamSynchronize(s));
  unsigned long long out = *bad;
  GPU_CHECK(cudaFree(bad));
  return out;
}
