// cuda_runtime_test_double.cpp - a test double for the few CUDA runtime calls CUB's
// CachingDeviceAllocator makes, so the benchmark can run it on a machine without a GPU:
// cudaMalloc hands out address ranges that are never touched, events are always complete.
// For tests/bench only: it must never be linked into anything that runs on a real GPU.
#include <cuda_runtime.h>

#include "bench_workload.h"

namespace {
luma::bench::AddressSpace& address_space() {
  static luma::bench::AddressSpace space;
  return space;
}
// Any non-null handle will do: nothing looks inside a cudaEvent_t.
cudaEvent_t fake_event() { return reinterpret_cast<cudaEvent_t>(std::uintptr_t{0x1000}); }
}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  *ptr = address_space().take(size);
  return cudaSuccess;
}
cudaError_t cudaFree(void*) { return cudaSuccess; }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = fake_event();
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }

}  // extern "C"
