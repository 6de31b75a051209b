// caching_allocator.h - the caching allocator of one device: segments reserved from a
// core::Device, carved into blocks, reused and merged; memory goes back to the device only
// through empty_cache() (or the out-of-memory path). Thread-safe: one mutex per instance.
//
// It never throws out of its public methods, never calls the device while an observer
// could re-enter it, and never allocates host memory on the hot path beyond what its
// index structures need when they grow.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allocator/allocator_snapshot.h"
#include "base/constants.h"
#include "base/device.h"
#include "base/event.h"
#include "base/size_rounding.h"
#include "stats/stats.h"

namespace luma::core {

namespace live {
class SlotWriter;  // live/live_writer.h
}

enum class AllocStatus : std::uint8_t {
  ok = 0,
  invalid_size,   // zero bytes (the driver returns CUDA_ERROR_INVALID_VALUE)
  out_of_memory,  // the device refused, after releasing the cache and retrying
  device_error,   // the device failed otherwise (AllocResult::device_error says how)
};

enum class FreeStatus : std::uint8_t {
  ok = 0,
  not_owned,     // the pointer lies in no segment of this allocator: forward it
  invalid,       // inside a segment, but not the start of a live block (double free, or
                 // an interior pointer): CUDA_ERROR_INVALID_VALUE, nothing changed
};

struct AllocResult {
  void* ptr = nullptr;
  AllocStatus status = AllocStatus::ok;
  int device_error = 0;  // status device_error: the device's own code (Reservation::error)
};

// An address range: the segment (segment_of) or the live block (block_of) a pointer lies in.
struct SegmentRange {
  void* base = nullptr;
  std::size_t size = 0;
  bool own = false;  // segment_of: one block's own segment (allocate_own_segment)
  // segment_of: a pool's expandable segment (AllocatorOptions::expandable_segments):
  // `base`/`size` are its whole address range, of which only some pages are mapped.
  bool expandable = false;
};

class CachingAllocator {
 public:
  // `device` must outlive the allocator; `device_index` labels stats and events.
  CachingAllocator(Device& device, int device_index, const AllocatorOptions& options = {});
  ~CachingAllocator();  // releases nothing to the device: see release_all()
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  AllocResult allocate(std::size_t bytes) noexcept;
  // An allocation that is a segment of its own: a device reservation of exactly the
  // request (rounded to the alignment, no minimum segment), given back to the device when
  // its free completes instead of cached. For memory the program caches itself (another
  // allocator's segments: docs/architecture.md, "A cache under a cache") and for
  // ipc_own_segment: the pointer is the start of what the driver allocated, so an IPC
  // handle of it maps exactly this block. Counted, traced and limited like any other; freed
  // by free(). A segment the device refuses to release (exported, or a capture underway)
  // stays cached as an ordinary free segment.
  AllocResult allocate_own_segment(std::size_t bytes) noexcept;
  FreeStatus free(void* ptr) noexcept;

  // Releases every wholly free segment to the device; returns the bytes released.
  // Waits for pending fences first so that blocks freed but not yet reusable count (those
  // the device can wait for now: device.h).
  std::size_t empty_cache() noexcept;

  // Releases every segment back to the device, live blocks included. For tests and for
  // tearing down an allocator whose device is still alive; never called at process exit.
  // Releases nothing while the device cannot wait for a pending free (device.h).
  void release_all() noexcept;

  // The device's memory is already gone (its context was destroyed: cuCtxDestroy, a
  // primary context's reset or last release): forgets every segment and block without a
  // device call, as if each live block had been freed; pending fences are released
  // unchecked. Counted in num_context_resets. The allocator stays usable (empty).
  void drop_device_memory() noexcept;

  // Whether ptr is the start of a live block, and its rounded size.
  bool owns(const void* ptr, std::size_t* size = nullptr) const noexcept;
  // The segment containing ptr (any address inside it), if any.
  bool segment_of(const void* ptr, SegmentRange* out) const noexcept;
  // The live (allocated) block containing addr, any address inside it: its start and its
  // rounded size, for cuMemGetAddressRange on interior pointers. False when addr lies in
  // no segment, or in a free or pending block. O(1) for a block's start, otherwise a
  // binary search over segments and a walk over that segment's blocks.
  bool block_of(const void* addr, SegmentRange* out) const noexcept;

  DeviceStats stats() const noexcept;
  // stats() if the lock can be taken by `deadline`; false (and *out unchanged) if not.
  bool try_stats(DeviceStats* out, std::chrono::steady_clock::time_point deadline) const noexcept;
  // Bytes reserved but not held by the program (free or pending): what cuMemGetInfo may
  // report as free.
  std::size_t cached_bytes() const noexcept;
  // The size of the largest free block (0 if none): the largest request the cache could
  // serve without the device. Walks every block, so for reports (out of memory), never
  // the hot path; pending blocks are not free yet and do not count.
  std::size_t largest_free_block() const noexcept;
  // Host memory the allocator holds for its own records (its state, block and segment
  // records, pointer maps, fence queue): what an ended context gives back when freed.
  // False (and *out unchanged) if the lock cannot be taken by `deadline`, as try_stats.
  bool try_host_bytes(std::size_t* out, std::chrono::steady_clock::time_point deadline) const noexcept;
  // Every segment and its blocks, as they are now (allocator_snapshot.h): one walk under
  // the lock, no device call. For reports (out of memory) and tests, never the hot path;
  // throws std::bad_alloc when the host has no memory for the copy.
  AllocatorSnapshot snapshot() const;

  // Stream-ordered reuse (docs/architecture.md, "Stream-ordered reuse"): while on, a freed
  // block is reusable at once, with no fence, as under a device with FenceMode::none; the
  // caller turns it on only while every use of the device's memory is in the order of one
  // stream, and off for good as soon as that may not hold. Blocks already pending keep
  // their fences. Any thread, any time (one relaxed atomic).
  void set_reuse_at_once(bool on) noexcept;
  bool reuse_at_once() const noexcept;

  // Observer for every event; nullptr to stop. Set before use from one thread.
  void set_event_sink(EventSink* sink) noexcept;
  // The live record's slot this allocator keeps current (LUMA_LIVE_DIR, core/live/): its
  // figures written at the end of every call that changes them, under the allocator's
  // lock (a few plain stores; tests/bench/bench_live.cpp). nullptr: none. Set before use
  // from one thread.
  void set_live_writer(live::SlotWriter* writer) noexcept;

  const AllocatorOptions& options() const noexcept;

  // Walks every structure and returns each violated invariant as one message; empty when
  // consistent: bytes and counts add up, blocks tile each segment exactly, no two adjacent
  // free blocks, every index entry points at a free block of the right size class, and the
  // pointer map holds exactly the live blocks.
  std::vector<std::string> check() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The size of a new segment for a rounded request.
std::size_t segment_size_for(const AllocatorOptions& options, std::size_t rounded) noexcept;

}  // namespace luma::core
