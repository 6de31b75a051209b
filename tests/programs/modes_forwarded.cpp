// modes_forwarded.cpp - the workload's modes over the allocation paths luma forwards to
// the driver (driver API): pinned host and managed memory, pools of the program's own and
// virtual memory management.
#include <cstdio>
#include <cstring>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {

// Pinned host and managed memory, which luma forwards to the driver (and counts): ROUNDS
// rounds of cuMemAllocHost(4 KiB * (i+1)) written and read back, then cuMemFreeHost, and
// cuMemAllocManaged(8 KiB) written through the host, then cuMemFree. Nothing else is
// allocated, so luma's statistics hold only these calls.
int mode_host_managed(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  const DriverCalls* D = driver_calls("host-managed");
  if (D == nullptr) return 0;
  size_t rounds = argc == 1 ? parse(argv[0], "ROUNDS") : 4;
  for (size_t i = 0; i < rounds; ++i) {
    const size_t n = 4096 * (i + 1);
    void* h = nullptr;
    ok(D->host_alloc(&h, n), "cuMemAllocHost");
    std::memset(h, static_cast<int>(i + 1), n);
    if (static_cast<unsigned char*>(h)[n - 1] != i + 1) fail("host-managed: host data", static_cast<int>(i));
    ok(D->host_free(h), "cuMemFreeHost");
    void* m = nullptr;
    ok(D->managed_alloc(&m, 8192), "cuMemAllocManaged");
    std::memset(m, 7, 8192);
    ok(A.free(m), "cuMemFree of managed memory");
  }
  std::printf("host-managed: %zu pinned host and managed rounds ok\n", rounds);
  return 0;
}

// The allocation paths luma forwards beside cuMemAllocAsync (the driver API's pools and
// virtual memory): ROUNDS rounds of cuMemAllocFromPoolAsync(4 KiB * (i+1)) from a pool of
// the program's own, used and freed with cuMemFreeAsync; then ROUNDS rounds of cuMemCreate
// (2 x granularity), reserved, mapped, made accessible, used, unmapped, the range freed and
// the memory released. The driver's errors must reach the program unchanged: cuMemCreate
// of a size off the granularity and an allocation from a destroyed pool give
// CUDA_ERROR_INVALID_VALUE. Nothing else is allocated.
int mode_pool_vmm(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  const DriverCalls* D = driver_calls("pool-vmm");
  if (D == nullptr) return 0;
  const size_t rounds = argc == 1 ? parse(argv[0], "ROUNDS") : 3;
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create");
  void* pool = nullptr;
  ok(D->pool_create(&pool), "cuMemPoolCreate");
  std::vector<unsigned char> buf(4096 * (rounds + 1));
  for (size_t i = 0; i < rounds; ++i) {
    const size_t n = 4096 * (i + 1);
    void* p = nullptr;
    ok(D->pool_alloc(&p, n, pool, s), "cuMemAllocFromPoolAsync");
    const int v = static_cast<int>(i % 200) + 1;
    ok(A.memset_async(p, v, n, s), "memsetAsync");
    ok(A.dtoh_async(buf.data(), p, n, s), "memcpyAsync DtoH");
    ok(A.free_async(p, s), "cuMemFreeAsync");
    ok(A.stream_sync(s), "stream sync");
    if (buf[0] != v || buf[n - 1] != v) fail("pool-vmm: pool data", static_cast<int>(i));
  }
  ok(D->pool_destroy(pool), "cuMemPoolDestroy");
  void* q = nullptr;
  if (int r = D->pool_alloc(&q, 4096, pool, s); r != A.invalid_code)
    fail("pool-vmm: cuMemAllocFromPoolAsync from a destroyed pool returned", r);
  size_t g = 0;
  ok(D->vmm_granularity(&g), "cuMemGetAllocationGranularity");
  unsigned long long h = 0;
  if (int r = D->vmm_create(&h, g + 4096); r != A.invalid_code)
    fail("pool-vmm: cuMemCreate of a size off the granularity returned", r);
  for (size_t i = 0; i < rounds; ++i) {
    ok(D->vmm_create(&h, 2 * g), "cuMemCreate");
    void* va = nullptr;
    ok(D->vmm_reserve(&va, 4 * g), "cuMemAddressReserve");
    ok(D->vmm_map(va, 2 * g, h), "cuMemMap");
    ok(D->vmm_set_access(va, 2 * g), "cuMemSetAccess");
    const int v = static_cast<int>(i % 200) + 7;
    ok(A.memset(va, v, 2 * g), "memset of mapped memory");
    unsigned char last = 0;
    ok(A.dtoh(&last, static_cast<unsigned char*>(va) + 2 * g - 1, 1), "memcpy DtoH");
    if (last != v) fail("pool-vmm: mapped data", static_cast<int>(i));
    ok(D->vmm_unmap(va, 2 * g), "cuMemUnmap");
    ok(D->vmm_free_range(va, 4 * g), "cuMemAddressFree");
    ok(D->vmm_release(h), "cuMemRelease");
  }
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("pool-vmm: %zu pool and %zu virtual memory rounds ok (granularity %zu)\n", rounds,
              rounds, g);
  return 0;
}

}  // namespace luma::programs
