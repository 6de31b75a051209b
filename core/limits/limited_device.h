// limited_device.h - a core::Device that never holds more than a budget allows
// (LUMA_CONF memory_limit / memory_fraction, docs/settings.md): a reserve that would pass
// the budget is refused as out of memory before the wrapped device is asked, so the
// caching allocator's own path does the rest - release the cache, retry once, then fail
// with out-of-memory exactly as at a real OOM. A release gives the budget back. Memory
// made for expandable segments counts as a reserve does.
//
// Everything else (fences) is the wrapped device's. Same contract as
// core/base/device.h; the bytes it holds are counted here too, so a context whose
// memory vanished without a release (a destroyed context) can give its share back with
// forget_reserved().
#pragma once

#include <atomic>
#include <cstddef>

#include "base/device.h"
#include "limits/memory_budget.h"

namespace luma::core {

class LimitedDevice final : public Device {
 public:
  // Both must outlive this device.
  LimitedDevice(Device& inner, MemoryBudget& budget) noexcept : inner_(inner), budget_(budget) {}
  LimitedDevice(const LimitedDevice&) = delete;
  LimitedDevice& operator=(const LimitedDevice&) = delete;

  Reservation reserve(std::size_t bytes) noexcept override;
  bool release(void* base, std::size_t bytes) noexcept override;

  FenceMode fence_mode() const noexcept override { return inner_.fence_mode(); }
  Fence record_fence() noexcept override { return inner_.record_fence(); }
  bool fence_done(Fence f) noexcept override { return inner_.fence_done(f); }
  bool fence_wait(Fence f) noexcept override { return inner_.fence_wait(f); }
  void fence_release(Fence f) noexcept override { inner_.fence_release(f); }
  std::size_t fence_batch_blocks() const noexcept override { return inner_.fence_batch_blocks(); }
  // Virtual memory: address space and mappings cost nothing; physical memory is taken
  // from the budget as reserve() takes a segment's bytes, and given back with it.
  VirtualMemory virtual_memory() const noexcept override { return inner_.virtual_memory(); }
  Reservation reserve_address(std::size_t bytes) noexcept override { return inner_.reserve_address(bytes); }
  bool release_address(void* base, std::size_t bytes) noexcept override { return inner_.release_address(base, bytes); }
  Memory create_memory(std::size_t bytes) noexcept override;
  bool release_memory(std::uint64_t handle, std::size_t bytes) noexcept override;
  int map_memory(void* addr, std::uint64_t handle, std::size_t offset, std::size_t bytes) noexcept override {
    return inner_.map_memory(addr, handle, offset, bytes);
  }
  bool unmap_memory(void* addr, std::size_t bytes) noexcept override { return inner_.unmap_memory(addr, bytes); }
  Headroom headroom() const noexcept override {
    const std::size_t used = budget_.used(), limit = budget_.limit();
    return {used < limit ? limit - used : 0, limit};
  }

  // Bytes this device holds from the wrapped one (taken from the budget).
  std::size_t reserved() const noexcept { return reserved_.load(std::memory_order_acquire); }
  // The wrapped device's memory is gone without releases (its context was destroyed):
  // gives everything this device held back to the budget. Returns the bytes given back.
  std::size_t forget_reserved() noexcept;
  // Reserves refused by the budget (not by the wrapped device).
  std::size_t refusals() const noexcept { return refusals_.load(std::memory_order_relaxed); }

  MemoryBudget& budget() const noexcept { return budget_; }

 private:
  Device& inner_;
  MemoryBudget& budget_;
  std::atomic<std::size_t> reserved_{0};
  std::atomic<std::size_t> refusals_{0};
};

}  // namespace luma::core
