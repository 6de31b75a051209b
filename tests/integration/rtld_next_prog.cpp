// rtld_next_prog.cpp - a driver-API program linked with rtld_next_wrapper.so before the
// driver: its calls reach the wrapper's definitions, which forward with RTLD_NEXT. Under
// luma they must still reach the driver (exit 0), never the wrapper again (exit 9).
#include <cstdio>

#include "fake_driver_api.h"

int main() {
  if (cuInit(0) != CUDA_SUCCESS) return 2;
  int n = -1;
  if (CUresult r = cuDeviceGetCount(&n); r != CUDA_SUCCESS || n < 1) {
    std::printf("cuDeviceGetCount -> %d, n=%d\n", static_cast<int>(r), n);
    return 1;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return 2;
  CUdeviceptr p = 0;
  if (CUresult r = cuMemAlloc_v2(&p, 4096); r != CUDA_SUCCESS || p == 0) {
    std::printf("cuMemAlloc_v2 -> %d\n", static_cast<int>(r));
    return 1;
  }
  if (cuMemFree_v2(p) != CUDA_SUCCESS) return 1;
  std::printf("rtld-next: %d devices, alloc and free ok\n", n);
  return 0;
}
