// gpu_driver.cu - real-GPU test program of kind (c): device memory through the driver API
// (cuMemAlloc_v2 / cuMemFree_v2 / cuMemGetInfo_v2 called by name, linked with -lcuda) in the
// device's primary context, checked by kernels. Exit 0 ok, 1 wrong result. Needs a GPU.
#include <cuda.h>

#include <thread>
#include <vector>

#include "gpu_checks.cuh"

int main() {
  GPU_CHECK(cuInit(0));
  CUdevice dev;
  GPU_CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  GPU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  GPU_CHECK(cuCtxSetCurrent(ctx));
  CUdeviceptr z = 0;
  if (cuMemAlloc(&z, 0) != CUDA_ERROR_INVALID_VALUE) return 1;
  for (int i = 0; i < 1000; ++i) {
    size_t n = 512 + static_cast<size_t>(i % 41) * 8192;
    CUdeviceptr p = 0;
    GPU_CHECK(cuMemAlloc(&p, n));
    unsigned char v = static_cast<unsigned char>(i % 250 + 1);
    fill_kernel<<<32, 256>>>(reinterpret_cast<unsigned char*>(p), n, v, 0);
    if (device_mismatches(reinterpret_cast<void*>(p), n, v, 0) != 0) return 1;
    GPU_CHECK(cuMemFree(p));
  }
  CUdeviceptr p = 0;
  GPU_CHECK(cuMemAlloc(&p, 1 << 20));
  GPU_CHECK(cuMemFree(p));
  if (cuMemFree(p) != CUDA_ERROR_INVALID_VALUE) return 1;  // double free
  size_t free_b = 0, total_b = 0;
  GPU_CHECK(cuMemGetInfo(&free_b, &total_b));
  std::vector<std::thread> pool;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&, t] {
      GPU_CHECK(cuCtxSetCurrent(ctx));
      for (int i = 0; i < 200; ++i) {
        CUdeviceptr q = 0;
        size_t n = 4096 * static_cast<size_t>(1 + (i + t) % 64);
        GPU_CHECK(cuMemAlloc(&q, n));
        fill_kernel<<<16, 256>>>(reinterpret_cast<unsigned char*>(q), n, 7, 0);
        if (device_mismatches(reinterpret_cast<void*>(q), n, 7, 0) != 0) ++bad[t];
        GPU_CHECK(cuMemFree(q));
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int b : bad) {
    if (b != 0) return 1;
  }
  std::printf("driver: 1000 + 4x200 checked driver allocations ok; free %zu of %zu\n", free_b,
              total_b);
  return 0;
}
