// fake_vmm_test.cpp - tests of the stand-in driver's memory pools and virtual memory
// management calls (fake_vmm.cpp): the documented rules and error codes that luma's
// forwarding tests rely on (tests/fake/README.md names the source of each).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fake_control.h"
#include "fake_driver_api.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

class FakeVmm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    luma_fake_reset();
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx0_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  }
  void TearDown() override {
    cuCtxSynchronize();
    luma_fake_reset();
  }
  static CUmemAllocationProp prop(int device) {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
  }
  static size_t granularity() {
    size_t g = 0;
    const CUmemAllocationProp p = prop(0);
    EXPECT_EQ(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
    return g;
  }
  CUcontext ctx0_ = nullptr;
};

TEST_F(FakeVmm, DefaultPoolIsOnePerDeviceAndCannotBeDestroyed) {
  CUmemoryPool a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&b, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&c, 1), CUDA_SUCCESS);
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(cuMemPoolDestroy(a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetDefaultMemPool(&a, 99), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetDefaultMemPool(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeVmm, PoolAllocationsAreStreamOrderedDeviceMemory) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&p, 4096, pool, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(p, 0x3C, 4096, s), CUDA_SUCCESS);
  std::vector<unsigned char> out(4096);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), p, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(out[4095], 0x3C);
  // The per-thread twin allocates on the calling thread's default stream.
  ASSERT_EQ(cuMemAllocFromPoolAsync_ptsz(&p, 512, pool, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync_ptsz(p, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  // A destroyed pool is no pool any more.
  EXPECT_EQ(cuMemAllocFromPoolAsync(&p, 4096, pool, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocFromPoolAsync(&p, 4096, reinterpret_cast<CUmemoryPool>(&p), s),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(FakeVmm, PoolCreateChecksItsProperties) {
  CUmemPoolProps props{};
  CUmemoryPool pool = nullptr;
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);  // no allocation type
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 42;
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);  // no such device
  props.location.id = 0;
  EXPECT_EQ(cuMemPoolCreate(nullptr, &props), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolCreate(&pool, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeVmm, GranularityIsTwoMiB) {
  EXPECT_EQ(granularity(), 2 * kMiB);
  size_t g = 0;
  CUmemAllocationProp bad = prop(0);
  bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_EQ(cuMemGetAllocationGranularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
}

// The whole documented sequence: create, reserve, map, grant access, use, unmap, free the
// range, release; the memory is visible through the mapping.
TEST_F(FakeVmm, CreateReserveMapAccessAndRelease) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, 2 * g, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 4 * g, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(va % g, 0u);
  ASSERT_EQ(cuMemMap(va + g, 2 * g, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(cuMemSetAccess(va + g, 2 * g, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(va + g, 0x11, 2 * g), CUDA_SUCCESS);
  unsigned char out[4] = {};
  ASSERT_EQ(cuMemcpyDtoH_v2(out, va + 3 * g - 4, 4), CUDA_SUCCESS);
  EXPECT_EQ(out[3], 0x11);
  // The unmapped part of the reservation is no memory.
  EXPECT_EQ(cuMemsetD8_v2(va, 0, 16), CUDA_ERROR_INVALID_VALUE);
  // Released while mapped: the mapping keeps the memory until it is unmapped.
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(out, va + g, 4), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0x11);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // released once
  ASSERT_EQ(cuMemUnmap(va + g, 2 * g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8_v2(va + g, 0, 16), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAddressFree(va, 4 * g), CUDA_SUCCESS);
}

// "The size of this allocation must be a multiple of the value given via
// cuMemGetAllocationGranularity with the CU_MEM_ALLOC_GRANULARITY_MINIMUM flag."
TEST_F(FakeVmm, CreateRefusesSizesOffTheGranularity) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, g + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, g, &p, 1), CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  EXPECT_EQ(cuMemCreate(&h, g, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp other = prop(42);
  EXPECT_EQ(cuMemCreate(&h, g, &other, 0), CUDA_ERROR_INVALID_VALUE);
  luma_fake_set_capacity(4 * g);
  EXPECT_EQ(cuMemCreate(&h, 8 * g, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(FakeVmm, MapChecksRangeOffsetAndHandle) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, 2 * g, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 2 * g, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, g + 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE);   // size
  EXPECT_EQ(cuMemMap(va, g, 4096, h, 0), CUDA_ERROR_INVALID_VALUE);       // offset
  EXPECT_EQ(cuMemMap(va, 4 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);      // past the end
  EXPECT_EQ(cuMemMap(va + g, 2 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // past the range
  EXPECT_EQ(cuMemMap(va, g, 0, h + 1000, 0), CUDA_ERROR_INVALID_VALUE);   // no such handle
  EXPECT_EQ(cuMemMap(va, g, 0, h, 1), CUDA_ERROR_INVALID_VALUE);          // flags
  // "currently must be zero": no piece of an allocation but its start maps on its own.
  EXPECT_EQ(cuMemMap(va + g, g, g, h, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_SUCCESS);  // the first half of the allocation
  EXPECT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // already mapped there
  ASSERT_EQ(cuMemMap(va + g, g, 0, h, 0), CUDA_SUCCESS);  // the same start mapped again
  // Unmap takes whole mappings only (one or several adjacent ones).
  EXPECT_EQ(cuMemUnmap(va, g / 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(va + g / 2, g), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemUnmap(va, 2 * g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(va, g), CUDA_ERROR_INVALID_VALUE);  // nothing mapped any more
  EXPECT_EQ(cuMemAddressFree(va, g), CUDA_ERROR_INVALID_VALUE);  // not the reserved size
  ASSERT_EQ(cuMemAddressFree(va, 2 * g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // released handle
}

TEST_F(FakeVmm, ReserveAndAccessCheckTheirArguments) {
  const size_t g = granularity();
  CUdeviceptr va = 0;
  EXPECT_EQ(cuMemAddressReserve(&va, g + 1, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressReserve(&va, g, 3 * g, 0, 0), CUDA_ERROR_INVALID_VALUE);  // not 2^n
  ASSERT_EQ(cuMemAddressReserve(&va, g, 4 * g, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(va % (4 * g), 0u);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(cuMemSetAccess(va, g, &access, 1), CUDA_ERROR_INVALID_VALUE);  // nothing mapped
  EXPECT_EQ(cuMemSetAccess(va, g, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAddressFree(va, g), CUDA_SUCCESS);
}

// A mapped range is not cuMemAlloc memory: cuMemFree refuses it.
TEST_F(FakeVmm, MappedMemoryIsNotFreedByMemFree) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, g, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, g, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(va), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemUnmap(va, g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va, g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

// Each page its own handle and mapping, adjacent in one reservation (the way PyTorch's
// expandable segments grow): a copy or memset may run across the pages as across any
// contiguous memory, but not past the last mapped one.
TEST_F(FakeVmm, CopiesRunAcrossAdjacentMappings) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 4 * g, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h[3] = {};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(cuMemCreate(&h[i], g, &p, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemMap(va + i * g, g, 0, h[i], 0), CUDA_SUCCESS);
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(cuMemSetAccess(va, 3 * g, &access, 1), CUDA_SUCCESS);  // one call, three mappings
  ASSERT_EQ(cuMemsetD8_v2(va + g / 2, 0x5A, 2 * g), CUDA_SUCCESS);
  std::vector<unsigned char> out(2 * g);
  ASSERT_EQ(cuMemcpyDtoH_v2(out.data(), va + g / 2, 2 * g), CUDA_SUCCESS);
  EXPECT_EQ(out.front(), 0x5A);
  EXPECT_EQ(out[g], 0x5A);
  EXPECT_EQ(out.back(), 0x5A);
  EXPECT_EQ(cuMemsetD8_v2(va + 2 * g, 0, g + 1), CUDA_ERROR_INVALID_VALUE);  // into the hole
  // A pointer query names the mapping (the page) holding the pointer, not the reservation.
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, va + g + 5), CUDA_SUCCESS);
  EXPECT_EQ(base, va + g);
  EXPECT_EQ(size, g);
  ASSERT_EQ(cuMemUnmap(va, 3 * g), CUDA_SUCCESS);
  for (CUmemGenericAllocationHandle x : h) ASSERT_EQ(cuMemRelease(x), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va, 4 * g), CUDA_SUCCESS);
}

// cuMemSetAccess gives each device named its flags; cuMemGetAccess reads them back per
// device (none before any grant); a later grant for another device keeps the first.
TEST_F(FakeVmm, AccessIsKeptPerDevice) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, g, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, g, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_SUCCESS);
  CUmemLocation dev0{CU_MEM_LOCATION_TYPE_DEVICE, 0}, dev1{CU_MEM_LOCATION_TYPE_DEVICE, 1};
  unsigned long long flags = 99;
  ASSERT_EQ(cuMemGetAccess(&flags, &dev0, va), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEM_ACCESS_FLAGS_PROT_NONE});
  CUmemAccessDesc access{};
  access.location = dev0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(cuMemSetAccess(va, g, &access, 1), CUDA_SUCCESS);
  access.location = dev1;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  ASSERT_EQ(cuMemSetAccess(va, g, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetAccess(&flags, &dev0, va + 100), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEM_ACCESS_FLAGS_PROT_READWRITE});
  ASSERT_EQ(cuMemGetAccess(&flags, &dev1, va), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEM_ACCESS_FLAGS_PROT_READ});
  CUmemLocation bad{CU_MEM_LOCATION_TYPE_DEVICE, 42};
  EXPECT_EQ(cuMemGetAccess(&flags, &bad, va), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemUnmap(va, g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAccess(&flags, &dev0, va), CUDA_ERROR_INVALID_VALUE);  // nothing mapped
  ASSERT_EQ(cuMemAddressFree(va, g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

// Every device of the stand-in reaches every other one; none is its own peer.
TEST_F(FakeVmm, EveryOtherDeviceIsAPeer) {
  int can = -1;
  ASSERT_EQ(cuDeviceCanAccessPeer(&can, 1, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(cuDeviceCanAccessPeer(&can, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 0, 42), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(nullptr, 0, 1), CUDA_ERROR_INVALID_VALUE);
}

// "Takes a pointer to the base of an existing device memory allocation created with
// cuMemAlloc" (cuIpcGetMemHandle): mapped memory has no legacy IPC handle.
TEST_F(FakeVmm, MappedMemoryHasNoLegacyIpcHandle) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, g, &p, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, g, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_SUCCESS);
  CUipcMemHandle ipc{};
  EXPECT_EQ(cuIpcGetMemHandle(&ipc, va), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuIpcGetMemHandle(&ipc, va + 4096), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemUnmap(va, g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va, g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

// During a global capture the calls that change memory are refused like cuMemAlloc (not
// yet observed on a GPU: strict), invalidating the capture; in relaxed mode (the mode an
// allocator swaps to, as PyTorch does around cudaMalloc) they are answered. Queries are
// not refused.
TEST_F(FakeVmm, CallsThatChangeMemoryAreUnsafeInACapture) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  size_t gran = 0;
  EXPECT_EQ(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, g, &p, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUdeviceptr va = 0;
  EXPECT_EQ(cuMemAddressReserve(&va, g, 0, 0, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&h, g, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressReserve(&va, g, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va, g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va, g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(graph, nullptr);
  ASSERT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// One memory for both kinds of allocation: cuMemCreate memory is used memory to
// cuMemGetInfo and to cuMemAlloc, until its last mapping and its handle are gone.
TEST_F(FakeVmm, CreatedMemoryCountsAgainstTheCapacity) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  luma_fake_set_capacity(4 * g);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, 3 * g, &p, 0), CUDA_SUCCESS);
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, g);
  CUdeviceptr d = 0;
  EXPECT_EQ(cuMemAlloc_v2(&d, 2 * g), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 4 * g);
  ASSERT_EQ(cuMemAlloc_v2(&d, 2 * g), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
}

// device_peak_bytes is the device's memory at its peak counting both kinds at once: here
// 3 MiB of cuMemAlloc and 4 MiB of cuMemCreate are live together, a peak neither kind
// reaches alone (peak_bytes, cuMemAlloc's own, says 3 MiB). Refused calls (capacity, a
// second release) count nowhere; a reset restarts the peak from what is held.
TEST_F(FakeVmm, DevicePeakCountsAllocatedAndCreatedMemoryTogether) {
  const size_t g = granularity();
  const CUmemAllocationProp p = prop(0);
  luma_fake_counters c{};
  ASSERT_EQ(luma_fake_get_counters(0, &c), 0);
  const uint64_t base = c.device_peak_bytes;  // what earlier tests left live, if anything
  EXPECT_EQ(c.mem_create_calls, 0u);
  EXPECT_EQ(c.mem_release_calls, 0u);

  CUdeviceptr a = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 3 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(luma_fake_get_counters(0, &c), 0);
  EXPECT_EQ(c.device_peak_bytes, base + 3 * kMiB);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, 2 * g, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(luma_fake_get_counters(0, &c), 0);
  EXPECT_EQ(c.device_peak_bytes, base + 3 * kMiB + 2 * g);
  EXPECT_EQ(c.peak_bytes, c.live_bytes);  // cuMemAlloc's own peak never sees cuMemCreate
  EXPECT_EQ(c.mem_create_calls, 1u);

  // Refused: past the capacity (cuMemCreate and cuMemAlloc), a release of nothing.
  luma_fake_set_capacity(c.live_bytes + 2 * g + g);
  CUmemGenericAllocationHandle refused = 0;
  EXPECT_EQ(cuMemCreate(&refused, 2 * g, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr b = 0;
  EXPECT_EQ(cuMemAlloc_v2(&b, 2 * g), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemRelease(h + 1000), CUDA_ERROR_INVALID_VALUE);

  ASSERT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  // Less than the peak held again: the peak stays.
  ASSERT_EQ(cuMemCreate(&h, g, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&a, kMiB), CUDA_SUCCESS);
  ASSERT_EQ(luma_fake_get_counters(0, &c), 0);
  EXPECT_EQ(c.device_peak_bytes, base + 3 * kMiB + 2 * g);
  EXPECT_EQ(c.mem_create_calls, 2u);
  EXPECT_EQ(c.mem_release_calls, 1u);
  EXPECT_EQ(c.mem_alloc_calls, 2u);

  // A reset restarts it from what the device holds now: both kinds.
  luma_fake_reset();
  ASSERT_EQ(luma_fake_get_counters(0, &c), 0);
  EXPECT_EQ(c.device_peak_bytes, base + kMiB + g);
  EXPECT_EQ(c.mem_create_calls, 0u);
  EXPECT_EQ(c.mem_release_calls, 0u);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  ASSERT_EQ(luma_fake_get_counters(0, &c), 0);
  EXPECT_EQ(c.mem_release_calls, 1u);
  EXPECT_EQ(c.device_peak_bytes, base + kMiB + g);
}

TEST_F(FakeVmm, ProcAddressKnowsThePoolAndVmmCalls) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st = 0;
  ASSERT_EQ(cuGetProcAddress_v2("cuMemCreate", &fn, 10020, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemCreate));
  EXPECT_EQ(cuGetProcAddress_v2("cuMemCreate", &fn, 10010, 0, &st), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(cuGetProcAddress_v2("cuMemAllocFromPoolAsync", &fn, 11020,
                                CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
            CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemAllocFromPoolAsync_ptsz));
}

}  // namespace
