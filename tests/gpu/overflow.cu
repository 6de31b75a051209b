// overflow.cu - gpu_overflow: a planted out-of-bounds write for compute-sanitizer's memcheck,
// run by scripts/gpu-check plain and under LD_PRELOAD=libluma.so. A kernel writes 16 floats
// past the end of a 1,000-float cudaMalloc allocation: memcheck must report each of the 16
// writes both ways. Under a caching allocator the 64 bytes land inside the allocator's own
// segment (here, in the rounding of the block), which memcheck takes for valid memory unless
// the allocator describes its blocks through the NVTX memory API (shim/observe/nvtx_memory.h).
// Modes: alone (the one allocation), neighbour (a second 1,000-float allocation made right
// after the first, so a caching allocator places it in the same segment, just past the
// overflow: the write lands among live blocks). It prints where the blocks lie, whether
// libluma.so is mapped in this process and whether an NVTX tool was announced to it
// (NVTX_INJECTION64_PATH), so the report can tell a missed error from a run without luma.
// After the kernel only cudaDeviceSynchronize is called: memcheck counts every CUDA call
// that fails after its error, and those calls must be the same with and without luma.
// Exit 0 the kernel ran (memcheck's findings are its own output), 1 a setup call failed,
// 2 usage, 77 no device. Needs a GPU; never run by CI.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "gpu_checks.cuh"

namespace {

constexpr int kFloats = 1000;  // the allocation the kernel overflows
constexpr int kPast = 16;      // floats written past its end

__global__ void overflow_kernel(float* a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = static_cast<float>(i);  // i >= kFloats: out of bounds
}

bool luma_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libluma.so") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const bool neighbour = argc == 2 && std::strcmp(argv[1], "neighbour") == 0;
  if (argc != 2 || (!neighbour && std::strcmp(argv[1], "alone") != 0)) {
    std::fprintf(stderr, "usage: gpu_overflow alone|neighbour\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gpu_overflow: no CUDA device: skipped\n");
    return 77;
  }
  const char* nvtx = std::getenv("NVTX_INJECTION64_PATH");
  std::printf("libluma.so mapped: %s\n", luma_mapped() ? "yes" : "no");
  std::printf("NVTX tool announced (NVTX_INJECTION64_PATH): %s\n",
              nvtx != nullptr && nvtx[0] != '\0' ? "yes" : "no");

  float* a = nullptr;
  float* b = nullptr;
  const size_t bytes = kFloats * sizeof(float);
  GPU_CHECK(cudaMalloc(&a, bytes));
  GPU_CHECK(cudaMemset(a, 0, bytes));
  if (neighbour) {
    GPU_CHECK(cudaMalloc(&b, bytes));
    GPU_CHECK(cudaMemset(b, 0, bytes));
    const long long gap = reinterpret_cast<char*>(b) - reinterpret_cast<char*>(a);
    std::printf("layout: second allocation at first + %lld bytes; the overflow writes bytes "
                "[%zu, %zu) of the first%s\n",
                gap, bytes, bytes + kPast * sizeof(float),
                gap > 0 && static_cast<size_t>(gap) < bytes + kPast * sizeof(float)
                    ? ", reaching into the second"
                    : "");
  }
  GPU_CHECK(cudaDeviceSynchronize());

  overflow_kernel<<<1, kFloats + kPast>>>(a, kFloats + kPast);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t sync = cudaDeviceSynchronize();
  std::printf("overflow: %d floats written past a %d-float allocation; launch %d, "
              "synchronize %d\n",
              kPast, kFloats, static_cast<int>(launch), static_cast<int>(sync));
  // Nothing more: after memcheck's error the context may be gone, and every further call
  // would add an error of its own to its summary.
  return 0;
}
