// context_table.h - one allocator (core::ContextAllocator) per CUDA context (blocks belong to
// the context that allocated them), found without a lock on the hot path: each entry is
// published into a slot of a fixed array while its context lives. A destroyed context's
// entry is retired: its slot is emptied for a later context, its statistics are folded
// into one record per device for the report at exit, and the entry itself (allocator,
// indexes, fences, sinks) waits in a graveyard until every thread that could have loaded
// it has left luma (grace_periods.h), then is freed. So what luma holds is bounded by the
// contexts alive at once, never by those that ever lived.
// Must never call the driver itself; the caller builds entries and frees them.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "replay/context_allocator.h"
#include "settings/config.h"
#include "budgets/device_limits.h"
#include "device/driver_device.h"
#include "threads/grace_periods.h"
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
  std::uint64_t unlinked_in = 0;  // the grace generation of its retirement (graveyard)
  DriverDevice driver_device;
  // With a memory limit: the driver device behind the device's budget (the allocator
  // reserves through it); nullptr without one, so an unlimited process pays nothing.
  std::unique_ptr<core::LimitedDevice> limited;
  core::ContextAllocator allocator;  // the cache, with the plan's replay in front of it
  core::EventSink* trace_sink = nullptr;  // the trace recorder's (given back when freed)
  // The event sinks made for this allocator (trace, out-of-memory watch, NVTX): freed with
  // the entry, by whoever frees it (serve.cpp), after the grace period.
  std::vector<std::unique_ptr<core::EventSink>> sinks;
};

// What the report at exit needs of contexts that ended, and what the table holds now.
struct ContextCounts {
  std::size_t made = 0;       // entries ever made
  std::size_t live = 0;       // published (context alive)
  std::size_t graveyard = 0;  // retired, waiting for their grace period
  std::size_t folded = 0;     // devices with folded statistics
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
    live_.fetch_sub(1, std::memory_order_relaxed);
  }

  // After retire(e), once the caller has dropped what e held: folds its final statistics
  // into its device's record (and keeps its plan's, when a plan serves), and puts it in
  // the graveyard; it is freed only after reclaimable() hands it back.
  void bury(ContextEntry* e, const core::DeviceStats& final_stats,
            const std::optional<core::ReplayStats>& final_replay) noexcept {
    std::lock_guard lock(mutex_);
    try {
      fold(final_stats);
      if (final_replay) fold(*final_replay);
      e->unlinked_in = GracePeriods::unlinked();
      graveyard_.push_back(e);
    } catch (...) {  // no memory for the record: the entry is never freed (nor counted)
    }
  }

  // The retired entries whose grace period has passed, taken out of the graveyard: the
  // caller frees them. It must hold no pointer to any retired entry itself.
  std::vector<ContextEntry*> reclaimable() noexcept {
    std::vector<ContextEntry*> out;
    std::lock_guard lock(mutex_);
    try {
      for (std::size_t i = 0; i < graveyard_.size();) {
        if (GracePeriods::passed(graveyard_[i]->unlinked_in)) {
          out.push_back(graveyard_[i]);
          graveyard_[i] = graveyard_.back();
          graveyard_.pop_back();
        } else {
          ++i;
        }
      }
    } catch (...) {  // no memory for the list: freed at a later retirement
    }
    return out;
  }

  // For the report at exit, under one lock so that no context counts twice (as folded and
  // as live): the folded statistics of ended contexts, the plan statistics kept, and the
  // live entries (their statistics read by the caller, inside a grace Section).
  void snapshot(std::vector<core::DeviceStats>* folded, std::vector<core::ReplayStats>* replays,
                std::vector<const ContextEntry*>* live) const {
    std::lock_guard lock(mutex_);
    *folded = folded_;
    *replays = replays_;
    for_each_live([&](const ContextEntry& e) { live->push_back(&e); });
  }

  // fn(const ContextEntry&) for every entry luma holds (live or in the graveyard), under the
  // table's lock: no entry is freed meanwhile.
  template <typename Fn>
  void for_each_held(Fn&& fn) const {
    std::lock_guard lock(mutex_);
    for_each_live([&](const ContextEntry& e) { fn(e); });
    for (const ContextEntry* e : graveyard_) fn(*e);
  }

  ContextCounts counts() const noexcept {
    std::lock_guard lock(mutex_);
    return {made_.load(std::memory_order_relaxed), live_.load(std::memory_order_relaxed),
            graveyard_.size(), folded_.size()};
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
    made_.fetch_add(1, std::memory_order_relaxed);
    live_.fetch_add(1, std::memory_order_relaxed);
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
  // Whether no entry was ever made.
  bool empty() const noexcept { return made_.load(std::memory_order_acquire) == 0; }
  // The memory limit of each device index: budget_for only from inside find_or_create's
  // make() (under this table's lock).
  DeviceLimits& limits() noexcept { return limits_; }

 private:
  std::array<std::atomic<ContextEntry*>, kMaxContexts> slots_{};
  std::atomic<std::size_t> used_{0};  // slots ever used (a prefix of slots_)
  std::atomic<std::size_t> made_{0};
  std::atomic<std::size_t> live_{0};
  mutable std::mutex mutex_;
  // Under mutex_: one record per device of the contexts that ended (PyTorch reports one
  // per device), the plan statistics of those a plan served, and the graveyard.
  std::vector<core::DeviceStats> folded_;
  std::vector<core::ReplayStats> replays_;
  std::vector<ContextEntry*> graveyard_;

  void fold(const core::DeviceStats& d) {
    for (core::DeviceStats& f : folded_)
      if (f.device == d.device) {
        core::accumulate_context(f, d);
        return;
      }
    folded_.push_back(d);
  }
  // A plan's statistics of ended contexts, one record per device: counts add up; the
  // first divergence seen is kept.
  void fold(const core::ReplayStats& r) {
    for (core::ReplayStats& f : replays_)
      if (f.device == r.device) {
        if (f.divergences == 0 && r.divergences != 0) f.first_divergence = r.first_divergence;
        f.served += r.served;
        f.iterations += r.iterations;
        f.divergences += r.divergences;
        f.arena_reservations += r.arena_reservations;
        f.real_allocations += r.real_allocations;
        f.cache_allocations += r.cache_allocations;
        f.fence_waits += r.fence_waits;
        f.arena_held = f.arena_held || r.arena_held;
        return;
      }
    replays_.push_back(r);
  }
  DeviceLimits limits_;
};

}  // namespace luma::shim
