// driver_device_test.cpp - the virtual memory part of shim::DriverDevice (expandable
// segments: core/base/device.h) over the stand-in driver, linked in: the stand-in's soname
// is libcuda.so.1, so the shim's own dlopen finds this same library and its control API.
// What the allocator relies on: the page and the address space asked once, memories mapped
// whole, access for the device and its peers, nothing unmapped or released while the
// context captures, may_hold covering the whole range, everything given back at the end.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdint>
#include <memory>
#include <string>

#include "device/capture_registry.h"
#include "device_contract.h"
#include "device/driver_device.h"
#include "fake_control.h"
#include "fake_driver_api.h"
#include "driver/real_driver.h"
#include "device/stream_registry.h"

namespace luma::shim {

// This program has no dlsym of luma's (dlsym_hook.cpp is not linked): glibc's is the one.
DlsymFn real_dlsym() noexcept { return &::dlsym; }

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

class DriverDeviceVm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    luma_fake_reset();
    ASSERT_TRUE(load_real_driver(driver_));
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    device_ = std::make_unique<DriverDevice>(driver_, ctx_, core::FreeSync::event, streams_, captures_);
  }
  void TearDown() override {
    device_.reset();
    luma_fake_reset();
  }
  static unsigned long long access(int device, void* p) {
    CUmemLocation where{CU_MEM_LOCATION_TYPE_DEVICE, device};
    unsigned long long flags = 99;
    return cuMemGetAccess(&flags, &where, reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS ? flags : 99;
  }
  static CUdeviceptr at(void* base, std::size_t offset) {
    return reinterpret_cast<CUdeviceptr>(base) + offset;
  }

  RealDriver driver_;
  CUcontext ctx_ = nullptr;
  StreamRegistry streams_;
  CaptureRegistry captures_;
  std::unique_ptr<DriverDevice> device_;
};

// The stand-in's granularity (2 MiB, as an H200's) and its capacity plus an eighth,
// rounded up to the page; the same answer every time.
TEST_F(DriverDeviceVm, PageIsTheGranularityAndTheAddressSpaceTheMemoryAndAnEighth) {
  const core::Device::VirtualMemory vm = device_->virtual_memory();
  EXPECT_EQ(vm.page, 2 * kMiB);
  std::size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  const std::size_t want = (total + total / 8 + vm.page - 1) / vm.page * vm.page;
  EXPECT_EQ(vm.address_space, want);
  EXPECT_GE(vm.address_space, total + total / 8);
  EXPECT_EQ(device_->virtual_memory().address_space, vm.address_space);
}

// A reserved range lies in may_hold's span from end to end before anything is mapped. A
// memory of three pages is one handle, mapped whole (offset 0), readable and writable by
// the device and by its peer, with copies across its pages; unmapped, it maps again
// elsewhere; a second memory maps next to it and copies run across both.
TEST_F(DriverDeviceVm, MemoriesMapWholeWithAccessForThePeers) {
  const std::size_t page = device_->virtual_memory().page;
  const core::Reservation range = device_->reserve_address(8 * page);
  ASSERT_NE(range.base, nullptr) << range.error;
  auto* base = static_cast<char*>(range.base);
  EXPECT_TRUE(device_->may_hold(base));
  EXPECT_TRUE(device_->may_hold(base + 8 * page - 1));
  EXPECT_FALSE(device_->may_hold(base + 8 * page));
  EXPECT_EQ(device_->address_ranges(), 1u);

  const core::Device::Memory m = device_->create_memory(3 * page);
  ASSERT_NE(m.handle, 0u) << m.error;
  EXPECT_EQ(access(0, base), 99u) << "made memory is mapped nowhere";
  ASSERT_EQ(device_->map_memory(base + page, m.handle, 0, 3 * page), 0);
  EXPECT_EQ(device_->mappings(), 1u);
  for (std::size_t i = 1; i <= 3; ++i) {
    EXPECT_EQ(access(0, base + i * page), unsigned{CU_MEM_ACCESS_FLAGS_PROT_READWRITE}) << i;
    EXPECT_EQ(access(1, base + i * page + 7), unsigned{CU_MEM_ACCESS_FLAGS_PROT_READWRITE}) << i;
  }
  ASSERT_EQ(cuMemsetD8_v2(at(base, page + page / 2), 0x6B, 2 * page), CUDA_SUCCESS);
  unsigned char last = 0;
  ASSERT_EQ(cuMemcpyDtoH_v2(&last, at(base, 3 * page + page / 2 - 1), 1), CUDA_SUCCESS);
  EXPECT_EQ(last, 0x6B);
  // A piece of a memory cannot be mapped on its own: offset 0 only.
  EXPECT_NE(device_->map_memory(base + 5 * page, m.handle, page, page), 0);

  // Unmapped whole, mapped again at the start, and a second memory right after it.
  ASSERT_TRUE(device_->unmap_memory(base + page, 3 * page));
  EXPECT_EQ(cuMemsetD8_v2(at(base, page), 0, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(device_->map_memory(base, m.handle, 0, 3 * page), 0);
  const core::Device::Memory n = device_->create_memory(page);
  ASSERT_NE(n.handle, 0u);
  ASSERT_EQ(device_->map_memory(base + 3 * page, n.handle, 0, page), 0);
  ASSERT_EQ(cuMemsetD8_v2(at(base, 2 * page), 0x3C, 2 * page), CUDA_SUCCESS);
  EXPECT_EQ(access(1, base + 3 * page), unsigned{CU_MEM_ACCESS_FLAGS_PROT_READWRITE});
  EXPECT_FALSE(device_->release_memory(n.handle, page)) << "released while mapped";
  ASSERT_TRUE(device_->unmap_memory(base, 3 * page));
  ASSERT_TRUE(device_->unmap_memory(base + 3 * page, page));
  EXPECT_EQ(device_->mappings(), 0u);
  ASSERT_TRUE(device_->release_memory(m.handle, 3 * page));
  ASSERT_TRUE(device_->release_memory(n.handle, page));
  EXPECT_EQ(device_->memories(), 0u);
  ASSERT_TRUE(device_->release_address(base, 8 * page));
  EXPECT_EQ(device_->address_ranges(), 0u);
}

// Out of memory: nothing is made, and the answer is out of memory (error 0), so the
// allocator gives back free memory and retries. Then what fits is made.
TEST_F(DriverDeviceVm, OutOfMemoryIsErrorZero) {
  const std::size_t page = device_->virtual_memory().page;
  luma_fake_set_capacity(2 * page);
  const core::Device::Memory refused = device_->create_memory(3 * page);
  EXPECT_EQ(refused.handle, 0u);
  EXPECT_EQ(refused.error, 0);
  EXPECT_EQ(device_->memories(), 0u);
  const core::Device::Memory fits = device_->create_memory(2 * page);
  ASSERT_NE(fits.handle, 0u) << fits.error;
  ASSERT_TRUE(device_->release_memory(fits.handle, 2 * page));
}

// The contract every core::Device keeps (tests/doubles/device_contract.h, as for core's
// devices in tests/core/device_contract_test.cpp): segments, fences, virtual memory, and
// out of memory as error 0 under the stand-in's capacity.
TEST_F(DriverDeviceVm, KeepsTheDeviceContract) {
  luma_fake_set_capacity(32 * kMiB);
  core::DeviceContractOptions o;
  o.too_big = 64 * kMiB;
  std::string broken;
  for (const std::string& rule : core::check_device_contract(*device_, o)) broken += "\n  " + rule;
  EXPECT_TRUE(broken.empty()) << broken;
  EXPECT_EQ(device_->memories(), 0u);
  EXPECT_EQ(device_->address_ranges(), 0u);
}

// What the contract does not allow is refused without a driver call.
TEST_F(DriverDeviceVm, BadRequestsAreRefused) {
  const std::size_t page = device_->virtual_memory().page;
  const core::Reservation range = device_->reserve_address(4 * page);
  ASSERT_NE(range.base, nullptr);
  auto* base = static_cast<char*>(range.base);
  const core::Device::Memory m = device_->create_memory(2 * page);
  ASSERT_NE(m.handle, 0u);
  EXPECT_NE(device_->create_memory(page / 2).error, 0);                        // not a page
  ASSERT_EQ(device_->map_memory(base, m.handle, 0, 2 * page), 0);
  const core::Device::Memory n = device_->create_memory(page);
  ASSERT_NE(n.handle, 0u);
  EXPECT_NE(device_->map_memory(base + page, n.handle, 0, page), 0);          // overlaps
  EXPECT_NE(device_->map_memory(base + 2 * page, n.handle, 0, 2 * page), 0);  // past the memory
  EXPECT_NE(device_->map_memory(base + 2 * page, n.handle + m.handle, 0, page), 0);  // no such memory
  ASSERT_TRUE(device_->release_memory(n.handle, page));
  EXPECT_FALSE(device_->unmap_memory(base, page));  // not what was mapped
  EXPECT_FALSE(device_->release_address(base, 4 * page));  // still mapped
  EXPECT_EQ(device_->mappings(), 1u);
  ASSERT_TRUE(device_->unmap_memory(base, 2 * page));
  ASSERT_TRUE(device_->release_memory(m.handle, 2 * page));
  ASSERT_TRUE(device_->release_address(base, 4 * page));
}

// During a global capture in this context: making and mapping memory still work (luma's
// calls run in relaxed mode, which the capture allows: it ends with a graph), but nothing
// is unmapped or released until the capture ended.
TEST_F(DriverDeviceVm, CaptureAllowsMappingAndHoldsUnmapping) {
  const std::size_t page = device_->virtual_memory().page;
  const core::Reservation range = device_->reserve_address(4 * page);
  ASSERT_NE(range.base, nullptr);
  auto* base = static_cast<char*>(range.base);
  const core::Device::Memory before = device_->create_memory(page);
  ASSERT_NE(before.handle, 0u);
  ASSERT_EQ(device_->map_memory(base, before.handle, 0, page), 0);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  captures_.announce(ctx_, s, CaptureMode::global, this_thread_id());
  const core::Device::Memory during = device_->create_memory(page);
  ASSERT_NE(during.handle, 0u) << during.error;
  ASSERT_EQ(device_->map_memory(base + page, during.handle, 0, page), 0);
  EXPECT_FALSE(device_->unmap_memory(base, page));
  EXPECT_EQ(device_->mappings(), 2u);
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS) << "luma's mapping invalidated the capture";
  captures_.end(s);
  if (graph != nullptr) cuGraphDestroy(graph);
  ASSERT_TRUE(device_->unmap_memory(base, page));
  ASSERT_TRUE(device_->unmap_memory(base + page, page));
  ASSERT_TRUE(device_->release_memory(before.handle, page));
  ASSERT_TRUE(device_->release_memory(during.handle, page));
  ASSERT_TRUE(device_->release_address(base, 4 * page));
  ASSERT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// A segment released while a global capture is underway in ANOTHER context: this context
// captures nothing, so the segment goes, and its cuMemFree runs in relaxed mode, which the
// other context's capture allows (the capture ends with a graph). Regression: the free ran
// in the thread's global mode, which that capture forbids: refused, and the capture
// invalidated.
TEST_F(DriverDeviceVm, ASegmentGoesDuringAnotherContextsCapture) {
  const core::Reservation seg = device_->reserve(2 * kMiB);
  ASSERT_NE(seg.base, nullptr);
  CUcontext other = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&other, 0, 0), CUDA_SUCCESS);  // made current
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  captures_.announce(other, s, CaptureMode::global, this_thread_id());
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_TRUE(device_->release(seg.base, 2 * kMiB));
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS) << "luma's release invalidated the capture";
  captures_.end(s);
  if (graph != nullptr) cuGraphDestroy(graph);
  ASSERT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy_v2(other), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
}

// The context is gone: every mapping, handle and range this device held goes back.
TEST_F(DriverDeviceVm, GivingBackReleasesEverything) {
  const std::size_t page = device_->virtual_memory().page;
  const core::Reservation a = device_->reserve_address(4 * page);
  const core::Reservation b = device_->reserve_address(4 * page);
  ASSERT_NE(a.base, nullptr);
  ASSERT_NE(b.base, nullptr);
  const core::Device::Memory m = device_->create_memory(3 * page);
  const core::Device::Memory n = device_->create_memory(page);
  const core::Device::Memory spare = device_->create_memory(page);
  ASSERT_NE(m.handle, 0u);
  ASSERT_NE(n.handle, 0u);
  ASSERT_NE(spare.handle, 0u);
  ASSERT_EQ(device_->map_memory(a.base, m.handle, 0, 3 * page), 0);
  ASSERT_EQ(device_->map_memory(static_cast<char*>(b.base) + page, n.handle, 0, page), 0);
  device_->give_back_virtual_memory();
  EXPECT_EQ(device_->mappings(), 0u);
  EXPECT_EQ(device_->memories(), 0u);
  EXPECT_EQ(device_->address_ranges(), 0u);
  EXPECT_EQ(access(0, a.base), 99u);
  EXPECT_EQ(cuMemAddressFree(reinterpret_cast<CUdeviceptr>(a.base), 4 * page), CUDA_ERROR_INVALID_VALUE)
      << "the range was not freed";
  EXPECT_EQ(cuMemRelease(spare.handle), CUDA_ERROR_INVALID_VALUE) << "the unmapped memory was not released";
}

}  // namespace
}  // namespace luma::shim
