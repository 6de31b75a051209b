// paged_device.h - a test double: a core::Device with virtual memory (for expandable
// segments) that checks every call against the contract in core/base/device.h and counts
// each violation instead of trusting the caller, so a test of the caching allocator can
// assert that it never maps over a mapping, unmaps what it did not map, or gives back
// memory that is still mapped. Its addresses are fake (page-aligned numbers, no memory
// behind them): the allocator never touches device memory. It also has a capacity (the
// physical memory it may hold at once), injected failures, a "capturing" state in which
// it refuses to unmap (as the driver may during a stream capture) and to wait for a
// fence, and fences that the caller completes by hand, as tests/doubles/host_device.h.
//
// Ordinary segments (reserve/release) are refused with an error and counted: an
// allocator on this device must use its virtual memory. allow_ordinary_segments() lets
// them through (held against the same capacity), for the fallback when address space is
// refused.
//
// Header-only, under tests/ and never linked into libluma.so.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "base/device.h"

namespace luma::core {

class PagedDevice final : public Device {
 public:
  static constexpr int kNoOrdinarySegments = 77;  // reserve()'s error code

  // page: the mapping granularity; capacity: the physical bytes it may hold at once;
  // address_space: what virtual_memory() says one pool should reserve.
  explicit PagedDevice(std::size_t page = std::size_t{2} << 20, std::size_t capacity = std::size_t{1} << 30,
                       std::size_t address_space = std::size_t{4} << 30)
      : page_(page), capacity_(capacity), address_space_(address_space) {}
  PagedDevice(const PagedDevice&) = delete;
  PagedDevice& operator=(const PagedDevice&) = delete;

  // ---- Device: ordinary segments (refused) -------------------------------------------
  Reservation reserve(std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    ++ordinary_reserves_;
    if (!ordinary_allowed_) return Reservation::failed(kNoOrdinarySegments);
    if (bytes == 0 || held_ > capacity_ || bytes > capacity_ - held_) return Reservation::out_of_memory();
    const std::uintptr_t base = next_address_;
    next_address_ += (bytes + page_ - 1) / page_ * page_ + page_;
    ordinary_[base] = bytes;
    held_ += bytes;
    peak_held_ = std::max(peak_held_, held_);
    return {reinterpret_cast<void*>(base), 0};
  }
  bool release(void* base, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    const auto it = ordinary_.find(reinterpret_cast<std::uintptr_t>(base));
    if (it == ordinary_.end() || it->second != bytes) {
      ++violations_;  // never reserved (or not so)
      return false;
    }
    ordinary_.erase(it);
    held_ -= bytes;
    return true;
  }

  // ---- Device: virtual memory ------------------------------------------------------
  VirtualMemory virtual_memory() const noexcept override { return {page_, address_space_}; }

  Reservation reserve_address(std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    if (bytes == 0 || bytes % page_ != 0) {
      ++violations_;
      return Reservation::failed(-1);
    }
    if (fail_reserve_addresses_ > 0) {
      --fail_reserve_addresses_;
      return Reservation::failed(fail_reserve_address_code_);
    }
    const std::uintptr_t base = next_address_;
    next_address_ += bytes + page_;  // a gap, so that ranges never touch
    ranges_[base] = bytes;
    ++address_reserves_;
    return {reinterpret_cast<void*>(base), 0};
  }

  bool release_address(void* base, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    const auto a = reinterpret_cast<std::uintptr_t>(base);
    const auto it = ranges_.find(a);
    if (it == ranges_.end() || it->second != bytes || any_page_mapped(a, bytes)) {
      ++violations_;
      return false;
    }
    ranges_.erase(it);
    ++address_releases_;
    return true;
  }

  Memory create_memory(std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    if (bytes == 0 || bytes % page_ != 0) {
      ++violations_;
      return {0, -1};
    }
    if (fail_creates_ > 0) {
      --fail_creates_;
      return {0, fail_create_code_};
    }
    if (held_ > capacity_ || bytes > capacity_ - held_) {
      ++refused_creates_;
      return {0, 0};
    }
    const std::uint64_t h = next_handle_++;
    memories_[h] = MemoryState{bytes, std::vector<std::uintptr_t>(bytes / page_, 0)};
    held_ += bytes;
    peak_held_ = std::max(peak_held_, held_);
    ++creates_;
    created_bytes_ += bytes;
    return {h, 0};
  }

  bool release_memory(std::uint64_t handle, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    const auto it = memories_.find(handle);
    if (it == memories_.end() || it->second.bytes != bytes) {
      ++violations_;
      return false;
    }
    for (std::uintptr_t at : it->second.mapped_at)
      if (at != 0) {
        ++violations_;  // still mapped somewhere
        return false;
      }
    held_ -= bytes;
    memories_.erase(it);
    ++releases_;
    return true;
  }

  int map_memory(void* addr, std::uint64_t handle, std::size_t offset, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    const auto a = reinterpret_cast<std::uintptr_t>(addr);
    const auto mem = memories_.find(handle);
    // The real driver maps a memory from its start only (cuMemMap: "offset ... currently
    // must be zero", cuda.h 13.0), and luma maps each memory whole.
    const bool ok = bytes != 0 && bytes % page_ == 0 && a % page_ == 0 && offset == 0 &&
                    inside_range(a, bytes) && !any_page_mapped(a, bytes) && mem != memories_.end() &&
                    bytes == mem->second.bytes;
    if (!ok) {
      ++violations_;
      return -1;
    }
    for (std::size_t k = 0; k < bytes / page_; ++k)
      if (mem->second.mapped_at[offset / page_ + k] != 0) {
        ++violations_;  // that part of the memory is mapped elsewhere already
        return -1;
      }
    if (fail_maps_ > 0) {
      if (fail_maps_skip_ > 0) {
        --fail_maps_skip_;
      } else {
        --fail_maps_;
        return fail_map_code_;
      }
    }
    for (std::size_t k = 0; k < bytes / page_; ++k) {
      pages_[a + k * page_] = Page{handle, offset + k * page_};
      mem->second.mapped_at[offset / page_ + k] = a + k * page_;
    }
    maps_[a] = bytes;
    ++maps_made_;
    return 0;
  }

  bool unmap_memory(void* addr, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    const auto a = reinterpret_cast<std::uintptr_t>(addr);
    const auto it = maps_.find(a);
    if (it == maps_.end() || it->second != bytes) {
      ++violations_;  // not exactly one earlier map_memory range
      return false;
    }
    if (capturing_) {
      ++refused_unmaps_;
      return false;
    }
    for (std::uintptr_t p = a; p < a + bytes; p += page_) {
      const auto pg = pages_.find(p);
      memories_.at(pg->second.memory).mapped_at[pg->second.offset / page_] = 0;
      pages_.erase(pg);
    }
    maps_.erase(it);
    ++unmaps_;
    return true;
  }

  // With set_report_headroom: the memory left under the capacity, as a limited device.
  Headroom headroom() const noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    if (!report_headroom_) return {};
    return {held_ < capacity_ ? capacity_ - held_ : 0, capacity_};
  }

  // ---- Device: fences (as HostDevice's) -----------------------------------------------
  FenceMode fence_mode() const noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    return fences_enabled_ ? mode_ : FenceMode::none;
  }
  Fence record_fence() noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    if (!fences_enabled_) {
      ++violations_;
      return kNoFence;
    }
    const Fence f = next_fence_++;
    fences_[f] = FenceState{};
    return f;
  }
  bool fence_done(Fence f) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    const auto it = fences_.find(f);
    if (it == fences_.end() || it->second.released) {
      ++violations_;
      return true;
    }
    return it->second.done;
  }
  bool fence_wait(Fence f) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    const auto it = fences_.find(f);
    if (it == fences_.end() || it->second.released) {
      ++violations_;
      return true;
    }
    if (capturing_ || cannot_wait_) return false;
    it->second.done = true;
    return true;
  }
  void fence_release(Fence f) noexcept override {
    std::lock_guard<std::mutex> l(mu_);
    const auto it = fences_.find(f);
    if (it == fences_.end() || it->second.released) {
      ++violations_;
      return;
    }
    it->second.released = true;
  }

  // ---- test controls ----------------------------------------------------------------
  void set_capacity(std::size_t bytes) { std::lock_guard<std::mutex> l(mu_); capacity_ = bytes; }
  void set_report_headroom(bool on) { std::lock_guard<std::mutex> l(mu_); report_headroom_ = on; }
  // The next n create_memory calls fail with the device error `code`.
  void fail_next_creates(int n, int code) {
    std::lock_guard<std::mutex> l(mu_);
    fail_creates_ = n;
    fail_create_code_ = code;
  }
  // After `skip` more successful map_memory calls, the next n fail with `code`.
  void fail_next_maps(int n, int code, int skip = 0) {
    std::lock_guard<std::mutex> l(mu_);
    fail_maps_ = n;
    fail_map_code_ = code;
    fail_maps_skip_ = skip;
  }
  void fail_next_reserve_addresses(int n, int code) {
    std::lock_guard<std::mutex> l(mu_);
    fail_reserve_addresses_ = n;
    fail_reserve_address_code_ = code;
  }
  // Capturing: unmap_memory and fence_wait refuse (a capture underway on the thread).
  void set_capturing(bool on) { std::lock_guard<std::mutex> l(mu_); capturing_ = on; }
  void allow_ordinary_segments(bool on) { std::lock_guard<std::mutex> l(mu_); ordinary_allowed_ = on; }
  std::size_t ordinary_segments() const { std::lock_guard<std::mutex> l(mu_); return ordinary_.size(); }
  // fence_wait alone refuses (unmapping still works: the strictest case for pending blocks).
  void set_cannot_wait(bool on) { std::lock_guard<std::mutex> l(mu_); cannot_wait_ = on; }
  // Set before making the allocator (it reads fence_mode() once).
  void set_fences(bool on, FenceMode mode = FenceMode::batched) {
    std::lock_guard<std::mutex> l(mu_);
    fences_enabled_ = on;
    mode_ = mode;
  }
  void complete_all_fences() {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [f, s] : fences_) s.done = true;
  }

  // ---- observations -----------------------------------------------------------------
  std::size_t held() const { std::lock_guard<std::mutex> l(mu_); return held_; }
  std::size_t peak_held() const { std::lock_guard<std::mutex> l(mu_); return peak_held_; }
  std::size_t memories() const { std::lock_guard<std::mutex> l(mu_); return memories_.size(); }
  std::uint64_t creates() const { std::lock_guard<std::mutex> l(mu_); return creates_; }
  std::size_t created_bytes() const { std::lock_guard<std::mutex> l(mu_); return created_bytes_; }
  std::uint64_t refused_creates() const { std::lock_guard<std::mutex> l(mu_); return refused_creates_; }
  std::uint64_t releases() const { std::lock_guard<std::mutex> l(mu_); return releases_; }
  std::uint64_t maps() const { std::lock_guard<std::mutex> l(mu_); return maps_made_; }
  std::uint64_t unmaps() const { std::lock_guard<std::mutex> l(mu_); return unmaps_; }
  std::uint64_t refused_unmaps() const { std::lock_guard<std::mutex> l(mu_); return refused_unmaps_; }
  std::uint64_t violations() const { std::lock_guard<std::mutex> l(mu_); return violations_; }
  std::uint64_t ordinary_reserves() const { std::lock_guard<std::mutex> l(mu_); return ordinary_reserves_; }
  std::size_t address_ranges() const { std::lock_guard<std::mutex> l(mu_); return ranges_.size(); }
  std::uint64_t address_reserves() const { std::lock_guard<std::mutex> l(mu_); return address_reserves_; }
  std::size_t mapped_bytes() const { std::lock_guard<std::mutex> l(mu_); return pages_.size() * page_; }
  // Whether every page that [p, p + n) touches is mapped.
  bool mapped(const void* p, std::size_t n) const {
    std::lock_guard<std::mutex> l(mu_);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    for (std::uintptr_t q = a & ~(page_ - 1); q < a + n; q += page_)
      if (pages_.count(q) == 0) return false;
    return n != 0;
  }
  // Whether any page that [p, p + n) touches is mapped.
  bool any_mapped(const void* p, std::size_t n) const {
    std::lock_guard<std::mutex> l(mu_);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return any_page_mapped(a & ~(page_ - 1), a + n - (a & ~(page_ - 1)));
  }

 private:
  struct MemoryState {
    std::size_t bytes = 0;
    std::vector<std::uintptr_t> mapped_at;  // per page of the memory: where it is mapped (0: nowhere)
  };
  struct Page {
    std::uint64_t memory = 0;
    std::size_t offset = 0;
  };
  struct FenceState {
    bool done = false;
    bool released = false;
  };

  bool any_page_mapped(std::uintptr_t a, std::size_t bytes) const {
    const auto it = pages_.lower_bound(a);
    return it != pages_.end() && it->first < a + bytes;
  }
  bool inside_range(std::uintptr_t a, std::size_t bytes) const {
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
  }

  mutable std::mutex mu_;
  std::size_t page_;
  std::size_t capacity_;
  std::size_t address_space_;
  std::uintptr_t next_address_ = std::uintptr_t{1} << 44;  // far from host memory; page-aligned
  std::map<std::uintptr_t, std::size_t> ranges_;  // reserved address ranges
  std::map<std::uintptr_t, std::size_t> ordinary_;  // ordinary segments, when allowed
  std::map<std::uint64_t, MemoryState> memories_;
  std::map<std::uintptr_t, Page> pages_;        // mapped page -> what is mapped there
  std::map<std::uintptr_t, std::size_t> maps_;  // each map_memory range still mapped
  std::uint64_t next_handle_ = 1;
  std::size_t held_ = 0, peak_held_ = 0, created_bytes_ = 0;
  std::uint64_t creates_ = 0, refused_creates_ = 0, releases_ = 0, maps_made_ = 0, unmaps_ = 0;
  std::uint64_t refused_unmaps_ = 0, violations_ = 0, ordinary_reserves_ = 0;
  std::uint64_t address_reserves_ = 0, address_releases_ = 0;
  int fail_creates_ = 0, fail_create_code_ = 0;
  int fail_maps_ = 0, fail_map_code_ = 0, fail_maps_skip_ = 0;
  int fail_reserve_addresses_ = 0, fail_reserve_address_code_ = 0;
  bool report_headroom_ = false;
  bool capturing_ = false;
  bool cannot_wait_ = false;
  bool ordinary_allowed_ = false;
  bool fences_enabled_ = false;
  FenceMode mode_ = FenceMode::batched;
  Fence next_fence_ = 1;
  std::map<Fence, FenceState> fences_;
};

}  // namespace luma::core
