// cub_yardstick.cpp - CUB's cub::CachingDeviceAllocator under the same alloc+free pattern,
// over the CUDA runtime test double (cuda_runtime_test_double.cpp): the yardstick luma's
// allocator must beat by 3x. Settings: bin_growth 8, bins from 8^3 = 512 B to 8^9 =
// 128 MiB (every size of the workload is binned, none bypasses the cache), unlimited
// cached bytes, no cleanup at exit (the test double keeps no memory).
#include <cub/util_allocator.cuh>

#include "bench_pairs.h"

namespace {

void BM_Cub(benchmark::State& state) {
  cub::CachingDeviceAllocator cub(8, 3, 9, cub::CachingDeviceAllocator::INVALID_SIZE, true);
  luma::bench::run_pairs(
      state,
      [&](std::size_t n) -> void* {
        void* p = nullptr;
        return cub.DeviceAllocate(&p, n) == cudaSuccess ? p : nullptr;
      },
      [&](void* p) { cub.DeviceFree(p); });
}
BENCHMARK(BM_Cub)->Apply(luma::bench::live_counts);

}  // namespace
