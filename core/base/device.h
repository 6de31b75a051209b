// device.h - the only way core/ reaches a GPU: reserve and release segments, and fences
// that say when work which may still touch a freed block has finished.
//
// Contract (every implementation: the shim's driver device, tests' host device):
// - reserve(bytes): bytes > 0 and a multiple of the allocator's alignment. Returns the base
//   of a new segment of exactly that many bytes, aligned to at least 256 B; or no base and
//   why: out of memory (error 0: the allocator releases its cache and retries once), or
//   the device's own error code (a lost device, a sticky error: retrying cannot help, so
//   the allocator hands the code to its caller unchanged). Never throws. Never calls back
//   into the allocator.
// - release(base, bytes): base/bytes exactly as returned by one reserve. Returns false if
//   the device reports an error (the allocator then keeps the segment).
// - fences: a fence is a token for "all work issued so far" on every stream that could use
//   a freed block. fence_mode() (read once, when an allocator is made; constant for the
//   device's lifetime) says when the allocator asks for one:
//     per_free - record_fence() at every free (the original contract, and the default so
//                that a device written before batching stays correct);
//     batched  - frees collect into an "epoch" and one record_fence() covers the whole
//                epoch when it is closed, some time after its frees. Recording later than
//                the free is still safe: the fence then covers at least the work issued
//                before the free (conservatively, more);
//     none     - no work can use a freed block (single-stream policy): reusable at once,
//                the fence methods are never called.
//   record_fence() returns kNoFence when the covered blocks may be reused at once (every
//   stream idle, or the implementation synchronized). fence_done() polls without
//   blocking; fence_wait() blocks until done and returns true; fence_release() gives the
//   token back. Each token is released exactly once.
//   fence_batch_blocks(): how many frees one batched fence should cover at least, for a
//   device whose fence costs grow (with the streams of the context, say): the
//   allocator closes its epochs at max(epoch_max_blocks, this) blocks, capped by what an
//   epoch can list, and still at epoch_max_bytes, so the memory that pending frees hold
//   stays bounded by bytes as before. Asked after each recorded fence; 0: no opinion.
//   A device may be unable to wait at some moment (a stream capture is underway on the
//   calling thread: a blocking wait or synchronization would invalidate the capture, or
//   deadlock): fence_wait() then returns false at once and the fence stays not done; a
//   fence recorded then may be "deferred", reported not done by fence_done() until the
//   device can say the work ran. The allocator treats such a fence as not done: it finds
//   other memory (a new segment; plan replay diverges) and never reuses the memory early
//   (core/allocator/fence_queue.h). The default (every device written before this) always waits. A fence that cannot be recorded (driver error) is
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

enum class FenceMode : std::uint8_t { per_free, batched, none };  // see the contract above

// What reserve() gives back: a segment, or the reason there is none.
struct Reservation {
  void* base = nullptr;
  int error = 0;  // when base is null: 0 = out of memory, else the device's own error code

  static Reservation out_of_memory() noexcept { return {}; }
  static Reservation failed(int code) noexcept { return {nullptr, code}; }
};

class Device {
 public:
  virtual ~Device() = default;

  virtual Reservation reserve(std::size_t bytes) noexcept = 0;
  virtual bool release(void* base, std::size_t bytes) noexcept = 0;

  virtual FenceMode fence_mode() const noexcept { return FenceMode::per_free; }
  virtual Fence record_fence() noexcept { return kNoFence; }
  virtual bool fence_done(Fence) noexcept { return true; }
  virtual bool fence_wait(Fence) noexcept { return true; }  // false: cannot wait now
  virtual void fence_release(Fence) noexcept {}
  virtual std::size_t fence_batch_blocks() const noexcept { return 0; }
  // Under a memory limit: the most bytes reserve() may still give (0 when none), and the
  // limit. A device without one answers "no limit" (the default), and the allocator keeps
  // its ordinary placement; near a limit it places tightly (docs/placement.md).
  struct Headroom {
    std::size_t left = ~std::size_t{0};
    std::size_t limit = ~std::size_t{0};
  };
  virtual Headroom headroom() const noexcept { return {}; }

  // Virtual memory, for expandable segments (AllocatorOptions::expandable_segments): a
  // pool reserves address space once and maps physical memory into it as it grows, so
  // that its memory stays one contiguous range however the program's sizes vary, and free
  // memory can move to where it is needed (core/allocator/page_pool.h).
  // - virtual_memory(): the page (the granularity of mapping: the driver's allocation
  //   granularity, 2 MiB on an H200; a power of two, a multiple of the allocator's
  //   alignment) and how much address space one pool should reserve (the device's memory
  //   and some more, so that pages unmapped in the middle can be mapped again at the end).
  //   page 0: the device has none, and the allocator makes ordinary segments.
  // - reserve_address(bytes): bytes a multiple of the page; address space only, no memory.
  //   As reserve(): a base (page-aligned), or out of address space (error 0), or the
  //   device's own error code. release_address(base, bytes): exactly as one
  //   reserve_address, nothing mapped in it; false: the device keeps it (an error).
  // - create_memory(bytes): physical memory of `bytes` (a multiple of the page), mapped
  //   nowhere yet: a nonzero handle, or 0 and why (as reserve(): error 0 = out of memory,
  //   the allocator then gives back free memory and retries). One driver allocation.
  //   release_memory(handle, bytes): gives it back; none of it is mapped.
  // - map_memory(addr, handle, offset, bytes): maps [offset, offset + bytes) of the memory
  //   at addr (page-aligned, inside a reserved range, nothing mapped there), readable and
  //   writable by the device; 0, or the device's error code (nothing mapped then). The
  //   allocator always maps a memory whole, from offset 0: the real driver maps from a
  //   memory's start only (cuMemMap, cuda.h 13.0: "offset ... currently must be zero").
  //   unmap_memory(addr, bytes): exactly one earlier map_memory range; false: the device
  //   keeps it mapped (a capture underway, an error).
  struct VirtualMemory {
    std::size_t page = 0;
    std::size_t address_space = 0;
  };
  struct Memory {
    std::uint64_t handle = 0;
    int error = 0;  // when handle is 0: 0 = out of memory, else the device's own error code
  };
  virtual VirtualMemory virtual_memory() const noexcept { return {}; }
  virtual Reservation reserve_address(std::size_t) noexcept { return Reservation::failed(-1); }
  virtual bool release_address(void*, std::size_t) noexcept { return false; }
  virtual Memory create_memory(std::size_t) noexcept { return {0, -1}; }
  virtual bool release_memory(std::uint64_t, std::size_t) noexcept { return false; }
  virtual int map_memory(void*, std::uint64_t, std::size_t, std::size_t) noexcept { return -1; }
  virtual bool unmap_memory(void*, std::size_t) noexcept { return false; }
};

}  // namespace luma::core
