// host_device.h - a test double: a core::Device over aligned host memory, with a
// configurable capacity, injected failures, call counters, fences that the caller
// completes by hand, and a "capturing" state in which it cannot wait for a fence (as a
// device whose thread is capturing a stream, core/base/device.h), so every path of the caching
// allocator and of plan replay can be driven without a GPU.
//
// Header-only, under tests/ and never linked into libluma.so (the shim has its own driver
// device). Its segments are host memory: never use it where device memory is expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "base/device.h"

namespace luma::core {

class HostDevice final : public Device {
 public:
  // capacity: total bytes that may be reserved at once; alignment of every segment base.
  explicit HostDevice(std::size_t capacity = std::size_t{1} << 30, std::size_t alignment = 256)
      : capacity_(capacity), alignment_(alignment) {}
  ~HostDevice() override {
    for (auto& [base, size] : segments_) std::free(base);
  }
  HostDevice(const HostDevice&) = delete;
  HostDevice& operator=(const HostDevice&) = delete;

  // ---- Device -----------------------------------------------------------------------
  Reservation reserve(std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reserve_calls_;
    if (fail_reserves_ > 0) {
      --fail_reserves_;
      return Reservation::failed(fail_code_);
    }
    if (bytes == 0 || bytes % alignment_ != 0) {
      ++contract_violations_;
      return Reservation::out_of_memory();
    }
    if (in_use_ > capacity_ || bytes > capacity_ - in_use_) return Reservation::out_of_memory();
    void* p = std::aligned_alloc(alignment_, bytes);
    if (p == nullptr) return Reservation::out_of_memory();
    segments_[p] = bytes;
    in_use_ += bytes;
    return {p, 0};
  }

  bool release(void* base, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    ++release_calls_;
    auto it = segments_.find(base);
    if (it == segments_.end() || it->second != bytes) {
      ++contract_violations_;
      return false;
    }
    if (fail_releases_) return false;
    std::free(base);
    in_use_ -= bytes;
    segments_.erase(it);
    return true;
  }

  FenceMode fence_mode() const noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return fences_enabled_ ? mode_ : FenceMode::none;
  }
  Fence record_fence() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    ++record_calls_;
    if (!fences_enabled_ || idle_) return kNoFence;
    const Fence f = next_fence_++;
    fences_[f] = FenceState{};
    return f;
  }
  bool fence_done(Fence f) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    ++poll_calls_;
    auto it = fences_.find(f);
    if (it == fences_.end() || it->second.released) {
      ++contract_violations_;
      return true;
    }
    return it->second.done;
  }
  bool fence_wait(Fence f) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fences_.find(f);
    if (it == fences_.end() || it->second.released) {
      ++contract_violations_;
      return true;
    }
    if (capturing_) {  // a blocking wait would break the capture: refused, still not done
      ++refused_waits_;
      return false;
    }
    it->second.done = true;  // "the work finished while we waited"
    waited_.push_back(f);
    return true;
  }
  std::size_t fence_batch_blocks() const noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return batch_blocks_;
  }
  void fence_release(Fence f) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fences_.find(f);
    if (it == fences_.end() || it->second.released) {
      ++contract_violations_;  // unknown token or released twice
      return;
    }
    it->second.released = true;
    ++fences_released_;
  }

  // ---- test controls ----------------------------------------------------------------
  void set_capacity(std::size_t bytes) { std::lock_guard<std::mutex> l(mu_); capacity_ = bytes; }
  // The next n reserves fail: out of memory (code 0), or with the device error `code`.
  void fail_next_reserves(int n, int code = 0) {
    std::lock_guard<std::mutex> l(mu_);
    fail_reserves_ = n;
    fail_code_ = code;
  }
  void set_fail_releases(bool fail) { std::lock_guard<std::mutex> l(mu_); fail_releases_ = fail; }
  // What fence_batch_blocks() answers (the frees one fence should cover; 0: no opinion).
  void set_fence_batch_blocks(std::size_t n) { std::lock_guard<std::mutex> l(mu_); batch_blocks_ = n; }
  // When enabled, freed blocks get fences (batched into epochs unless set_fence_mode says
  // per_free) that stay pending until complete_fence. Set before making the allocator:
  // it reads fence_mode() once.
  void set_fences(bool enabled) { std::lock_guard<std::mutex> l(mu_); fences_enabled_ = enabled; }
  void set_fence_mode(FenceMode mode) { std::lock_guard<std::mutex> l(mu_); mode_ = mode; }
  // While idle, record_fence() reports kNoFence: no stream has work, reuse at once.
  void set_idle(bool idle) { std::lock_guard<std::mutex> l(mu_); idle_ = idle; }
  // While capturing, fence_wait() refuses (returns false, the fence stays not done) and
  // every fence is deferred: done only through complete_fence / complete_all_fences.
  void set_capturing(bool capturing) { std::lock_guard<std::mutex> l(mu_); capturing_ = capturing; }
  void complete_fence(Fence f) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = fences_.find(f);
    if (it != fences_.end()) it->second.done = true;
  }
  void complete_all_fences() {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [f, s] : fences_) s.done = true;
  }

  // ---- observations -----------------------------------------------------------------
  std::size_t in_use() const { std::lock_guard<std::mutex> l(mu_); return in_use_; }
  std::size_t segments() const { std::lock_guard<std::mutex> l(mu_); return segments_.size(); }
  std::uint64_t reserve_calls() const { std::lock_guard<std::mutex> l(mu_); return reserve_calls_; }
  std::uint64_t release_calls() const { std::lock_guard<std::mutex> l(mu_); return release_calls_; }
  std::uint64_t contract_violations() const { std::lock_guard<std::mutex> l(mu_); return contract_violations_; }
  std::uint64_t fences_recorded() const { std::lock_guard<std::mutex> l(mu_); return next_fence_ - 1; }
  // record_fence() calls, kNoFence answers included.
  std::uint64_t record_calls() const { std::lock_guard<std::mutex> l(mu_); return record_calls_; }
  // fence_done() calls: how often the allocator polled.
  std::uint64_t poll_calls() const { std::lock_guard<std::mutex> l(mu_); return poll_calls_; }
  std::uint64_t fences_released() const { std::lock_guard<std::mutex> l(mu_); return fences_released_; }
  std::vector<Fence> fences_waited() const { std::lock_guard<std::mutex> l(mu_); return waited_; }
  // fence_wait() calls refused while capturing.
  std::uint64_t refused_waits() const { std::lock_guard<std::mutex> l(mu_); return refused_waits_; }
  // Whether [p, p + n) lies inside one segment this device handed out.
  bool contains(const void* p, std::size_t n) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = segments_.upper_bound(const_cast<void*>(p));
    if (it == segments_.begin()) return false;
    --it;
    const auto base = reinterpret_cast<std::uintptr_t>(it->first);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= base && a + n <= base + it->second;
  }

 private:
  struct FenceState {
    bool done = false;
    bool released = false;
  };

  mutable std::mutex mu_;
  std::size_t capacity_;
  std::size_t alignment_;
  std::size_t in_use_ = 0;
  std::map<void*, std::size_t> segments_;
  int fail_reserves_ = 0;
  int fail_code_ = 0;
  bool fail_releases_ = false;
  bool fences_enabled_ = false;
  bool idle_ = false;
  bool capturing_ = false;
  std::uint64_t refused_waits_ = 0;
  FenceMode mode_ = FenceMode::batched;
  std::uint64_t record_calls_ = 0;
  std::size_t batch_blocks_ = 0;
  std::uint64_t poll_calls_ = 0;
  Fence next_fence_ = 1;
  std::map<Fence, FenceState> fences_;
  std::vector<Fence> waited_;
  std::uint64_t reserve_calls_ = 0;
  std::uint64_t release_calls_ = 0;
  std::uint64_t fences_released_ = 0;
  std::uint64_t contract_violations_ = 0;
};

}  // namespace luma::core
