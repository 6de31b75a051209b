// proc_address_test.cpp - luma substitutes its function only for the ABI it implements:
// the cudaVersion decides, older ABIs and names it does not serve are the driver's.
#include "driver/proc_address.h"

#include <gtest/gtest.h>

#include <string>

namespace luma::shim {
namespace {

TEST(ProcAddress, MemoryCallsAtTheV2AbiAreLumas) {
  EXPECT_EQ(hook_for_request("cuMemAlloc", 3020), Hook::mem_alloc);
  EXPECT_EQ(hook_for_request("cuMemAlloc", 13000), Hook::mem_alloc);
  EXPECT_EQ(hook_for_request("cuMemFree", 3020), Hook::mem_free);
  EXPECT_EQ(hook_for_request("cuMemGetInfo", 3020), Hook::mem_get_info);
  EXPECT_EQ(hook_for_request("cuMemAllocPitch", 3020), Hook::mem_alloc_pitch);
}

TEST(ProcAddress, ContextLifetimeCallsAtTheirCurrentAbiAreLumas) {
  EXPECT_EQ(hook_for_request("cuCtxDestroy", 4000), Hook::ctx_destroy);
  EXPECT_EQ(hook_for_request("cuCtxDestroy", 13000), Hook::ctx_destroy);
  EXPECT_EQ(hook_for_request("cuCtxDestroy", 2000), Hook::none);  // the v1 ABI
  EXPECT_EQ(hook_for_request("cuDevicePrimaryCtxReset", 11000), Hook::primary_ctx_reset);
  EXPECT_EQ(hook_for_request("cuDevicePrimaryCtxReset", 7000), Hook::none);
  EXPECT_EQ(hook_for_request("cuDevicePrimaryCtxRelease", 12000), Hook::primary_ctx_release);
  EXPECT_EQ(hook_for_request("cuDevicePrimaryCtxRelease", 7000), Hook::none);
  EXPECT_EQ(hook_for_symbol("cuCtxDestroy_v2"), Hook::ctx_destroy);
  EXPECT_EQ(hook_for_symbol("cuDevicePrimaryCtxReset_v2"), Hook::primary_ctx_reset);
  EXPECT_EQ(hook_for_symbol("cuDevicePrimaryCtxRelease"), Hook::none);
}

TEST(ProcAddress, OlderAbisAreForwarded) {
  // cuMemAlloc at 2000 is the 32-bit cuMemAlloc (v1): not luma's ABI.
  EXPECT_EQ(hook_for_request("cuMemAlloc", 2000), Hook::none);
  EXPECT_EQ(hook_for_request("cuMemFree", 3010), Hook::none);
  EXPECT_EQ(hook_for_request("cuStreamDestroy", 2000), Hook::none);
  EXPECT_EQ(hook_for_request("cuGetProcAddress", 11020), Hook::none);
}

TEST(ProcAddress, GetProcAddressAbiFollowsTheVersion) {
  EXPECT_EQ(hook_for_request("cuGetProcAddress", 11030), Hook::get_proc_address_v1);
  EXPECT_EQ(hook_for_request("cuGetProcAddress", 11080), Hook::get_proc_address_v1);
  EXPECT_EQ(hook_for_request("cuGetProcAddress", 12000), Hook::get_proc_address_v2);
  EXPECT_EQ(hook_for_request("cuGetProcAddress", 13000), Hook::get_proc_address_v2);
}

TEST(ProcAddress, NamesLumaDoesNotServeAreForwarded) {
  for (const char* name : {"cuInit", "cuMemAlloc_v2", "", "cuMemAddressReserve", "cuMemSetAccess",
                           "cuMemPoolCreate", "cuCtxSynchronize", "cuMemGetAccess"})
    EXPECT_EQ(hook_for_request(name, 13000), Hook::none) << name;
}

// Pointer queries are hooked for the range of a block of an expandable segment (the driver
// would name one page of it; serve.h), from the ABI luma implements: cuMemGetAddressRange's
// 64-bit _v2 (3020), cuPointerGetAttribute (4000), cuPointerGetAttributes (7000). The
// 32-bit cuMemGetAddressRange is forwarded.
TEST(ProcAddress, PointerQueriesAreHookedFromTheirVersion) {
  EXPECT_EQ(hook_for_request("cuMemGetAddressRange", 3020), Hook::mem_get_address_range);
  EXPECT_EQ(hook_for_request("cuMemGetAddressRange", 2000), Hook::none);
  EXPECT_EQ(hook_for_request("cuPointerGetAttribute", 4000), Hook::pointer_get_attribute);
  EXPECT_EQ(hook_for_request("cuPointerGetAttributes", 7000), Hook::pointer_get_attributes);
  EXPECT_EQ(hook_for_request("cuPointerGetAttributes", 6050), Hook::none);
  EXPECT_EQ(hook_for_symbol("cuMemGetAddressRange_v2"), Hook::mem_get_address_range);
}

// The driver's pools, managed and pinned host memory are forwarded by luma's own functions,
// which count them (shim/observe/forwarded_paths.h), each from its ABI's version on.
TEST(ProcAddress, ForwardedAllocationPathsAreHooked) {
  EXPECT_EQ(hook_for_request("cuMemAllocAsync", 11020), Hook::mem_alloc_async);
  EXPECT_EQ(hook_for_request("cuMemAllocAsync", 11010), Hook::none);
  EXPECT_EQ(hook_for_symbol("cuMemAllocAsync_ptsz"), Hook::mem_alloc_async_ptsz);
  EXPECT_EQ(hook_for_request("cuMemAllocManaged", 13000), Hook::mem_alloc_managed);
  EXPECT_EQ(hook_for_request("cuMemAllocManaged", 5050), Hook::none);
  EXPECT_EQ(hook_for_request("cuMemAllocHost", 13000), Hook::mem_alloc_host);
  EXPECT_EQ(hook_for_request("cuMemAllocHost", 3010), Hook::none);  // the 32-bit v1 ABI
  EXPECT_EQ(hook_for_request("cuMemHostAlloc", 13000), Hook::mem_host_alloc);
  EXPECT_EQ(hook_for_request("cuMemFreeHost", 13000), Hook::mem_free_host);
}

// Pool allocations (CUDA 11.2, with a per-thread twin) and the virtual memory calls that
// make, drop, map and unmap memory (CUDA 10.2) are forwarded and counted too; the calls
// around them (reserving addresses, access rights, pools themselves) are not hooked.
TEST(ProcAddress, PoolAndVirtualMemoryCallsAreHookedFromTheirVersion) {
  EXPECT_EQ(hook_for_request("cuMemAllocFromPoolAsync", 11020), Hook::mem_alloc_from_pool_async);
  EXPECT_EQ(hook_for_request("cuMemAllocFromPoolAsync", 11010), Hook::none);
  EXPECT_EQ(hook_for_symbol("cuMemAllocFromPoolAsync_ptsz"), Hook::mem_alloc_from_pool_async_ptsz);
  EXPECT_EQ(hook_for_request("cuMemCreate", 10020), Hook::mem_create);
  EXPECT_EQ(hook_for_request("cuMemCreate", 10010), Hook::none);
  EXPECT_EQ(hook_for_request("cuMemRelease", 13000), Hook::mem_release);
  EXPECT_EQ(hook_for_request("cuMemMap", 13000), Hook::mem_map);
  EXPECT_EQ(hook_for_request("cuMemUnmap", 13000), Hook::mem_unmap);
}

// A stream-ordered free may name a luma block (CUDA allows it on cuMemAlloc memory), so
// luma serves cuMemFreeAsync from its ABI's version (11.2) on; before it, no such function.
TEST(ProcAddress, StreamOrderedFreeIsServedFromCuda112) {
  EXPECT_EQ(hook_for_request("cuMemFreeAsync", 11020), Hook::mem_free_async);
  EXPECT_EQ(hook_for_request("cuMemFreeAsync", 13000), Hook::mem_free_async);
  EXPECT_EQ(hook_for_request("cuMemFreeAsync", 11010), Hook::none);
  EXPECT_EQ(hook_for_symbol("cuMemFreeAsync"), Hook::mem_free_async);
  EXPECT_EQ(hook_for_symbol("cuMemFreeAsync_ptsz"), Hook::mem_free_async_ptsz);
}

TEST(ProcAddress, ExportedSymbolNames) {
  EXPECT_EQ(hook_for_symbol("cuGetProcAddress_v2"), Hook::get_proc_address_v2);
  EXPECT_EQ(hook_for_symbol("cuGetProcAddress"), Hook::get_proc_address_v1);
  EXPECT_EQ(hook_for_symbol("cuMemAlloc_v2"), Hook::mem_alloc);
  EXPECT_EQ(hook_for_symbol("cuMemAlloc"), Hook::none);  // the v1 ABI symbol
  EXPECT_EQ(hook_for_symbol("cuStreamDestroy"), Hook::none);
  EXPECT_EQ(hook_for_symbol("malloc"), Hook::none);
  EXPECT_EQ(hook_for_symbol("c"), Hook::none);
}

TEST(ProcAddress, EveryHookHasItsSymbolAndBack) {
  for (int i = 1; i < static_cast<int>(Hook::count); ++i) {
    Hook h = static_cast<Hook>(i);
    const char* sym = hook_symbol(h);
    ASSERT_NE(sym, nullptr) << i;
    EXPECT_EQ(hook_for_symbol(sym), h) << sym;
  }
}

}  // namespace
}  // namespace luma::shim
