// fake_driver_test.cpp - tests of the stand-in driver (tests/fake/libcuda.so.1, a TEST
// DOUBLE) itself: the other tests trust it to behave like the real driver in what they rely
// on (cuGetProcAddress versions and flags, legacy-stream ordering, events, OOM, failure
// injection, contexts). Ordering is checked with the stand-in's gate, never with timing.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "fake_control.h"
#include "fake_driver_api.h"

namespace {

// Must stay the first test of this file: nothing has called cuInit yet.
TEST(FakeDriverInit, CallsBeforeCuInitReturnNotInitialized) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 1024), CUDA_ERROR_NOT_INITIALIZED);
  int count = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);  // works before cuInit
  EXPECT_EQ(version, 13000);
  void* fn = nullptr;
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", &fn, 2000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuInit));
}

class FakeDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    luma_fake_reset();
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx0_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx1_, 1), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  }
  void TearDown() override {
    luma_fake_set_gate_open(1);
    cuCtxSynchronize();
    luma_fake_reset();
  }
  static luma_fake_counters counters(int device) {
    luma_fake_counters c{};
    EXPECT_EQ(luma_fake_get_counters(device, &c), 0);
    return c;
  }
  CUcontext ctx0_ = nullptr;
  CUcontext ctx1_ = nullptr;
};

void* proc(const char* name, int version, cuuint64_t flags, CUresult* r,
           CUdriverProcAddressQueryResult* status) {
  void* fn = reinterpret_cast<void*>(1);
  *r = cuGetProcAddress_v2(name, &fn, version, flags, status);
  return fn;
}

#define FN(f) reinterpret_cast<void*>(&f)

TEST_F(FakeDriver, GetProcAddressVersionSelectsAbi) {
  CUresult r;
  CUdriverProcAddressQueryResult st;
  EXPECT_EQ(proc("cuMemAlloc", 3020, 0, &r, &st), FN(cuMemAlloc_v2));
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(proc("cuMemAlloc", 13000, 0, &r, &st), FN(cuMemAlloc_v2));
  EXPECT_EQ(proc("cuMemAlloc", 3010, 0, &r, &st), FN(cuMemAlloc));  // the 32-bit ABI
  EXPECT_NE(FN(cuMemAlloc), FN(cuMemAlloc_v2));
  EXPECT_EQ(proc("cuMemFree", 3020, 0, &r, &st), FN(cuMemFree_v2));
  EXPECT_EQ(proc("cuMemGetInfo", 3020, 0, &r, &st), FN(cuMemGetInfo_v2));
  EXPECT_EQ(proc("cuMemGetAddressRange", 3020, 0, &r, &st), FN(cuMemGetAddressRange_v2));
  EXPECT_EQ(proc("cuCtxGetDevice", 2000, 0, &r, &st), FN(cuCtxGetDevice));
  EXPECT_EQ(proc("cuCtxGetDevice", 12090, 0, &r, &st), FN(cuCtxGetDevice));
  EXPECT_EQ(proc("cuCtxGetDevice", 13000, 0, &r, &st), FN(cuCtxGetDevice_v2));
  EXPECT_EQ(proc("cuCtxSynchronize", 13000, 0, &r, &st), FN(cuCtxSynchronize_v2));
  EXPECT_EQ(proc("cuGetProcAddress", 11030, 0, &r, &st), FN(cuGetProcAddress));
  EXPECT_EQ(proc("cuGetProcAddress", 12000, 0, &r, &st), FN(cuGetProcAddress_v2));
}

TEST_F(FakeDriver, GetProcAddressPerThreadFlagSelectsPtszVariant) {
  CUresult r;
  CUdriverProcAddressQueryResult st;
  EXPECT_EQ(proc("cuMemAllocAsync", 11020, 0, &r, &st), FN(cuMemAllocAsync));
  EXPECT_EQ(proc("cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &r,
                 &st),
            FN(cuMemAllocAsync_ptsz));
  EXPECT_EQ(proc("cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &r,
                 &st),
            FN(cuMemFreeAsync_ptsz));
  EXPECT_EQ(proc("cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &r, &st),
            FN(cuMemFreeAsync));
  EXPECT_EQ(proc("cuMemcpyHtoD", 3020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &r, &st),
            FN(cuMemcpyHtoD_v2_ptds));
  // No per-thread variant: the legacy one.
  EXPECT_EQ(proc("cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &r, &st),
            FN(cuMemAlloc_v2));
}

TEST_F(FakeDriver, GetProcAddressFailures) {
  CUresult r;
  CUdriverProcAddressQueryResult st;
  EXPECT_EQ(proc("cuNoSuchFunction", 13000, 0, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(proc("", 0, 0, &r, &st), nullptr);  // the runtime's first probe
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(proc("cuMemAllocAsync", 11010, 0, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(proc("cuMemAlloc", 13010, 0, &r, &st), nullptr);  // above the driver's version
  EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE);
  void* fn = nullptr;
  EXPECT_EQ(cuGetProcAddress("cuMemFree", &fn, 3020, 0), CUDA_SUCCESS);  // v1 signature
  EXPECT_EQ(fn, FN(cuMemFree_v2));
}

TEST_F(FakeDriver, AllocAndFreeFollowDriverRules) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAlloc_v2(&p, 1000), CUDA_SUCCESS);
  EXPECT_EQ(p % 512, 0u);
  std::memset(reinterpret_cast<void*>(p), 7, 1000);  // device pointers are host addresses
  luma_fake_counters c = counters(0);
  EXPECT_EQ(c.mem_alloc_calls, 1u);
  EXPECT_EQ(c.live_allocations, 1u);
  EXPECT_EQ(c.live_bytes, 1024u);

  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, p + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 1000u);
  CUdeviceptr start = 0;
  size_t range = 0;
  int ordinal = -1;
  unsigned long long id = 0;
  EXPECT_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 8),
            CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 8),
            CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p),
            CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p), CUDA_SUCCESS);
  EXPECT_EQ(start, p);
  EXPECT_EQ(range, 1000u);
  EXPECT_EQ(ordinal, 0);
  EXPECT_NE(id, 0u);

  EXPECT_EQ(cuMemFree_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p + 512), CUDA_ERROR_INVALID_VALUE);  // interior
  int host = 0;
  EXPECT_EQ(cuMemFree_v2(reinterpret_cast<CUdeviceptr>(&host)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);  // double
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, p), CUDA_ERROR_NOT_FOUND);
  c = counters(0);
  EXPECT_EQ(c.mem_free_calls, 1u);
  EXPECT_EQ(c.live_allocations, 0u);
  EXPECT_EQ(c.live_bytes, 0u);
  EXPECT_EQ(c.peak_bytes, 1024u);
}

TEST_F(FakeDriver, CapacityGivesOutOfMemoryAndRecovers) {
  luma_fake_set_capacity(1 << 20);
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 1u << 20);
  EXPECT_EQ(total, 1u << 20);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 0u);
  EXPECT_EQ(cuMemAlloc_v2(&b, 512), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(counters(0).failed_allocs, 1u);
  ASSERT_EQ(cuCtxSetCurrent(ctx1_), CUDA_SUCCESS);  // capacity is per device
  ASSERT_EQ(cuMemAlloc_v2(&b, 512), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, 512), CUDA_SUCCESS);  // not sticky
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
}

TEST_F(FakeDriver, FailureInjectionFailsEveryNthAllocation) {
  luma_fake_set_fail_every(3);
  std::vector<CUresult> results;
  for (int i = 0; i < 6; ++i) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, 4096);
    results.push_back(r);
    if (r == CUDA_SUCCESS) {
      EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    }
  }
  std::vector<CUresult> expected = {CUDA_SUCCESS, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY,
                                    CUDA_SUCCESS, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY};
  EXPECT_EQ(results, expected);
  EXPECT_EQ(counters(0).failed_allocs, 2u);
}

TEST_F(FakeDriver, LegacyStreamWaitsForBlockingStreamsOnly) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  CUstream blocking = nullptr, non_blocking = nullptr;
  ASSERT_EQ(cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent on_legacy = nullptr, on_nb = nullptr;
  ASSERT_EQ(cuEventCreate(&on_legacy, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&on_nb, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);

  luma_fake_set_gate_open(0);
  ASSERT_EQ(cuMemsetD8Async(p, 1, 4096, blocking), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(on_legacy, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(on_legacy), CUDA_ERROR_NOT_READY);  // waits for the blocking stream
  luma_fake_set_gate_open(1);
  EXPECT_EQ(cuEventSynchronize(on_legacy), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(on_legacy), CUDA_SUCCESS);

  luma_fake_set_gate_open(0);
  ASSERT_EQ(cuMemsetD8Async(p, 2, 4096, non_blocking), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(on_nb, non_blocking), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(on_legacy, LUMA_CU_STREAM_LEGACY), CUDA_SUCCESS);
  // Would hang if the legacy stream waited for the non-blocking one.
  EXPECT_EQ(cuEventSynchronize(on_legacy), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(on_nb), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(non_blocking), CUDA_ERROR_NOT_READY);
  luma_fake_set_gate_open(1);
  EXPECT_EQ(cuStreamSynchronize(non_blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(on_nb), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(p)[100], 2);

  // A blocking stream waits for earlier legacy-stream work.
  CUevent on_blocking = nullptr;
  ASSERT_EQ(cuEventCreate(&on_blocking, 0), CUDA_SUCCESS);
  luma_fake_set_gate_open(0);
  ASSERT_EQ(cuMemsetD8Async(p, 3, 4096, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(on_blocking, blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(on_blocking), CUDA_ERROR_NOT_READY);
  luma_fake_set_gate_open(1);
  EXPECT_EQ(cuEventSynchronize(on_blocking), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(p)[100], 3);

  unsigned flags = 99;
  EXPECT_EQ(cuStreamGetFlags(non_blocking, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_STREAM_NON_BLOCKING);
  EXPECT_EQ(cuStreamGetFlags(blocking, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_STREAM_DEFAULT);
  EXPECT_EQ(cuEventDestroy_v2(on_blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(on_blocking), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy_v2(on_legacy), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(on_nb), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(non_blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(non_blocking), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(FakeDriver, UnrecordedEventIsComplete) {
  CUevent e = nullptr;
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
}

TEST_F(FakeDriver, MemFreeWaitsForQueuedWork) {
  luma_fake_set_delay_us(20000);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 1 << 16), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(p, 0xAA, 1 << 16, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);  // cuMemFree synchronized the context
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(FakeDriver, AsyncAllocationIsOrderedOnItsStream) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 4096, s), CUDA_SUCCESS);
  std::vector<unsigned char> out(4096, 0);
  ASSERT_EQ(cuMemsetD8Async(p, 0x5A, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), p, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0x5A);
  EXPECT_EQ(out[4095], 0x5A);
  EXPECT_EQ(counters(0).live_allocations, 0u);
  EXPECT_EQ(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(FakeDriver, ContextsArePerThreadAndPerDevice) {
  ASSERT_EQ(cuCtxSetCurrent(ctx1_), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  int ordinal = -1;
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p),
            CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(counters(1).live_allocations, 1u);
  CUdevice d = -1;
  EXPECT_EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
  EXPECT_EQ(d, 1);
  EXPECT_EQ(cuCtxGetDevice_v2(&d, ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(d, 0);
  ASSERT_EQ(cuCtxPushCurrent_v2(ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
  EXPECT_EQ(d, 0);
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, ctx0_);

  CUresult in_thread_alloc = CUDA_SUCCESS, in_thread_free = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    CUdeviceptr q = 0;
    in_thread_alloc = cuMemAlloc_v2(&q, 64);  // no current context in a new thread
    cuCtxSetCurrent(ctx0_);
    in_thread_free = cuMemFree_v2(p);  // another device current: still freed
  });
  t.join();
  EXPECT_EQ(in_thread_alloc, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(in_thread_free, CUDA_SUCCESS);
  EXPECT_EQ(counters(1).live_allocations, 0u);
  int count = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, luma_fake_device_count());
  CUcontext bad = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&bad, count), CUDA_ERROR_INVALID_DEVICE);
}

// cuDeviceTotalMem_v2: the device's capacity, whatever is allocated; bad arguments refused.
TEST_F(FakeDriver, DeviceTotalMemIsTheCapacity) {
  size_t total = 0, free = 0, info_total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo_v2(&free, &info_total), CUDA_SUCCESS);
  EXPECT_EQ(total, info_total);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 1 << 20), CUDA_SUCCESS);
  size_t again = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, total);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceTotalMem_v2(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceTotalMem_v2(&again, luma_fake_device_count()), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(FakeDriver, SynchronousCopiesRoundTrip) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 256), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, 256), CUDA_SUCCESS);
  std::vector<unsigned char> in(256), out(256, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i);
  ASSERT_EQ(cuMemcpyHtoD_v2(a, in.data(), 256), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(b, a, 256), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2_ptds(out.data(), b, 256), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
  EXPECT_EQ(cuMemsetD8_v2(a, 1, 512), CUDA_ERROR_INVALID_VALUE);  // past the allocation
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  const char* s = nullptr;
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "out of memory");
}

}  // namespace
