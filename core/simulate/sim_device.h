// sim_device.h - the core::Device `luma simulate` runs the caching allocator over: no
// memory, only address ranges (the allocator never touches device memory), a count of the
// driver calls a real device would have seen, and fences that complete on the recorded
// run's clock.
//
// Fences: a fence recorded at simulated time t is done once the replay's time reaches
// t + fence latency: the latency stands for how far the GPU's work runs behind the
// program's calls (0: every fence is done when recorded, the policy alone). A wait for a
// fence not yet done is allowed (the program would stall; the replay's clock does not move,
// the stall is counted; on the legacy path a fence is a barrier, done when recorded). free_sync picks the fence mode as the shim's driver device does:
// event -> batched, none -> no fences, device -> a synchronization at each free (no fence
// left to wait for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "base/device.h"
#include "simulate/driver_costs.h"
#include "settings/config.h"

namespace luma::core {

class SimulatedDevice final : public Device {
 public:
  SimulatedDevice(FreeSync free_sync, std::uint64_t fence_latency_ns) noexcept
      : free_sync_(free_sync), latency_(fence_latency_ns) {}

  // The replay's clock: the time of the event being replayed. Never goes back.
  void set_now(std::uint64_t ns) noexcept { now_ = ns > now_ ? ns : now_; }

  Reservation reserve(std::size_t bytes) noexcept override {
    ++reserves_;
    call(DriverCall::mem_alloc, bytes);
    // Distinct, never reused, 2 MiB-aligned ranges (the driver's granularity for large
    // allocations), far from 0.
    const std::uintptr_t base = next_;
    next_ += (bytes + kGrain - 1) / kGrain * kGrain;
    held_ += bytes;
    grew();
    return {reinterpret_cast<void*>(base), 0};
  }
  bool release(void*, std::size_t bytes) noexcept override {
    ++releases_;
    call(DriverCall::mem_free, bytes);
    held_ -= bytes;
    return true;
  }

  // Virtual memory (expandable segments): 2 MiB pages, as on an H200; each memory made
  // counts as one driver allocation (a cuMemCreate), each given back as one free.
  VirtualMemory virtual_memory() const noexcept override { return {kGrain, kAddressSpace}; }
  Reservation reserve_address(std::size_t bytes) noexcept override {
    call(DriverCall::address_reserve, bytes);
    const std::uintptr_t base = next_;
    next_ += (bytes + kGrain - 1) / kGrain * kGrain;
    return {reinterpret_cast<void*>(base), 0};
  }
  // A memory is held until it is released and its last mapping is gone, as the driver
  // frees it ("when all outstanding mappings to the memory are unmapped and when all
  // outstanding references to the handle ... are also released", cuMemRelease in cuda.h):
  // a memory released while still mapped costs the device until the unmap. Freeing an
  // address range unmaps what it holds.
  bool release_address(void* base, std::size_t bytes) noexcept override {
    call(DriverCall::address_free, bytes);
    const auto lo = reinterpret_cast<std::uintptr_t>(base);
    for (auto it = mappings_.lower_bound(lo); it != mappings_.end() && it->first < lo + bytes;)
      it = unmap(it);
    return true;
  }
  Memory create_memory(std::size_t bytes) noexcept override {
    ++reserves_;
    call(DriverCall::mem_create, bytes);
    held_ += bytes;
    grew();
    memories_.push_back({bytes, 0, false});
    return {memories_.size(), 0};
  }
  bool release_memory(std::uint64_t memory, std::size_t) noexcept override {
    ++releases_;
    MemoryState& m = memories_[memory - 1];
    call(DriverCall::mem_release, m.bytes);
    m.released = true;
    if (m.mappings == 0) held_ -= m.bytes;
    return true;
  }
  int map_memory(void* addr, std::uint64_t memory, std::size_t, std::size_t bytes) noexcept override {
    call(DriverCall::mem_map, bytes);
    ++memories_[memory - 1].mappings;
    mappings_[reinterpret_cast<std::uintptr_t>(addr)] = memory;
    return 0;
  }
  bool unmap_memory(void* addr, std::size_t bytes) noexcept override {
    call(DriverCall::mem_unmap, bytes);
    const auto it = mappings_.find(reinterpret_cast<std::uintptr_t>(addr));
    if (it != mappings_.end()) unmap(it);
    return true;
  }

  FenceMode fence_mode() const noexcept override {
    switch (free_sync_) {
      case FreeSync::none: return FenceMode::none;
      case FreeSync::event: return FenceMode::batched;
      case FreeSync::device: return FenceMode::per_free;
    }
    return FenceMode::per_free;
  }
  // Whether fences are real (the fenced path), else each is a barrier on the legacy stream
  // that makes an epoch reusable when it closes (the legacy path: shim/device/driver_device.h).
  void set_fenced(bool fenced) noexcept { fenced_ = fenced; }
  Fence record_fence() noexcept override {
    if (!fenced_ || latency_ == 0 || free_sync_ == FreeSync::device) return kNoFence;
    ready_.push_back(now_ + latency_);
    return ready_.size();  // fence k is ready_[k - 1]
  }
  bool fence_done(Fence f) noexcept override { return now_ >= ready_[f - 1]; }
  bool fence_wait(Fence f) noexcept override {
    if (now_ < ready_[f - 1]) {
      ++waits_;
      wait_ns_ += ready_[f - 1] - now_;
    }
    return true;
  }

  std::uint64_t reserves() const noexcept { return reserves_; }
  // Calls of each kind (by DriverCall) and their estimated time (driver_costs.h).
  std::uint64_t calls(DriverCall c) const noexcept { return calls_[static_cast<std::size_t>(c)]; }
  std::uint64_t driver_ns() const noexcept { return driver_ns_; }
  std::uint64_t releases() const noexcept { return releases_; }
  std::size_t held() const noexcept { return held_; }
  std::size_t peak() const noexcept { return peak_; }
  // The most held since start_span() (a copy of a repeated window).
  void start_span() noexcept { span_peak_ = held_; }
  std::size_t span_peak() const noexcept { return span_peak_; }
  std::uint64_t fences() const noexcept { return ready_.size(); }
  // Waits for a fence not done yet, and the replay time they would have stalled for.
  std::uint64_t waits() const noexcept { return waits_; }
  std::uint64_t wait_ns() const noexcept { return wait_ns_; }

 private:
  static constexpr std::uintptr_t kGrain = std::uintptr_t{2} << 20;
  // Per pool: more than any GPU's memory (an H200's 141 GB and an eighth more).
  static constexpr std::size_t kAddressSpace = std::size_t{256} << 30;
  const FreeSync free_sync_;
  const std::uint64_t latency_;
  bool fenced_ = true;
  std::uint64_t now_ = 0;
  std::uintptr_t next_ = std::uintptr_t{1} << 44;
  std::size_t held_ = 0, peak_ = 0, span_peak_ = 0;
  void grew() noexcept {
    if (held_ > peak_) peak_ = held_;
    if (held_ > span_peak_) span_peak_ = held_;
  }
  std::uint64_t reserves_ = 0, releases_ = 0;
  std::uint64_t calls_[kDriverCalls] = {};
  std::uint64_t driver_ns_ = 0;
  void call(DriverCall c, std::size_t bytes) noexcept {
    ++calls_[static_cast<std::size_t>(c)];
    driver_ns_ += driver_call_ns(c, bytes);
  }
  struct MemoryState {
    std::size_t bytes;
    std::uint32_t mappings;
    bool released;
  };
  std::vector<MemoryState> memories_;              // by handle - 1
  std::map<std::uintptr_t, std::uint64_t> mappings_;  // mapped address -> handle

  std::map<std::uintptr_t, std::uint64_t>::iterator unmap(std::map<std::uintptr_t, std::uint64_t>::iterator it) {
    MemoryState& m = memories_[it->second - 1];
    if (--m.mappings == 0 && m.released) held_ -= m.bytes;
    return mappings_.erase(it);
  }
  std::vector<std::uint64_t> ready_;  // per fence: the time it is done
  std::uint64_t waits_ = 0, wait_ns_ = 0;
};

}  // namespace luma::core
