// context_table.h - one allocator (core::ContextAllocator) per CUDA context (blocks belong to
// the context that allocated them), found without a lock on the hot path. Entries are
// never freed (a context outliving luma's interest in it costs one small record; freeing
// it could race with a free on another thread): each is published into a slot of a
// fixed array while its context lives, and into an append-only list of every entry ever
// made, which the exit statistics read. A destroyed context's entry is retired: its slot
// is emptied for a later context (so only contexts alive at once are limited), lookups
// skip it, and it stays in the list for the statistics.
// Must never call the driver itself; the caller builds entries.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>

#include "context/context_allocator.h"
#include "settings/config.h"
#include "device_limits.h"
#include "driver_device.h"
#include "limits/limited_device.h"

namespace luma::shim {

struct ContextEntry {
  // `plan`: the process's accepted plan (LUMA_PLAN), or nullptr. `budget`: the device's
  // memory limit (device_limits.h), or nullptr for none; it must outlive the entry.
  ContextEntry(const RealDriver& driver, CUcontext c, int device_index,
               const core::Settings& settings, StreamRegistry& streams,
               const CaptureRegistry& captures, const core::PlanFile* plan = nullptr,
               core::MemoryBudget* budget = nullptr, const StreamOrder* order = nullptr)
      : ctx(c),
        device(device_index),
        driver_device(driver, c, settings.free_sync, streams, captures, order),
        limited(budget != nullptr ? std::make_unique<core::LimitedDevice>(driver_device, *budget)
                                  : nullptr),
        allocator(limited != nullptr ? static_cast<core::Device&>(*limited)
                                     : static_cast<core::Device&>(driver_device),
                  device_index, settings.allocator, plan) {}

  CUcontext ctx;
  int device;
  bool primary = false;  // the device's primary context (reset and release destroy it)
  std::atomic<bool> retired{false};
  ContextEntry* next_made = nullptr;  // the entry made before this one (ContextTable::made)
  DriverDevice driver_device;
  // With a memory limit: the driver device behind the device's budget (the allocator
  // reserves through it); nullptr without one, so an unlimited process pays nothing.
  std::unique_ptr<core::LimitedDevice> limited;
  core::ContextAllocator allocator;  // the cache, with the plan's replay in front of it
};

class ContextTable {
 public:
  // More contexts alive at once than this in one process is unheard of (one primary
  // context per device, or a few of the program's own); beyond it, allocations of further
  // contexts are forwarded to the driver uncached. Contexts that ended do not count.
  static constexpr std::size_t kMaxContexts = 256;

  // The live (not retired) entry of ctx.
  ContextEntry* find(CUcontext ctx) const noexcept {
    const std::size_t n = used_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i) {
      ContextEntry* e = slots_[i].load(std::memory_order_acquire);
      if (e != nullptr && e->ctx == ctx && !e->retired.load(std::memory_order_acquire)) return e;
    }
    return nullptr;
  }

  // Marks e retired and frees its slot (under the table's lock, so find_or_create never
  // races it). A reader that loaded e before sees it retired and skips it.
  void retire(ContextEntry* e) noexcept {
    std::lock_guard lock(mutex_);
    e->retired.store(true, std::memory_order_release);
    const std::size_t n = used_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < n; ++i)
      if (slots_[i].load(std::memory_order_relaxed) == e) slots_[i].store(nullptr, std::memory_order_release);
  }

  // make() -> ContextEntry* (new'd) or nullptr; called at most once per context.
  // nullptr when kMaxContexts contexts are alive.
  template <typename Make>
  ContextEntry* find_or_create(CUcontext ctx, Make&& make) {
    if (ContextEntry* e = find(ctx)) return e;
    std::lock_guard lock(mutex_);
    if (ContextEntry* e = find(ctx)) return e;
    const std::size_t n = used_.load(std::memory_order_relaxed);
    std::size_t slot = n;
    for (std::size_t i = 0; i < n && slot == n; ++i)
      if (slots_[i].load(std::memory_order_relaxed) == nullptr) slot = i;
    if (slot == kMaxContexts) return nullptr;
    ContextEntry* e = make();
    if (e == nullptr) return nullptr;
    e->next_made = made_.load(std::memory_order_relaxed);
    made_.store(e, std::memory_order_release);
    slots_[slot].store(e, std::memory_order_release);
    if (slot == n) used_.store(n + 1, std::memory_order_release);
    return e;
  }

  // Whether every slot holds a live context (find_or_create refuses new ones).
  bool full() const noexcept {
    const std::size_t n = used_.load(std::memory_order_acquire);
    if (n < kMaxContexts) return false;
    for (std::size_t i = 0; i < n; ++i)
      if (slots_[i].load(std::memory_order_acquire) == nullptr) return false;
    return true;
  }

  // The slots for a plain scan on the hot path: slot(i) for i < slots_used() is a live or
  // retired entry, or nullptr (skip both of the latter).
  std::size_t slots_used() const noexcept { return used_.load(std::memory_order_acquire); }
  ContextEntry* slot(std::size_t i) const noexcept { return slots_[i].load(std::memory_order_acquire); }

  // fn(ContextEntry&) for every live entry.
  template <typename Fn>
  void for_each_live(Fn&& fn) const {
    const std::size_t n = used_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i) {
      ContextEntry* e = slots_[i].load(std::memory_order_acquire);
      if (e != nullptr && !e->retired.load(std::memory_order_acquire)) fn(*e);
    }
  }
  // The first of every entry ever made, newest first (follow next_made); retired ones
  // included, for the statistics at exit.
  ContextEntry* made() const noexcept { return made_.load(std::memory_order_acquire); }
  bool empty() const noexcept { return made() == nullptr; }
  // The memory limit of each device index: budget_for only from inside find_or_create's
  // make() (under this table's lock).
  DeviceLimits& limits() noexcept { return limits_; }

 private:
  std::array<std::atomic<ContextEntry*>, kMaxContexts> slots_{};
  std::atomic<std::size_t> used_{0};  // slots ever used (a prefix of slots_)
  std::atomic<ContextEntry*> made_{nullptr};
  std::mutex mutex_;
  DeviceLimits limits_;
};

}  // namespace luma::shim
