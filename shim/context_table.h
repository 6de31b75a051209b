// context_table.h - one allocator (core::DeviceAllocator) per CUDA context (blocks belong to the context
// that allocated them), found without a lock on the hot path: entries are published once
// into a fixed array and never removed or freed (a context outliving luma's interest in it
// costs one small record; freeing it could race with a free on another thread).
// A destroyed context's entry is retired: lookups skip it, so a context created later -
// even one the driver gives the same handle - gets a fresh entry; the retired one stays
// for the statistics at exit.
// Must never call the driver itself; the caller builds entries.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>

#include "device_allocator.h"
#include "config.h"
#include "device_limits.h"
#include "driver_device.h"
#include "limited_device.h"

namespace luma::shim {

struct ContextEntry {
  // `plan`: the process's accepted plan (LUMA_PLAN), or nullptr. `budget`: the device's
  // memory limit (device_limits.h), or nullptr for none; it must outlive the entry.
  ContextEntry(const RealDriver& driver, CUcontext c, int device_index,
               const core::Settings& settings, StreamRegistry& streams,
               const core::PlanFile* plan = nullptr, core::MemoryBudget* budget = nullptr)
      : ctx(c),
        device(device_index),
        driver_device(driver, c, settings.free_sync, streams),
        limited(budget != nullptr ? std::make_unique<core::LimitedDevice>(driver_device, *budget)
                                  : nullptr),
        allocator(limited != nullptr ? static_cast<core::Device&>(*limited)
                                     : static_cast<core::Device&>(driver_device),
                  device_index, settings.allocator, plan) {}

  CUcontext ctx;
  int device;
  bool primary = false;  // the device's primary context (reset and release destroy it)
  std::atomic<bool> retired{false};
  DriverDevice driver_device;
  // With a memory limit: the driver device behind the device's budget (the allocator
  // reserves through it); nullptr without one, so an unlimited process pays nothing.
  std::unique_ptr<core::LimitedDevice> limited;
  core::DeviceAllocator allocator;  // the cache, with the plan's replay in front of it
};

class ContextTable {
 public:
  // More contexts than this in one process is unheard of (one primary context per device,
  // re-made after each reset); beyond it, allocations of further contexts are forwarded to
  // the driver uncached.
  static constexpr std::size_t kMaxContexts = 256;

  // The live (not retired) entry of ctx.
  ContextEntry* find(CUcontext ctx) const noexcept {
    const std::size_t n = count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i) {
      ContextEntry* e = entries_[i].load(std::memory_order_acquire);
      if (e->ctx == ctx && !e->retired.load(std::memory_order_acquire)) return e;
    }
    return nullptr;
  }

  // Marks e retired (under the table's lock, so find_or_create never races it).
  void retire(ContextEntry* e) noexcept {
    std::lock_guard lock(mutex_);
    e->retired.store(true, std::memory_order_release);
  }

  // make() -> ContextEntry* (new'd) or nullptr; called at most once per context.
  template <typename Make>
  ContextEntry* find_or_create(CUcontext ctx, Make&& make) {
    if (ContextEntry* e = find(ctx)) return e;
    std::lock_guard lock(mutex_);
    if (ContextEntry* e = find(ctx)) return e;
    const std::size_t n = count_.load(std::memory_order_relaxed);
    if (n == kMaxContexts) return nullptr;
    ContextEntry* e = make();
    if (e == nullptr) return nullptr;
    entries_[n].store(e, std::memory_order_release);
    count_.store(n + 1, std::memory_order_release);
    return e;
  }

  std::size_t size() const noexcept { return count_.load(std::memory_order_acquire); }
  ContextEntry* at(std::size_t i) const noexcept {
    return entries_[i].load(std::memory_order_acquire);
  }

  // The memory limit of each device index: budget_for only from inside find_or_create's
  // make() (under this table's lock).
  DeviceLimits& limits() noexcept { return limits_; }

 private:
  std::array<std::atomic<ContextEntry*>, kMaxContexts> entries_{};
  std::atomic<std::size_t> count_{0};
  std::mutex mutex_;
  DeviceLimits limits_;
};

}  // namespace luma::shim
