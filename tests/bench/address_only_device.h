// address_only_device.h - the core::Device the allocator benchmarks run over
// (bench_allocator, pair_driver): segments are untouched address ranges (the allocator
// never dereferences device memory), so 10^6 live blocks need no RAM. Fences as the
// shim's default policy gets them: batched into epochs, and kNoFence from record_fence
// (every stream idle, which a host-only benchmark always is). Counts its reserves so a
// benchmark can show how many pairs reached the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench_workload.h"
#include "base/device.h"

namespace luma::bench {

class AddressOnlyDevice final : public core::Device {
 public:
  core::FenceMode fence_mode() const noexcept override { return core::FenceMode::batched; }
  core::Reservation reserve(std::size_t bytes) noexcept override {
    ++reserves_;
    return {space_.take(bytes), 0};
  }
  bool release(void*, std::size_t) noexcept override { return true; }
  std::uint64_t reserves() const noexcept { return reserves_; }

 private:
  AddressSpace space_;
  std::uint64_t reserves_ = 0;
};

}  // namespace luma::bench
