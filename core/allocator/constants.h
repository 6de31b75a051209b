// constants.h - every tunable number of the caching allocator, with the reason for its
// default, in one place. The defaults follow PyTorch's CUDACachingAllocator where users
// expect its behaviour, and the reference design (docs/reference-design.md) where it is
// stricter. The sizes and switches can be set through LUMA_CONF (see config.h); the
// epoch and polling bounds at the end are internal tuning, set in code (tests use them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace luma::core {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

// cudaMalloc (and cuMemAlloc) return pointers aligned to at least 256 bytes (CUDA C
// Programming Guide, "Device Memory Accesses"); programs rely on it, so every pointer luma
// hands out keeps it. The one name of that fact: the allocator's default alignment, the
// least alignment a plan may have (plan_constants.h), the alignment of buffers read from
// an RMM log (planner_constants.h) and the unit of a narrow trace event's address and size
// (trace/trace_format.h) are this constant or static_assert'ed against it.
inline constexpr std::size_t kCudaMallocAlignment = 256;

struct AllocatorOptions {
  // Every block keeps cudaMalloc's alignment, so each request is rounded up to a multiple
  // of it. Must be a power of two, at least kCudaMallocAlignment (config.cpp checks).
  std::size_t alignment = kCudaMallocAlignment;
  // A split leaves a remainder only when it is at least this big; below it the block is
  // handed out whole (the reference design's kMinSplit). Multiple of alignment.
  std::size_t min_split = kCudaMallocAlignment;
  // No segment is smaller than this (the reference design's kMinSegment): segments are
  // real driver allocations, and tiny ones waste driver calls and address space.
  std::size_t min_segment = 1 * MiB;
  // Requests up to this size are served from the small pool (PyTorch's kSmallSize).
  std::size_t small_size = 1 * MiB;
  // Small-pool segments are this big (PyTorch's kSmallBuffer): many small blocks share one.
  std::size_t small_segment = 2 * MiB;
  // Large requests below min_large_alloc share a segment of this size (kLargeBuffer).
  std::size_t large_segment = 20 * MiB;
  // Large requests at or above this get a segment of their own (kMinLargeAlloc) ...
  std::size_t min_large_alloc = 10 * MiB;
  // ... rounded up to a multiple of this (kRoundLarge), the driver's page granularity.
  std::size_t large_round = 2 * MiB;
  // Blocks at or above this size are never split for a smaller request, and a request
  // below it never takes such a block (PyTorch's max_split_size_mb): it keeps huge blocks
  // whole for huge requests. The default (no limit) splits everything.
  std::size_t max_split_size = std::numeric_limits<std::size_t>::max();
  // When the device refuses a segment: release every wholly free cached segment and retry
  // once before reporting out-of-memory.
  bool release_on_oom = true;
  // With a batched-fence device (device.h), frees collect into an open epoch that one
  // fence covers. It is closed when an allocation needs its memory, or at free once it
  // holds this many blocks or bytes (a device whose fences cost more, e.g. with many streams,
  // asks for more blocks: Device::fence_batch_blocks): a fence costs about 2 us, so 64
  // frees share one for ~30 ns each, while blocks that nothing has fenced (and that polling
  // therefore can never make reusable) stay few; the byte bound closes it early when big
  // blocks are freed, so they are fenced while the program runs on rather than when an
  // allocation already waits for them.
  std::size_t epoch_max_blocks = 64;
  std::size_t epoch_max_bytes = 256 * MiB;
  // Closed epochs are polled (one device query per stream, a driver call each) at the
  // start of an allocation. While the oldest fence stays not done, polling backs off:
  // after a not-done answer the next 1, 2, 4, ... allocations skip the poll, up to this
  // many; a done answer resets it. An allocation that finds nothing else that fits
  // always polls, and waits only if the fence is still not done, so the backoff never
  // makes the allocator grow; it only delays the reuse of a completed free by at most
  // this many allocations, while a program allocating fast between fences no longer pays
  // a query for each allocation (measured: most of free_sync:event's cost per pair with
  // the stand-in driver, docs/performance.md). 0 polls at every allocation (PyTorch's
  // process_events).
  std::size_t fence_poll_max_gap = 32;
};

}  // namespace luma::core
