// device_contract_test.cpp - every core::Device of core/ and tests/ against the contract
// atop core/base/device.h, through one check (tests/doubles/device_contract.h): one test
// per implementation and configuration, so a failure names the device and the rule. The
// doubles that count their own violations are asked too (the check calls them as the
// allocator would). The shim's driver device: tests/shim/driver_device_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "address_only_device.h"
#include "allocator_test_util.h"
#include "device_contract.h"
#include "host_device.h"
#include "limits/limited_device.h"
#include "limits/memory_budget.h"
#include "paged_device.h"
#include "simulate/sim_device.h"

namespace luma::core {
namespace {

using testing::joined;

constexpr std::size_t MiB = std::size_t{1} << 20;

// Small capacities, so that out of memory is reached: what reserve may still give.
DeviceContractOptions with_capacity(std::size_t too_big) {
  DeviceContractOptions o;
  o.too_big = too_big;
  return o;
}

#define LUMA_EXPECT_CONFORMS(dev, options)                                 \
  do {                                                                     \
    const std::vector<std::string> broken_ = check_device_contract(dev, options); \
    EXPECT_TRUE(broken_.empty()) << joined(broken_);                       \
  } while (false)

TEST(DeviceContract, HostDeviceWithoutFences) {
  HostDevice dev(4 * MiB);
  LUMA_EXPECT_CONFORMS(dev, with_capacity(8 * MiB));
  EXPECT_EQ(dev.contract_violations(), 0u);
  EXPECT_EQ(dev.segments(), 0u);
}

TEST(DeviceContract, HostDeviceBatchedFences) {
  HostDevice dev(4 * MiB);
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::batched);
  LUMA_EXPECT_CONFORMS(dev, with_capacity(8 * MiB));
  EXPECT_EQ(dev.contract_violations(), 0u);
  EXPECT_GT(dev.fences_recorded(), 0u);
  EXPECT_EQ(dev.fences_released(), dev.fences_recorded());
}

TEST(DeviceContract, HostDevicePerFreeFences) {
  HostDevice dev(4 * MiB);
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::per_free);
  LUMA_EXPECT_CONFORMS(dev, with_capacity(8 * MiB));
  EXPECT_EQ(dev.contract_violations(), 0u);
  EXPECT_EQ(dev.fences_released(), dev.fences_recorded());
}

// Every stream idle: record_fence answers kNoFence, and nothing is released.
TEST(DeviceContract, HostDeviceIdleStreams) {
  HostDevice dev(4 * MiB);
  dev.set_fences(true);
  dev.set_idle(true);
  LUMA_EXPECT_CONFORMS(dev, with_capacity(8 * MiB));
  EXPECT_EQ(dev.contract_violations(), 0u);
  EXPECT_EQ(dev.fences_released(), 0u);
}

// Its ordinary segments let through (the fallback when address space is refused), so
// that reserve's rules apply; its capacity reported as headroom.
TEST(DeviceContract, PagedDevice) {
  PagedDevice dev(2 * MiB, 16 * MiB);
  dev.allow_ordinary_segments(true);
  dev.set_report_headroom(true);
  dev.set_fences(true);
  LUMA_EXPECT_CONFORMS(dev, with_capacity(32 * MiB));
  EXPECT_EQ(dev.violations(), 0u);
  EXPECT_EQ(dev.held(), 0u);
  EXPECT_EQ(dev.address_ranges(), 0u);
  EXPECT_GT(dev.maps(), 0u);
}

TEST(DeviceContract, PagedDevicePerFreeFences) {
  PagedDevice dev(64 * 1024, 16 * MiB);
  dev.allow_ordinary_segments(true);
  dev.set_fences(true, FenceMode::per_free);
  LUMA_EXPECT_CONFORMS(dev, with_capacity(32 * MiB));
  EXPECT_EQ(dev.violations(), 0u);
}

TEST(DeviceContract, PagedDeviceWithoutFences) {
  PagedDevice dev;
  dev.allow_ordinary_segments(true);
  LUMA_EXPECT_CONFORMS(dev, DeviceContractOptions{});
  EXPECT_EQ(dev.violations(), 0u);
}

// luma simulate's device, for each free_sync (no capacity: it holds what it is asked).
TEST(DeviceContract, SimulatedDeviceFreeSyncEvent) {
  SimulatedDevice dev(FreeSync::event, 1000);
  LUMA_EXPECT_CONFORMS(dev, DeviceContractOptions{});
  EXPECT_GT(dev.fences(), 0u);
  EXPECT_EQ(dev.held(), 0u);
}

TEST(DeviceContract, SimulatedDeviceFreeSyncNone) {
  SimulatedDevice dev(FreeSync::none, 1000);
  LUMA_EXPECT_CONFORMS(dev, DeviceContractOptions{});
  EXPECT_EQ(dev.fences(), 0u);
  EXPECT_EQ(dev.held(), 0u);
}

TEST(DeviceContract, SimulatedDeviceFreeSyncDevice) {
  SimulatedDevice dev(FreeSync::device, 1000);
  LUMA_EXPECT_CONFORMS(dev, DeviceContractOptions{});
  EXPECT_EQ(dev.held(), 0u);
}

// A budget far below the wrapped device's capacity: out of memory is the budget's.
TEST(DeviceContract, LimitedDeviceOverAHostDevice) {
  HostDevice inner(1024 * MiB);
  inner.set_fences(true);
  ProcessBudget budget(4 * MiB);
  LimitedDevice dev(inner, budget);
  LUMA_EXPECT_CONFORMS(dev, with_capacity(8 * MiB));
  EXPECT_GT(dev.refusals(), 0u);
  EXPECT_EQ(dev.reserved(), 0u);
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(inner.contract_violations(), 0u);
}

// Over a device with virtual memory: create_memory is taken from the budget too.
TEST(DeviceContract, LimitedDeviceOverAPagedDevice) {
  PagedDevice inner(2 * MiB, 1024 * MiB);
  inner.allow_ordinary_segments(true);
  inner.set_fences(true);
  ProcessBudget budget(16 * MiB);
  LimitedDevice dev(inner, budget);
  LUMA_EXPECT_CONFORMS(dev, with_capacity(32 * MiB));
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(inner.violations(), 0u);
}

// The benchmarks' device (tests/bench/address_only_device.h): address ranges only.
TEST(DeviceContract, AddressOnlyDevice) {
  bench::AddressOnlyDevice dev;
  LUMA_EXPECT_CONFORMS(dev, DeviceContractOptions{});
  EXPECT_GT(dev.reserves(), 0u);
}

// The check itself finds what it claims to: a device that breaks three rules.
class BrokenDevice final : public Device {
 public:
  Reservation reserve(std::size_t) noexcept override { return {reinterpret_cast<void*>(std::uintptr_t{0x10080}), 0}; }
  bool release(void*, std::size_t) noexcept override { return false; }
  Headroom headroom() const noexcept override { return {2, 1}; }
};

TEST(DeviceContract, TheCheckNamesEachBrokenRule) {
  BrokenDevice dev;
  const std::vector<std::string> broken = check_device_contract(dev, with_capacity(8 * MiB));
  const std::string all = joined(broken);
  for (const char* rule : {"reserve.aligned:", "reserve.distinct:", "release.true:", "headroom.left_within_limit:",
                           "reserve.out_of_memory:"})
    EXPECT_NE(all.find(rule), std::string::npos) << rule << " not found in" << all;
}

}  // namespace
}  // namespace luma::core
