// gpu_runtime.cu - real-GPU test program through the CUDA runtime, built twice: with nvcc's
// default static runtime (gpu_static, kind a) and with -cudart shared (gpu_shared, kind b).
// Modes: basic, hazard (kernels on several non-blocking streams reusing freed memory),
// threads (multi-threaded allocation with kernels checking each block), meminfo, oom.
// Exit 0 ok, 1 wrong result, 2 usage, 3 CORRUPTED (hazard observed). Needs a GPU.
#include <cstring>
#include <thread>
#include <vector>

#include "gpu_checks.cuh"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

int basic() {
  for (int i = 0; i < 1000; ++i) {
    size_t n = 256 + static_cast<size_t>(i % 37) * 4096;
    void* p = nullptr;
    GPU_CHECK(cudaMalloc(&p, n));
    unsigned char v = static_cast<unsigned char>(i % 250 + 1);
    fill_kernel<<<32, 256>>>(static_cast<unsigned char*>(p), n, v, 0);
    if (device_mismatches(p, n, v, 0) != 0) {
      std::fprintf(stderr, "basic: block %d has wrong bytes\n", i);
      return 1;
    }
    GPU_CHECK(cudaFree(p));
  }
  std::printf("basic: 1000 alloc/kernel/check/free rounds ok\n");
  return 0;
}

// A slow kernel writes X on a non-blocking stream; X is freed at once and Y allocated and
// written on another non-blocking stream. cudaFree promises the first kernel is done, so Y
// must hold only the second pattern.
int hazard() {
  constexpr int kStreams = 4;
  cudaStream_t s[kStreams];
  for (auto& st : s) GPU_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int corrupted = 0;
  for (int round = 0; round < 20; ++round) {
    const size_t n = 8 * kMiB;
    void* x = nullptr;
    GPU_CHECK(cudaMalloc(&x, n));
    fill_kernel<<<64, 256, 0, s[round % kStreams]>>>(static_cast<unsigned char*>(x), n, 0xAA,
                                                     20'000'000);  // ~10 ms of spinning
    GPU_CHECK(cudaFree(x));
    void* y = nullptr;
    GPU_CHECK(cudaMalloc(&y, n));
    cudaStream_t other = s[(round + 1) % kStreams];
    fill_kernel<<<64, 256, 0, other>>>(static_cast<unsigned char*>(y), n, 0x55, 0);
    GPU_CHECK(cudaDeviceSynchronize());
    if (device_mismatches(y, n, 0x55, other) != 0) ++corrupted;
    GPU_CHECK(cudaFree(y));
  }
  for (auto& st : s) GPU_CHECK(cudaStreamDestroy(st));
  if (corrupted != 0) {
    std::printf("hazard: CORRUPTED in %d of 20 rounds\n", corrupted);
    return 3;
  }
  std::printf("hazard: CLEAN\n");
  return 0;
}

int threads() {
  constexpr int kThreads = 8;
  std::vector<std::thread> pool;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([t, &bad] {
      cudaStream_t s;
      GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      for (int i = 0; i < 300; ++i) {
        size_t n = 512 + static_cast<size_t>((i * 7919 + t) % 200) * 1024;
        void* p = nullptr;
        GPU_CHECK(cudaMalloc(&p, n));
        unsigned char v = static_cast<unsigned char>((t * 31 + i) % 250 + 1);
        fill_kernel<<<16, 256, 0, s>>>(static_cast<unsigned char*>(p), n, v, 0);
        if (device_mismatches(p, n, v, s) != 0) ++bad[t];
        GPU_CHECK(cudaFree(p));
      }
      GPU_CHECK(cudaStreamDestroy(s));
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) {
    if (bad[t] != 0) {
      std::fprintf(stderr, "threads: thread %d saw %d wrong blocks\n", t, bad[t]);
      return 1;
    }
  }
  std::printf("threads: %d threads x 300 checked blocks ok\n", kThreads);
  return 0;
}

int meminfo() {
  size_t f0, t0, f1, t1, f2, t2;
  GPU_CHECK(cudaMemGetInfo(&f0, &t0));
  const size_t n = 1024 * kMiB;
  void* p = nullptr;
  GPU_CHECK(cudaMalloc(&p, n));
  GPU_CHECK(cudaMemGetInfo(&f1, &t1));
  GPU_CHECK(cudaFree(p));
  GPU_CHECK(cudaMemGetInfo(&f2, &t2));
  std::printf("meminfo: total %zu; free %zu -> %zu (1 GiB allocated) -> %zu\n", t0, f0, f1, f2);
  if (t0 != t1 || t1 != t2 || f1 + n > f0 || f2 < f1) return 1;
  return 0;
}

int oom() {
  std::vector<void*> held;
  cudaError_t last = cudaSuccess;
  const size_t chunk = 4096 * kMiB;
  while (held.size() < 4096) {
    void* p = nullptr;
    last = cudaMalloc(&p, chunk);
    if (last != cudaSuccess) break;
    held.push_back(p);
  }
  if (last != cudaErrorMemoryAllocation || held.empty()) {
    std::fprintf(stderr, "oom: got %d after %zu chunks\n", last, held.size());
    return 1;
  }
  if (cudaGetLastError() != cudaErrorMemoryAllocation || cudaGetLastError() != cudaSuccess) {
    std::fprintf(stderr, "oom: the error is sticky or was not recorded\n");
    return 1;
  }
  for (void* p : held) GPU_CHECK(cudaFree(p));
  void* p = nullptr;
  GPU_CHECK(cudaMalloc(&p, chunk));
  fill_kernel<<<64, 256>>>(static_cast<unsigned char*>(p), chunk, 9, 0);
  if (device_mismatches(p, chunk, 9, 0) != 0) return 1;
  GPU_CHECK(cudaFree(p));
  std::printf("oom: out of memory after %zu x 4 GiB; recovered\n", held.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "basic") == 0) return basic();
  if (std::strcmp(mode, "hazard") == 0) return hazard();
  if (std::strcmp(mode, "threads") == 0) return threads();
  if (std::strcmp(mode, "meminfo") == 0) return meminfo();
  if (std::strcmp(mode, "oom") == 0) return oom();
  std::fprintf(stderr, "usage: %s basic|hazard|threads|meminfo|oom\n", argv[0]);
  return 2;
}
