// fake_driver_test.cpp - tests of the stand-in driver (tests/fake/libcuda.so.1, a TEST
// DOUBLE) itself: the other tests trust it to behave like the real driver in what they rely
// on (cuGetProcAddress versions and flags, legacy-stream ordering, events, OOM, failure
// injection, contexts). Ordering is checked with the stand-in's gate, never with timing.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>
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

// An event recorded on a stream with nothing queued (and, on the legacy stream, no blocking
// stream's work before it) is complete at once, as a GPU reaches it within microseconds;
// behind queued work it completes in FIFO order, after that work.
TEST_F(FakeDriver, AnEventOnAnIdleStreamIsCompleteAtOnce) {
  // One buffer per stream: the two memsets below may run at once (as on a GPU).
  CUdeviceptr p = 0, q = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&q, 4096), CUDA_SUCCESS);
  CUstream s = nullptr, blocking = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  luma_fake_set_gate_open(0);  // no asynchronous operation starts: only markers complete
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, LUMA_CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(p, 1, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);  // behind the memset
  ASSERT_EQ(cuMemsetD8Async(q, 2, 4096, blocking), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, LUMA_CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);  // waits for the blocking stream
  luma_fake_set_gate_open(1);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
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


// --- cuMemFree without a current context ---------------------------------------------------

// The driver finds the allocation from the pointer (unified addressing): no context needed.
// Fails on the old stand-in, which answered CUDA_ERROR_INVALID_CONTEXT.
TEST_F(FakeDriver, MemFreeNeedsNoCurrentContext) {
  CUdeviceptr p = 0, q = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&q, 4096, s), CUDA_SUCCESS);
  CUresult freed = CUDA_ERROR_UNKNOWN, freed_async = CUDA_ERROR_UNKNOWN,
           legacy_async = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    freed = cuMemFree_v2(p);
    legacy_async = cuMemFreeAsync(q, nullptr);  // the legacy stream of which context?
    freed_async = cuMemFreeAsync(q, s);
  });
  t.join();
  EXPECT_EQ(freed, CUDA_SUCCESS);
  EXPECT_EQ(legacy_async, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(freed_async, CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(counters(0).live_allocations, 0u);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// --- pointer attributes --------------------------------------------------------------------

TEST_F(FakeDriver, PointerAttributesSingularAndPluralAgreeWithAddressRange) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 3000), CUDA_SUCCESS);
  CUdeviceptr inner = p + 1234;
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, inner), CUDA_SUCCESS);

  CUdeviceptr start = 0, dptr = 0;
  size_t range = 0;
  unsigned type = 0;
  int ordinal = -1, managed = -1, ipc = -1, mapped = -1;
  unsigned long long id = 0;
  CUcontext ctx = nullptr;
  CUpointer_attribute attrs[] = {
      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_BUFFER_ID,        CU_POINTER_ATTRIBUTE_CONTEXT,
      CU_POINTER_ATTRIBUTE_DEVICE_POINTER,   CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_MAPPED};
  void* data[] = {&start, &range, &type, &ordinal, &id, &ctx, &dptr, &managed, &ipc, &mapped};
  ASSERT_EQ(cuPointerGetAttributes(10, attrs, data, inner), CUDA_SUCCESS);
  EXPECT_EQ(start, base);
  EXPECT_EQ(range, size);
  EXPECT_EQ(type, CU_MEMORYTYPE_DEVICE);
  EXPECT_EQ(ordinal, 0);
  EXPECT_EQ(ctx, ctx0_);
  EXPECT_EQ(dptr, inner);
  EXPECT_EQ(managed, 0);
  EXPECT_EQ(ipc, 1);
  EXPECT_EQ(mapped, 1);
  for (int i = 0; i < 7; ++i) {  // each one alone gives the same answer
    unsigned long long one[2] = {0, 0}, many[2] = {0, 0};
    ASSERT_EQ(cuPointerGetAttribute(one, attrs[i], inner), CUDA_SUCCESS) << attrs[i];
    void* d[] = {many};
    ASSERT_EQ(cuPointerGetAttributes(1, &attrs[i], d, inner), CUDA_SUCCESS);
    EXPECT_EQ(std::memcmp(one, many, sizeof one), 0) << attrs[i];
  }
  unsigned long long single_id = 0;
  ASSERT_EQ(cuPointerGetAttribute(&single_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p), CUDA_SUCCESS);
  EXPECT_EQ(single_id, id);

  // Unknown pointer: the singular call fails, the plural one gives default values.
  int host = 0;
  auto hp = reinterpret_cast<CUdeviceptr>(&host);
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, hp),
            CUDA_ERROR_INVALID_VALUE);
  start = 1;
  range = 1;
  type = 9;
  id = 9;
  ctx = ctx1_;
  ASSERT_EQ(cuPointerGetAttributes(6, attrs, data, hp), CUDA_SUCCESS);
  EXPECT_EQ(start, 0u);
  EXPECT_EQ(range, 0u);
  EXPECT_EQ(type, 0u);
  EXPECT_EQ(id, 0u);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(FakeDriver, BufferIdIsUniqueAndNeverReused) {
  std::set<unsigned long long> ids;
  std::set<CUdeviceptr> addresses;
  for (int i = 0; i < 100; ++i) {
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
    unsigned long long id = 0;
    ASSERT_EQ(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p + 17), CUDA_SUCCESS);
    EXPECT_TRUE(ids.insert(id).second) << "buffer id " << id << " given twice";
    addresses.insert(p);
    ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  }
  // Addresses come back (the test would prove nothing otherwise); ids do not.
  EXPECT_LT(addresses.size(), 100u);
}

// --- device queries ------------------------------------------------------------------------

TEST_F(FakeDriver, DeviceQueriesImitateAnH200) {
  char name[256] = {};
  ASSERT_EQ(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_EQ(std::string(name).rfind("NVIDIA H200", 0), 0u) << name;
  char shortname[6];
  ASSERT_EQ(cuDeviceGetName(shortname, sizeof shortname, 0), CUDA_SUCCESS);
  EXPECT_STREQ(shortname, "NVIDI");
  EXPECT_EQ(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetName(name, sizeof name, luma_fake_device_count()),
            CUDA_ERROR_INVALID_DEVICE);

  luma_fake_set_capacity(3ULL << 30);
  size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, 3ULL << 30);

  int v = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), 0);
  EXPECT_EQ(v, 9);
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0), 0);
  EXPECT_EQ(v, 0);
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), 0);
  EXPECT_EQ(v, 132);
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0), 0);
  EXPECT_EQ(v, 1);
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0), 0);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 99),
            CUDA_ERROR_INVALID_DEVICE);

  CUuuid a{}, b{}, a_again{};
  ASSERT_EQ(cuDeviceGetUuid_v2(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid_v2(&b, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid(&a_again, 0), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(a.bytes, b.bytes, 16), 0);
  EXPECT_EQ(std::memcmp(a.bytes, a_again.bytes, 16), 0);

  CUresult r;
  CUdriverProcAddressQueryResult st;
  EXPECT_EQ(proc("cuDeviceTotalMem", 3020, 0, &r, &st), FN(cuDeviceTotalMem_v2));
  EXPECT_EQ(proc("cuDeviceGetUuid", 11040, 0, &r, &st), FN(cuDeviceGetUuid_v2));
  EXPECT_EQ(proc("cuDeviceGetUuid", 9020, 0, &r, &st), FN(cuDeviceGetUuid));
  EXPECT_EQ(proc("cuDeviceGetAttribute", 2000, 0, &r, &st), FN(cuDeviceGetAttribute));
}

// --- host and managed memory ---------------------------------------------------------------

TEST_F(FakeDriver, HostAndManagedAllocations) {
  void* h = nullptr;
  ASSERT_EQ(cuMemAllocHost_v2(&h, 10000), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h) % 4096, 0u);
  std::memset(h, 0x3C, 10000);
  unsigned type = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(h) + 100),
            CUDA_SUCCESS);
  EXPECT_EQ(type, CU_MEMORYTYPE_HOST);
  CUdeviceptr dh = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&dh, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(dh, reinterpret_cast<CUdeviceptr>(h));
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, 10000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD_v2(d, h, 10000), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(d)[9999], 0x3C);
  EXPECT_EQ(cuMemFree_v2(reinterpret_cast<CUdeviceptr>(h)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(reinterpret_cast<void*>(d)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostAlloc(&h, 4096, 0x80), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
            CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(h), CUDA_SUCCESS);

  CUdeviceptr m = 0;
  EXPECT_EQ(cuMemAllocManaged(&m, 4096, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAllocManaged(&m, 5000, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  reinterpret_cast<unsigned char*>(m)[4999] = 7;  // the host may touch it
  int is_managed = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m), CUDA_SUCCESS);
  ASSERT_EQ(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m),
            CUDA_SUCCESS);
  EXPECT_EQ(type, CU_MEMORYTYPE_DEVICE);
  EXPECT_EQ(is_managed, 1);
  ASSERT_EQ(cuMemcpyDtoD_v2(d, m, 5000), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(d)[4999], 7);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&m, 100, CU_MEM_ATTACH_HOST), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT_EQ(counters(0).live_allocations, 0u);  // host and managed memory are not counted
}

// --- IPC -----------------------------------------------------------------------------------

std::string hex(const CUipcMemHandle& h) {
  std::string out;
  char b[3];
  for (char c : h.reserved) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    out += b;
  }
  return out;
}

// Runs fake_ipc_peer (next to this test) on the handle; returns its exit status.
int run_peer(const CUipcMemHandle& h, size_t size, int expect, int write) {
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -1;
  std::string path(self);
  path = path.substr(0, path.rfind('/')) + "/fake_ipc_peer";
  std::string handle = hex(h), sz = std::to_string(size), e = std::to_string(expect),
              w = std::to_string(write);
  char* argv[] = {path.data(), handle.data(), sz.data(), e.data(), w.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, path.c_str(), nullptr, nullptr, argv, environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(FakeDriver, IpcHandleSharesMemoryWithAnotherProcess) {
  // One block of 3 MiB and one small one at an offset that is not page-aligned.
  for (size_t size : {size_t{3} << 20, size_t{1000}}) {
    CUdeviceptr pad = 0, p = 0;
    ASSERT_EQ(cuMemAlloc_v2(&pad, 512), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8_v2(p, 0x11, size), CUDA_SUCCESS);
    CUipcMemHandle h{}, inner{};
    ASSERT_EQ(cuIpcGetMemHandle(&h, p), CUDA_SUCCESS);
    ASSERT_EQ(cuIpcGetMemHandle(&inner, p + size / 2), CUDA_SUCCESS);
    EXPECT_EQ(std::memcmp(&h, &inner, sizeof h), 0) << "an interior pointer's handle differs";
    ASSERT_EQ(run_peer(h, size, 0x11, 0x22), 0) << "size " << size;
    std::vector<unsigned char> back(size);
    ASSERT_EQ(cuMemcpyDtoH_v2(back.data(), p, size), CUDA_SUCCESS);
    EXPECT_EQ(back.front(), 0x22);
    EXPECT_EQ(back.back(), 0x22);
    EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree_v2(pad), CUDA_SUCCESS);
  }
}

TEST_F(FakeDriver, IpcErrors) {
  CUdeviceptr p = 0, q = 0, out = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  CUipcMemHandle h{}, again{};
  ASSERT_EQ(cuIpcGetMemHandle(&h, p), CUDA_SUCCESS);
  // The exporting process cannot open its own handle.
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&out, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            CUDA_ERROR_INVALID_CONTEXT);
  CUipcMemHandle garbage{};
  std::memset(garbage.reserved, 0x5A, sizeof garbage.reserved);
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&out, garbage, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&out, h, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);  // not an opened handle
  int host = 0;
  EXPECT_EQ(cuIpcGetMemHandle(&again, reinterpret_cast<CUdeviceptr>(&host)),
            CUDA_ERROR_INVALID_VALUE);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&q, 4096, s), CUDA_SUCCESS);
  EXPECT_EQ(cuIpcGetMemHandle(&again, q), CUDA_ERROR_INVALID_VALUE);  // pool memory
  int capable = -1;
  ASSERT_EQ(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, q),
            CUDA_SUCCESS);
  EXPECT_EQ(capable, 0);
  // A new allocation at the same address has another handle.
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  CUdeviceptr p2 = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p2, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuIpcGetMemHandle(&again, p2), CUDA_SUCCESS);
  if (p2 == p) {
    EXPECT_NE(std::memcmp(&h, &again, sizeof h), 0);
  }
  EXPECT_EQ(cuMemFreeAsync(q, s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p2), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  CUresult r;
  CUdriverProcAddressQueryResult st;
  EXPECT_EQ(proc("cuIpcOpenMemHandle", 11000, 0, &r, &st), FN(cuIpcOpenMemHandle_v2));
  EXPECT_EQ(proc("cuIpcOpenMemHandle", 4010, 0, &r, &st), FN(cuIpcOpenMemHandle));
  EXPECT_EQ(proc("cuIpcGetMemHandle", 4010, 0, &r, &st), FN(cuIpcGetMemHandle));
  EXPECT_EQ(proc("cuIpcCloseMemHandle", 4010, 0, &r, &st), FN(cuIpcCloseMemHandle));
}

// --- stream capture and graphs -------------------------------------------------------------

CUstreamCaptureStatus capture_status(CUstream s) {
  CUstreamCaptureStatus st = -1;
  EXPECT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  return st;
}

TEST_F(FakeDriver, CapturedGraphReplaysCopiesAndMemsets) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(a, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(b, 0, 4096), CUDA_SUCCESS);
  std::vector<unsigned char> out(4096, 0xEE);

  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_EQ(cuMemcpyDtoDAsync_v2(b, a, 4096, s), CUDA_SUCCESS);  // b = a
  ASSERT_EQ(cuMemsetD8Async(a, 0x5A, 4096, s), CUDA_SUCCESS);     // a = 0x5A
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), b, 4096, s), CUDA_SUCCESS);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0, id2 = 0;
  CUgraph during = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t ndeps = 99;
  ASSERT_EQ(cuStreamGetCaptureInfo_v3(s, &st, &id, &during, &deps, nullptr, &ndeps),
            CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_NE(id, 0u);
  EXPECT_NE(during, nullptr);
  ASSERT_EQ(cuStreamGetCaptureInfo(s, &st, &id2), CUDA_SUCCESS);
  EXPECT_EQ(id2, id);
  luma_fake_set_gate_open(1);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(a)[0], 0);  // recorded, not run
  EXPECT_EQ(out[0], 0xEE);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(g, during);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_NONE);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
  for (int i = 1; i <= 20; ++i) {
    std::vector<unsigned char> in(4096, static_cast<unsigned char>(i));
    ASSERT_EQ(cuMemcpyHtoDAsync_v2(a, in.data(), 4096, s), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    EXPECT_EQ(out[0], i);
    EXPECT_EQ(out[4095], i);
    EXPECT_EQ(reinterpret_cast<unsigned char*>(a)[100], 0x5A);
  }
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  CUresult r;
  CUdriverProcAddressQueryResult pst;
  EXPECT_EQ(proc("cuStreamBeginCapture", 10010, 0, &r, &pst), FN(cuStreamBeginCapture_v2));
  EXPECT_EQ(proc("cuStreamGetCaptureInfo", 12030, 0, &r, &pst), FN(cuStreamGetCaptureInfo_v3));
  EXPECT_EQ(proc("cuStreamGetCaptureInfo", 12030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                 &r, &pst),
            FN(cuStreamGetCaptureInfo_v3_ptsz));
  EXPECT_EQ(proc("cuGraphInstantiate", 12000, 0, &r, &pst), FN(cuGraphInstantiateWithFlags));
  EXPECT_EQ(proc("cuGraphLaunch", 10000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &r, &pst),
            FN(cuGraphLaunch_ptsz));
}

// cuStreamBeginCaptureToGraph: the capture goes into the program's own graph
// (cuGraphCreate), which cuStreamEndCapture returns; it replays what was captured.
TEST_F(FakeDriver, CaptureToGraphFillsTheGivenGraph) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(a, 0, 4096), CUDA_SUCCESS);
  CUgraph g = nullptr;
  EXPECT_EQ(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);  // "must be 0"
  EXPECT_EQ(cuGraphCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(cuStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_EQ(cuMemsetD8Async(a, 0x5A, 4096, s), CUDA_SUCCESS);
  CUgraph during = nullptr;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_EQ(cuStreamGetCaptureInfo_v3(s, &st, nullptr, &during, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(during, g);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(a)[0], 0);  // recorded, not run
  CUgraph out = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &out), CUDA_SUCCESS);
  EXPECT_EQ(out, g);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(a)[4095], 0x5A);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  CUresult r;
  CUdriverProcAddressQueryResult pst;
  EXPECT_EQ(proc("cuStreamBeginCaptureToGraph", 12030, 0, &r, &pst), FN(cuStreamBeginCaptureToGraph));
  EXPECT_EQ(proc("cuStreamBeginCaptureToGraph", 12030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                 &r, &pst),
            FN(cuStreamBeginCaptureToGraph_ptsz));
  EXPECT_EQ(proc("cuGraphCreate", 10000, 0, &r, &pst), FN(cuGraphCreate));
}

TEST_F(FakeDriver, CaptureToGraphErrors) {
  CUstream s = nullptr, t = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  const auto global = CU_STREAM_CAPTURE_MODE_GLOBAL;
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, nullptr, nullptr, nullptr, 0, global), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, reinterpret_cast<CUgraph>(8), nullptr, nullptr, 0, global),
            CUDA_ERROR_INVALID_VALUE);  // not a graph
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 1, global), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(LUMA_CU_STREAM_LEGACY, g, nullptr, nullptr, 0, global),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(cuStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, global), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, global), CUDA_ERROR_ILLEGAL_STATE);
  // Strict: a second capture into the same graph, and capture into an instantiated graph.
  EXPECT_EQ(cuStreamBeginCaptureToGraph(t, g, nullptr, nullptr, 0, global), CUDA_ERROR_INVALID_VALUE);
  // A capture into a graph is invalidated as any other: no graph comes back, and the
  // program's graph stays its own.
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph out = reinterpret_cast<CUgraph>(1);
  EXPECT_EQ(cuStreamEndCapture(s, &out), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(out, nullptr);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, global), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(t), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(FakeDriver, CaptureLifecycleErrors) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);  // not capturing
  EXPECT_EQ(cuStreamBeginCapture_v2(LUMA_CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamBeginCapture_v2(s, 7), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            CUDA_ERROR_ILLEGAL_STATE);
  CUresult other_thread = CUDA_SUCCESS;
  std::thread t([&] { other_thread = cuStreamEndCapture(s, &g); });
  t.join();
  EXPECT_EQ(other_thread, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8Async(0x1000, 1, 1, s), CUDA_ERROR_INVALID_VALUE);  // checked first
  g = reinterpret_cast<CUgraph>(1);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  // The stream is usable again.
  ASSERT_EQ(cuMemAlloc_v2(&p, 512), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8Async(p, 1, 512, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// Which calls a capture refuses, per cuThreadExchangeStreamCaptureMode: a global capture
// prohibits unsafe calls in its own thread and in every thread in global mode; a
// thread-local one only in its own thread; a relaxed one nowhere.
TEST_F(FakeDriver, CaptureModesDecideWhichThreadsMayAllocate) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  auto in_thread = [&](CUstreamCaptureMode mode) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::thread t([&] {
      CUstreamCaptureMode m = mode;
      cuThreadExchangeStreamCaptureMode(&m);
      cuCtxSetCurrent(ctx0_);
      CUdeviceptr q = 0;
      r = cuMemAlloc_v2(&q, 512);
      if (r == CUDA_SUCCESS) cuMemFree_v2(q);
    });
    t.join();
    return r;
  };
  CUgraph g = nullptr;
  CUdeviceptr p = 0;

  // Global: refused here (and the capture is invalidated) ...
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&p, 512), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // ... and in another thread in global mode, but not in one in thread-local mode.
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(in_thread(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(in_thread(CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // Thread-local: refused here, allowed in another thread even in global mode.
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(in_thread(CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(0x1000), CUDA_ERROR_INVALID_VALUE);  // unknown: no capture rule
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuMemAlloc_v2(&p, 512), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // This thread in relaxed mode: its own global capture does not prohibit it.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);  // the previous mode
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&p, 512), CUDA_SUCCESS);
  mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);

  // A relaxed capture prohibits nothing: allocation and free while it captures.
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(in_thread(CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&p, 512), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  // ... but a synchronization that would wait for the capture is refused even so.
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  mode = 5;
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(FakeDriver, LegacyStreamUseDuringBlockingCaptureIsImplicitError) {
  CUstream blocking = nullptr, non_blocking = nullptr;
  ASSERT_EQ(cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  CUgraph g = nullptr;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

  ASSERT_EQ(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  // Asking the legacy stream is an error but does not invalidate the capture ...
  EXPECT_EQ(cuStreamIsCapturing(LUMA_CU_STREAM_LEGACY, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(capture_status(blocking), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // ... using it does.
  EXPECT_EQ(cuMemsetD8Async(p, 1, 4096, nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(capture_status(blocking), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // A synchronous copy runs on the legacy stream too.
  ASSERT_EQ(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  unsigned char byte = 0;
  EXPECT_EQ(cuMemcpyDtoH_v2(&byte, p, 1), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // A non-blocking stream's capture leaves the legacy stream alone.
  ASSERT_EQ(cuStreamBeginCapture_v2(non_blocking, CU_STREAM_CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8Async(p, 2, 4096, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamIsCapturing(nullptr, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuStreamEndCapture(non_blocking, &g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(non_blocking), CUDA_SUCCESS);
}

// cuCtxRecordEvent (CUDA 12.5) "captures in hEvent all the activities of the context":
// work queued before it on any stream of the context (legacy, blocking, non-blocking,
// per-thread) holds it back; work queued after it does not.
TEST_F(FakeDriver, CtxRecordEventCoversEveryStreamOfTheContext) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  CUstream blocking = nullptr, non_blocking = nullptr;
  ASSERT_EQ(cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  const CUstream each[] = {LUMA_CU_STREAM_LEGACY, blocking, non_blocking, LUMA_CU_STREAM_PER_THREAD};
  unsigned char value = 1;
  for (CUstream s : each) {
    SCOPED_TRACE(value);
    luma_fake_set_gate_open(0);
    ASSERT_EQ(cuMemsetD8Async(p, value, 4096, s), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxRecordEvent(ctx0_, e), CUDA_SUCCESS);
    EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    luma_fake_set_gate_open(1);
    EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
    EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
    EXPECT_EQ(reinterpret_cast<unsigned char*>(p)[100], value);  // the work ran first
    ++value;
  }
  // With every stream idle it is complete at once, and later work does not change that.
  luma_fake_set_gate_open(0);
  ASSERT_EQ(cuCtxRecordEvent(ctx0_, e), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(p, 9, 4096, non_blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  // A stream may wait for it like for any event.
  CUevent after = nullptr;
  ASSERT_EQ(cuEventCreate(&after, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxRecordEvent(ctx0_, e), CUDA_SUCCESS);  // behind the memset just queued
  ASSERT_EQ(cuStreamWaitEvent(blocking, e, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(after, blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(after), CUDA_ERROR_NOT_READY);
  luma_fake_set_gate_open(1);
  EXPECT_EQ(cuEventSynchronize(after), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(after), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(non_blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

// Its errors (cuda.h): an event of another context -> CUDA_ERROR_INVALID_HANDLE; an unknown
// event too; a null or destroyed context -> CUDA_ERROR_INVALID_CONTEXT (the stand-in's
// choice for null, tests/fake/README.md); a capture underway in the context ->
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is invalidated.
TEST_F(FakeDriver, CtxRecordEventErrors) {
  CUevent e = nullptr, of_ctx1 = nullptr;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx1_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&of_ctx1, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxRecordEvent(ctx0_, of_ctx1), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuCtxRecordEvent(ctx1_, of_ctx1), CUDA_SUCCESS);  // from any current context
  EXPECT_EQ(cuCtxRecordEvent(ctx0_, reinterpret_cast<CUevent>(&e)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuCtxRecordEvent(nullptr, e), CUDA_ERROR_INVALID_CONTEXT);

  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&created, 0, 0), CUDA_SUCCESS);
  CUevent of_created = nullptr;
  ASSERT_EQ(cuEventCreate(&of_created, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxRecordEvent(created, of_created), CUDA_ERROR_INVALID_CONTEXT);

  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxRecordEvent(ctx1_, of_ctx1), CUDA_SUCCESS);  // another context: no conflict
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuCtxRecordEvent(ctx0_, e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuCtxRecordEvent(ctx0_, e), CUDA_SUCCESS);  // the capture is over

  // Injected event failures count it as an event call.
  luma_fake_set_fail_events(1);
  EXPECT_EQ(cuCtxRecordEvent(ctx0_, e), CUDA_ERROR_UNKNOWN);
  luma_fake_set_fail_events(0);
  EXPECT_EQ(cuEventDestroy_v2(of_ctx1), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// cuCtxDestroy: no call may name the context while it is destroyed, nor it or its events
// after; the stand-in refuses (strict: the driver's answer is undefined) and counts each.
// A primary context's handle outlives its reset; its events of before do not.
TEST_F(FakeDriver, ContextsBeingDestroyedOrDestroyedAndTheirEventsAreRefusedAndCounted) {
  CUcontext created = nullptr;
  CUevent of_created = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&created, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&of_created, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(of_created, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS);
  EXPECT_EQ(luma_fake_destroyed_context_uses(), 0u);
  EXPECT_EQ(cuEventQuery(of_created), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuCtxPushCurrent_v2(created), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(luma_fake_destroyed_context_uses(), 2u);
  EXPECT_EQ(cuEventDestroy_v2(of_created), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(luma_fake_destroyed_context_uses(), 3u);

  // Held open: while another thread is inside cuCtxDestroy_v2, the context is refused.
  CUcontext doomed = nullptr;
  CUevent of_doomed = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&doomed, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&of_doomed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPopCurrent_v2(nullptr), CUDA_SUCCESS);
  luma_fake_set_ctx_destroy_hold_us(200000);
  std::atomic<int> destroyed{-1};
  std::thread destroyer([&] { destroyed = cuCtxDestroy_v2(doomed); });
  const auto inside = [&] { return luma_fake_destroyed_context_uses() > 3u || destroyed.load() != -1; };
  // Until the destroyer is inside the call, a push succeeds (and is taken back).
  while (!inside() && cuCtxPushCurrent_v2(doomed) == CUDA_SUCCESS) cuCtxPopCurrent_v2(nullptr);
  EXPECT_EQ(destroyed.load(), -1) << "the destruction is held open";
  EXPECT_EQ(cuCtxSynchronize_v2(doomed), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuEventQuery(of_doomed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(luma_fake_destroyed_context_uses(), 6u);  // the push that saw it, and these two
  destroyer.join();
  EXPECT_EQ(destroyed.load(), CUDA_SUCCESS);
  luma_fake_set_ctx_destroy_hold_us(0);

  // A primary context: the handle works after its reset, an event of before does not.
  ASSERT_EQ(cuCtxSetCurrent(ctx1_), CUDA_SUCCESS);
  CUevent before = nullptr, after = nullptr;
  ASSERT_EQ(cuEventCreate(&before, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(1), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(ctx1_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(before, nullptr), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuEventCreate(&after, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(after, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(after), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(after), CUDA_SUCCESS);
  EXPECT_EQ(luma_fake_destroyed_context_uses(), 7u);
  ASSERT_EQ(cuCtxSetCurrent(ctx0_), CUDA_SUCCESS);
  luma_fake_reset();
  EXPECT_EQ(luma_fake_destroyed_context_uses(), 0u);
}

// Playing an older driver: its version, and no entry point that came after it (a 12.4
// driver does not know cuCtxRecordEvent; cuGetProcAddress then says SYMBOL_NOT_FOUND).
TEST_F(FakeDriver, AnOlderDriverLacksLaterEntryPoints) {
  CUresult r = CUDA_SUCCESS;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(proc("cuCtxRecordEvent", 13000, 0, &r, &st), reinterpret_cast<void*>(&cuCtxRecordEvent));
  EXPECT_EQ(proc("cuCtxRecordEvent", 12040, 0, &r, &st), nullptr);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  ASSERT_EQ(luma_fake_set_driver_version(12040), 0);
  int version = 0;
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 12040);
  EXPECT_EQ(proc("cuCtxRecordEvent", 12040, 0, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(proc("cuCtxRecordEvent", 12050, 0, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE);  // asks for more than the driver is
  EXPECT_EQ(proc("cuCtxGetDevice", 12040, 0, &r, &st), reinterpret_cast<void*>(&cuCtxGetDevice));
  EXPECT_EQ(proc("cuMemAlloc", 12040, 0, &r, &st), reinterpret_cast<void*>(&cuMemAlloc_v2));
  EXPECT_EQ(luma_fake_set_driver_version(11020), -1);  // before cuGetProcAddress
  EXPECT_EQ(luma_fake_set_driver_version(13010), -1);  // newer than the stand-in
  luma_fake_reset();
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
}

TEST_F(FakeDriver, CapturedEventCannotBeQueried) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // Recorded again outside a capture, it is an ordinary event.
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  // In global mode even an ordinary event may not be queried during a capture.
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// Fork into a second stream through an event recorded in the capture, join back through
// another; the graph runs both streams' work. Without the join the capture is unjoined.
TEST_F(FakeDriver, CaptureForksAndJoinsThroughEvents) {
  CUstream s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent fork = nullptr, join = nullptr;
  ASSERT_EQ(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 1024), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, 1024), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(a, 0, 1024), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(b, 0, 1024), CUDA_SUCCESS);
  CUgraph g = nullptr;
  for (bool joined : {false, true}) {
    ASSERT_EQ(cuStreamBeginCapture_v2(s1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8Async(a, 0x41, 1024, s1), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(fork, s1), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamWaitEvent(s2, fork, 0), CUDA_SUCCESS);
    EXPECT_EQ(capture_status(s2), CU_STREAM_CAPTURE_STATUS_ACTIVE);
    ASSERT_EQ(cuMemcpyDtoDAsync_v2(b, a, 1024, s2), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(join, s2), CUDA_SUCCESS);
    if (joined) {
      ASSERT_EQ(cuStreamWaitEvent(s1, join, 0), CUDA_SUCCESS);
    }
    CUresult want = joined ? CUresult{CUDA_SUCCESS} : CUresult{CUDA_ERROR_STREAM_CAPTURE_UNJOINED};
    EXPECT_EQ(cuStreamEndCapture(s1, &g), want);
    EXPECT_EQ(capture_status(s2), CU_STREAM_CAPTURE_STATUS_NONE);
  }
  EXPECT_EQ(reinterpret_cast<unsigned char*>(b)[0], 0);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s1), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(b)[1023], 0x41);
  // Waiting on an ordinary event inside a capture crosses its boundary.
  CUevent outside = nullptr;
  ASSERT_EQ(cuEventCreate(&outside, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(outside, s2), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(s1, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  CUgraph g2 = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s1, &g2), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  for (CUevent e : {fork, join, outside}) EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
}

// cuCtxCreate's later ABIs: without parameters as _v2 (a new context, current); execution
// affinity and CIG parameters are refused (not imitated); each is what cuGetProcAddress
// hands out at its version.
TEST_F(FakeDriver, CtxCreateLaterAbis) {
  CUdevice dev = 0;
  CUcontext c = nullptr, cur = nullptr;
  ASSERT_EQ(cuCtxCreate_v3(&c, nullptr, 0, 0, dev), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, c);
  EXPECT_EQ(cuCtxDestroy_v2(c), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate_v4(&c, nullptr, 0, dev), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, c);
  EXPECT_EQ(cuCtxDestroy_v2(c), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxCreate_v3(&c, nullptr, 1, 0, dev), CUDA_ERROR_INVALID_VALUE);
  struct { void* affinity; int count; void* cig; } params{&dev, 1, nullptr};
  EXPECT_EQ(cuCtxCreate_v4(&c, reinterpret_cast<CUctxCreateParams*>(&params), 0, dev),
            CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st{};
  ASSERT_EQ(cuGetProcAddress_v2("cuCtxCreate", &fn, 12050, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuCtxCreate_v4));
  ASSERT_EQ(cuGetProcAddress_v2("cuCtxCreate", &fn, 11040, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuCtxCreate_v3));
  ASSERT_EQ(cuGetProcAddress_v2("cuCtxCreate", &fn, 3020, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuCtxCreate_v2));
}

// cuStreamGetFlags of a capturing stream (observed on an H200, driver 580): refused with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the capture invalidated, in every mode; the
// queries made for the purpose (cuStreamIsCapturing, cuStreamGetCaptureInfo) leave it be.
TEST_F(FakeDriver, StreamGetFlagsOfACapturingStreamIsRefusedAndInvalidatesIt) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  for (CUstreamCaptureMode mode : {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                   CU_STREAM_CAPTURE_MODE_RELAXED}) {
    unsigned flags = 0;
    EXPECT_EQ(cuStreamGetFlags(s, &flags), CUDA_SUCCESS);  // before: answered
    EXPECT_EQ(flags, unsigned{CU_STREAM_NON_BLOCKING});
    ASSERT_EQ(cuStreamBeginCapture_v2(s, mode), CUDA_SUCCESS);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
    EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_EQ(cuStreamGetFlags(s, &flags), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) << mode;
    EXPECT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
    EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CUgraph g = nullptr;
    EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(g, nullptr);
  }
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// cuMemAllocAsync / cuMemFreeAsync in a capture become graph memory nodes; a free node
// must be given memory a graph allocation node made.
TEST_F(FakeDriver, CapturedAsyncAllocationsAreGraphMemoryNodes) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr outside = 0, p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&outside, 4096), CUDA_SUCCESS);
  std::vector<unsigned char> out(4096, 0);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&p, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(p, 0x77, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), p, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);  // twice in one graph
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // cuMemAlloc memory is no graph allocation: refused, and (observed on an H200, driver
  // 580) the capture stays valid, also for an address inside it.
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(outside, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(outside + 512, s), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  g = nullptr;
  // An address in no allocation at all: not yet observed, so refused and invalidating.
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(CUdeviceptr{0x1000}, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&p, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(p, 0x77, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), p, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(out[4095], 0x77);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(outside), CUDA_SUCCESS);
  EXPECT_EQ(counters(0).live_allocations, 0u);  // the graph's memory went with the graph
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// Page-locked host memory beyond the allocation (fake_host_memory.cpp): cuMemHostGetFlags
// answers the flags asked for, anywhere inside the block; the host counters count real
// allocations and frees; the pinning cost knob keeps its value (no timing asserted).
TEST_F(FakeDriver, PinnedHostFlagsCountersAndCostKnob) {
  luma_fake_host_counters before{};
  luma_fake_get_host_counters(&before);
  void* mapped = nullptr;
  void* plain = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&mapped, 10000, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocHost_v2(&plain, 4096), CUDA_SUCCESS);
  unsigned flags = 99;
  EXPECT_EQ(cuMemHostGetFlags(&flags, mapped), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED});
  flags = 99;
  EXPECT_EQ(cuMemHostGetFlags(&flags, static_cast<char*>(mapped) + 9999), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED});
  EXPECT_EQ(cuMemHostGetFlags(&flags, plain), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(cuMemHostGetFlags(&flags, static_cast<char*>(mapped) + 10000), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostGetFlags(nullptr, plain), CUDA_ERROR_INVALID_VALUE);
  int local = 0;
  EXPECT_EQ(cuMemHostGetFlags(&flags, &local), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, 1024), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostGetFlags(&flags, reinterpret_cast<void*>(d)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  void* fn = nullptr;
  EXPECT_EQ(cuGetProcAddress_v2("cuMemHostGetFlags", &fn, 13000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemHostGetFlags));

  luma_fake_host_counters mid{};
  luma_fake_get_host_counters(&mid);
  EXPECT_EQ(mid.alloc_calls, before.alloc_calls + 2);
  EXPECT_EQ(mid.live_allocations, before.live_allocations + 2);
  EXPECT_EQ(mid.live_bytes, before.live_bytes + 10000 + 4096);
  void* refused = nullptr;
  EXPECT_EQ(cuMemHostAlloc(&refused, 4096, 0x80), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostAlloc(&refused, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemFreeHost(mapped), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeHost(plain), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(plain), CUDA_ERROR_INVALID_VALUE);  // freed already
  luma_fake_host_counters after{};
  luma_fake_get_host_counters(&after);
  EXPECT_EQ(after.alloc_calls, before.alloc_calls + 2) << "refused calls are not counted";
  EXPECT_EQ(after.free_calls, before.free_calls + 2);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.live_bytes, before.live_bytes);

  // With a pinning cost the allocation still succeeds (its duration is a benchmark's).
  luma_fake_set_host_alloc_us(1);
  void* slow = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&slow, 4096, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeHost(slow), CUDA_SUCCESS);
  luma_fake_set_host_alloc_us(0);
}

}  // namespace
