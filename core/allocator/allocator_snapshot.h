// allocator_snapshot.h - the caching allocator's segments and blocks at one moment
// (CachingAllocator::snapshot): what PyTorch's memory snapshot lists, for the
// out-of-memory snapshot (LUMA_OOM_SNAPSHOT) and for tests. Plain data, in address order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stats/stats.h"

namespace luma::core {

// A block's state as PyTorch's snapshot names it: held by the program, freed by it but
// its fences not done yet (in use until then), or free in the cache.
enum class BlockSnapshotState : std::uint8_t { active_allocated, active_pending_free, inactive };

struct BlockSnapshot {
  std::uintptr_t address = 0;
  std::size_t size = 0;       // rounded: what the block occupies
  std::size_t requested = 0;  // bytes asked for (0 when inactive)
  BlockSnapshotState state = BlockSnapshotState::inactive;
};

struct SegmentSnapshot {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  Pool pool = Pool::small;
  // One run of mapped pages of an expandable segment (each run is listed as a segment).
  bool expandable = false;
  std::vector<BlockSnapshot> blocks;  // tile the segment, in address order
};

using AllocatorSnapshot = std::vector<SegmentSnapshot>;  // segments in address order

}  // namespace luma::core
