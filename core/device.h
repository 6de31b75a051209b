// device.h - the only way core/ reaches a GPU: reserve and release segments, and fences
// that say when work which may still touch a freed block has finished.
//
// Contract (every implementation: the shim's driver device, tests' host device):
// - reserve(bytes): bytes > 0 and a multiple of the allocator's alignment. Returns the base
//   of a new segment of exactly that many bytes, aligned to at least 256 B, or nullptr when
//   the device has no memory. Never throws. Never calls back into the allocator.
// - release(base, bytes): base/bytes exactly as returned by one reserve. Returns false if
//   the device reports an error (the allocator then keeps the segment).
// - fences: record_fence() is called when a block is freed and returns a token for "all
//   work issued so far that could use this block", or kNoFence when no such work can exist
//   (single-stream policy) or when the block may be reused at once. fence_done() polls
//   without blocking; fence_wait() blocks until done; fence_release() gives the token back.
//   Each token is released exactly once. A fence that cannot be recorded (driver error) is
//   reported as kNoFence after the implementation has made the memory safe another way
//   (for example by synchronizing), so the allocator never reuses memory unsafely.
// All methods are called with the allocator's per-device lock held; they must not block on
// anything the allocator holds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace luma::core {

using Fence = std::uint64_t;
inline constexpr Fence kNoFence = 0;

class Device {
 public:
  virtual ~Device() = default;

  virtual void* reserve(std::size_t bytes) noexcept = 0;
  virtual bool release(void* base, std::size_t bytes) noexcept = 0;

  virtual Fence record_fence() noexcept { return kNoFence; }
  virtual bool fence_done(Fence) noexcept { return true; }
  virtual void fence_wait(Fence) noexcept {}
  virtual void fence_release(Fence) noexcept {}
};

}  // namespace luma::core
