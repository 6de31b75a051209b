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
  // Large requests below min_large_alloc share a segment of this size (PyTorch's
  // kLargeBuffer is 20 MiB). 32 MiB: a segment holds three or more of the 1-10 MiB blocks
  // a training step makes, so fewer segments are reserved again after a release
  // (release_free_segments); measured on torch_train and the synthetic runs 20 MiB needed
  // up to 1.8% as many driver allocations as allocations, 32 MiB 1.6%, for the same peak
  // within 1% (docs/placement.md).
  std::size_t large_segment = 32 * MiB;
  // Large requests at or above this get a segment of their own (kMinLargeAlloc) ...
  std::size_t min_large_alloc = 10 * MiB;
  // ... rounded up to a multiple of this (kRoundLarge), the driver's page granularity.
  std::size_t large_round = 2 * MiB;
  // Blocks at or above this size are never split for a smaller request, and a request
  // below it never takes such a block (PyTorch's max_split_size_mb): it keeps huge blocks
  // whole for huge requests. PyTorch's default splits everything; luma's 128 MiB keeps
  // the few huge blocks of a training step (logits, their gradients, embedding-sized
  // optimizer temporaries) in segments of their own, which smaller blocks then never pin,
  // so they are wholly free again at the step's end and release_free_segments can give
  // them back. Measured: the GPT-2-like run 1.020 -> 1.005 x peak live, the BERT-like one
  // 1.125 -> 1.013 (docs/placement.md). Without release_free_segments such a limit is
  // harmful (a huge block of each size stays cached: PyTorch users see 7.8x on GPT-2 with
  // max_split_size_mb:64), which is why the two go together.
  std::size_t max_split_size = 128 * MiB;
  // When the device refuses a segment: release every wholly free cached segment and retry
  // once before reporting out-of-memory.
  bool release_on_oom = true;
  // Before a new segment would raise the reserved bytes above their high-water mark (the
  // most reserved so far), release every wholly free segment of the request's pool, then
  // the other pool's, least recently freed first, until the new segment fits under the
  // mark (PyTorch's garbage_collection_threshold in spirit, with the mark as the
  // threshold). Every free segment there is too small for the request (else it would
  // have been found), so keeping it only adds to the peak; below the mark nothing is
  // released, so a program whose shapes repeat keeps its cache and its speed. Measured on
  // torch_train: peak reserved 1.535 -> 1.102 x peak live, driver allocations 0.31% ->
  // 0.57% of allocations (docs/placement.md). false: segments go back only through
  // empty_cache and the out-of-memory path.
  bool release_free_segments = true;
  // Near a memory limit (core::Device::headroom: less than limit / pressure_divisor left)
  // the allocator places tightly: before each new segment it releases every wholly free
  // one, a large request gets a segment of its own size (rounded to large_round) and never
  // a block more than large_round bigger than it, so no free piece is left too small for
  // the next request. It costs driver calls (up to a third of allocations when the limit
  // is within 5% of the need) and saves the memory that decides whether the run fits:
  // torch_train completes under 1.050 x peak live instead of 1.093 (docs/placement.md).
  // Half the limit: measured against a quarter, which started too late (1.070). 0: never.
  std::size_t pressure_divisor = 2;
  // Expandable segments (PyTorch's expandable_segments): each pool reserves address space
  // once and maps pages of the device's granularity into it as it grows, unmapping whole
  // free pages when memory is needed elsewhere (docs/placement.md, "Expandable
  // segments"). Blocks of it cannot be exported with legacy IPC (cuIpcGetMemHandle); a
  // device without virtual memory (core::Device::virtual_memory) keeps ordinary segments.
  bool expandable_segments = false;
  // With expandable segments: at most one driver allocation (cuMemCreate) per this many
  // allocations. A memory is mapped and given back only whole (cuMemMap maps a memory from
  // its start), so smaller memories follow the need more closely and bigger ones cost fewer
  // driver calls; the allocator sizes new ones to stay within this share (docs/placement.md).
  // 0: one page at a time.
  std::size_t expandable_allocations_per_memory = 50;
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
