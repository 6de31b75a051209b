// context_allocator.cpp - see context_allocator.h.
#include "replay/context_allocator.h"

#include "allocator/allocator_lock.h"

namespace luma::core {

// Forwards every call to the real device under one lock: with a plan, two allocators (the
// replay and the cache) share one device whose implementation keeps its pools without a
// lock of its own (core/base/device.h: called with the allocator's per-device lock held).
class ContextAllocator::SerializedDevice final : public Device {
 public:
  explicit SerializedDevice(Device& inner) : inner_(inner), mode_(inner.fence_mode()) {}

  Reservation reserve(std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.reserve(bytes);
  }
  bool release(void* base, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.release(base, bytes);
  }
  FenceMode fence_mode() const noexcept override { return mode_; }  // constant (device.h)
  Fence record_fence() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.record_fence();
  }
  bool fence_done(Fence f) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.fence_done(f);
  }
  bool fence_wait(Fence f) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.fence_wait(f);
  }
  void fence_release(Fence f) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    inner_.fence_release(f);
  }
  std::size_t fence_batch_blocks() const noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.fence_batch_blocks();
  }
  Headroom headroom() const noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.headroom();
  }
  // Virtual memory (expandable segments) for the cache; the replay's arena is a reserve().
  VirtualMemory virtual_memory() const noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.virtual_memory();
  }
  Reservation reserve_address(std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.reserve_address(bytes);
  }
  bool release_address(void* base, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.release_address(base, bytes);
  }
  Memory create_memory(std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.create_memory(bytes);
  }
  bool release_memory(std::uint64_t handle, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.release_memory(handle, bytes);
  }
  int map_memory(void* addr, std::uint64_t handle, std::size_t offset, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.map_memory(addr, handle, offset, bytes);
  }
  bool unmap_memory(void* addr, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.unmap_memory(addr, bytes);
  }

 private:
  Device& inner_;
  const FenceMode mode_;
  mutable std::mutex mu_;
};

ContextAllocator::ContextAllocator(Device& device, int device_index, const AllocatorOptions& options,
                                 const PlanFile* plan)
    : device_index_(device_index),
      serialized_(plan != nullptr ? std::make_unique<SerializedDevice>(device) : nullptr),
      cache_(serialized_ ? static_cast<Device&>(*serialized_) : device, device_index, options) {
  if (plan == nullptr) return;
  const DevicePlanFile* dp = plan->find_device(device_index);
  DevicePlanFile empty;
  empty.device = device_index;
  replay_ = std::make_unique<PlanReplay>(*serialized_, device_index, dp != nullptr ? *dp : empty, cache_.options());
  following_.store(true, std::memory_order_release);
}

ContextAllocator::~ContextAllocator() = default;

void ContextAllocator::release_unused_arena() noexcept {
  if (replay_->following() || replay_->has_live_blocks()) return;
  replay_->empty_cache();  // waits for the arena's pending frees first
  if (!replay_->replay_stats().arena_held) {
    arena_begin_.store(0, std::memory_order_release);
    arena_end_.store(0, std::memory_order_release);
  }
}

bool ContextAllocator::in_arena(const void* ptr) const noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  return a >= arena_begin_.load(std::memory_order_acquire) && a < arena_end_.load(std::memory_order_acquire);
}

AllocResult ContextAllocator::allocate(std::size_t bytes) noexcept {
  if (bytes == 0) return {nullptr, AllocStatus::invalid_size};
  if (following_.load(std::memory_order_acquire)) {
    Divergence diverged;
    bool report = false;
    {
      std::lock_guard<std::mutex> lock(replay_mu_);
      const ReplayAllocation r = replay_->allocate(bytes);
      if (r.ptr != nullptr) {
        if (arena_end_.load(std::memory_order_relaxed) == 0) {
          SegmentRange arena;
          replay_->segment_of(r.ptr, &arena);
          const auto begin = reinterpret_cast<std::uintptr_t>(arena.base);
          arena_begin_.store(begin, std::memory_order_release);
          arena_end_.store(begin + arena.size, std::memory_order_release);
        }
        return {r.ptr, AllocStatus::ok};
      }
      if (r.diverged_now) {
        following_.store(false, std::memory_order_release);
        diverged = replay_->divergence();
        report = true;
        release_unused_arena();
      }
    }
    if (report && divergence_sink_ != nullptr) divergence_sink_->on_divergence(device_index_, diverged);
  }
  return cache_.allocate(bytes);
}

FreeStatus ContextAllocator::free(void* ptr) noexcept {
  if (replay_ != nullptr && in_arena(ptr)) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    const FreeStatus s = replay_->free(ptr);
    if (s == FreeStatus::ok) release_unused_arena();
    if (s != FreeStatus::not_owned) return s;
  }
  return cache_.free(ptr);
}

std::size_t ContextAllocator::empty_cache() noexcept {
  std::size_t released = 0;
  if (replay_ != nullptr) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    released += replay_->empty_cache();
    if (!replay_->replay_stats().arena_held) {
      arena_begin_.store(0, std::memory_order_release);
      arena_end_.store(0, std::memory_order_release);
    }
  }
  return released + cache_.empty_cache();
}

void ContextAllocator::release_all() noexcept {
  if (replay_ != nullptr) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    replay_->release_all();
    if (!replay_->replay_stats().arena_held) {
      arena_begin_.store(0, std::memory_order_release);
      arena_end_.store(0, std::memory_order_release);
      following_.store(replay_->following(), std::memory_order_release);
    }
  }
  cache_.release_all();
}

void ContextAllocator::drop_device_memory() noexcept {
  if (replay_ != nullptr) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    replay_->drop_device_memory();
    arena_begin_.store(0, std::memory_order_release);
    arena_end_.store(0, std::memory_order_release);
    following_.store(false, std::memory_order_release);
  }
  cache_.drop_device_memory();
}

bool ContextAllocator::owns(const void* ptr, std::size_t* size) const noexcept {
  if (replay_ != nullptr && in_arena(ptr)) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    return replay_->owns(ptr, size);
  }
  return cache_.owns(ptr, size);
}

bool ContextAllocator::segment_of(const void* ptr, SegmentRange* out) const noexcept {
  if (replay_ != nullptr && in_arena(ptr)) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    if (replay_->segment_of(ptr, out)) return true;
  }
  return cache_.segment_of(ptr, out);
}

bool ContextAllocator::block_of(const void* addr, SegmentRange* out) const noexcept {
  if (replay_ != nullptr && in_arena(addr)) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    return replay_->block_of(addr, out);
  }
  return cache_.block_of(addr, out);
}

DeviceStats ContextAllocator::stats() const noexcept {
  DeviceStats s;
  try_stats(&s, std::chrono::steady_clock::time_point::max());  // waits: cannot fail
  return s;
}

bool ContextAllocator::try_stats(DeviceStats* out, std::chrono::steady_clock::time_point deadline) const noexcept {
  DeviceStats s;
  if (!cache_.try_stats(&s, deadline)) return false;
  if (replay_ == nullptr) {
    *out = s;
    return true;
  }
  DeviceStats r;
  {
    if (!lock_until(replay_mu_, deadline)) return false;
    std::lock_guard<std::mutex> lock(replay_mu_, std::adopt_lock);
    r = replay_->stats();
  }
  // The arena and the cache serve at the same time (stats.h, PeakRule). The replay never
  // counts a context reset: the cache counts each once.
  add_part(s, r, PeakRule::parts_at_once);
  *out = s;
  return true;
}

std::size_t ContextAllocator::cached_bytes() const noexcept {
  std::size_t n = cache_.cached_bytes();
  if (replay_ != nullptr) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    n += replay_->cached_bytes();
  }
  return n;
}

void ContextAllocator::set_event_sink(EventSink* sink) noexcept {
  if (replay_ != nullptr) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    replay_->set_event_sink(sink);
  }
  cache_.set_event_sink(sink);
}

void ContextAllocator::set_live_writers(live::SlotWriter* cache, live::SlotWriter* replay) noexcept {
  if (replay_ != nullptr) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    replay_->set_live_writer(replay);
  }
  cache_.set_live_writer(cache);
}

std::vector<std::string> ContextAllocator::check() const {
  std::vector<std::string> v = cache_.check();
  if (replay_ != nullptr) {
    std::lock_guard<std::mutex> lock(replay_mu_);
    for (std::string& m : replay_->check()) v.push_back("plan replay: " + m);
    const bool held = replay_->replay_stats().arena_held;
    if (held != (arena_end_.load() != 0)) v.push_back("plan replay: the published arena range is stale");
    if (following_.load() != replay_->following()) v.push_back("plan replay: the routing flag disagrees");
  }
  return v;
}

ReplayStats ContextAllocator::replay_stats() const noexcept {
  ReplayStats r;
  try_replay_stats(&r, std::chrono::steady_clock::time_point::max());  // waits: cannot fail
  return r;
}

bool ContextAllocator::try_replay_stats(ReplayStats* out, std::chrono::steady_clock::time_point deadline) const noexcept {
  ReplayStats r;
  r.device = device_index_;
  if (replay_ != nullptr) {
    if (!lock_until(replay_mu_, deadline)) return false;
    std::lock_guard<std::mutex> lock(replay_mu_, std::adopt_lock);
    r = replay_->replay_stats();
  }
  DeviceStats c;
  if (!cache_.try_stats(&c, deadline)) return false;
  r.real_allocations = r.arena_reservations + c.num_device_alloc;
  r.cache_allocations = c.alloc_calls;
  *out = r;
  return true;
}

}  // namespace luma::core
