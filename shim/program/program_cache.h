// program_cache.h - recognises a caching allocator of the program's own that owns its
// segments, under which luma must not cache again (docs/architecture.md, "A cache under a
// cache"). Such an allocator sub-allocates its own cudaMalloc segments and exports a
// segment's start for IPC with the offset of a tensor from it (PyTorch's
// torch.multiprocessing): served from luma's cache, that start is a luma block inside a
// luma segment, and the handle maps luma's segment, so the peer reads the wrong bytes.
// Recognised, each of its allocations gets a driver allocation of its own
// (CachingAllocator::allocate_own_segment): IPC is right, the memory is counted, traced
// and limited, and no second cache holds freed memory the first one already holds.
//
// Known allocators: one table (kProgramCaches in program_cache.cpp), each a library that is
// loaded when the allocator is, and the variable that turns that allocator off.
#pragma once

#include <atomic>
#include <cstddef>

namespace luma::shim {

class ProgramCacheWatch {
 public:
  // Whether a known program cache is active in this process (once true, true for good).
  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  // Looks again when libraries were loaded since the last look (the loader's count of
  // loaded objects, read with dl_iterate_phdr; no luma lock may be held: it takes the
  // loader's lock). Logs one line when it recognises an allocator. `enabled`: the
  // program_cache setting.
  void check(bool enabled) noexcept;
  // Whether an allocation of `bytes` is of a size a program cache asks for (a segment:
  // 2 MiB or a multiple of it), for which a look is worth its few tens of ns.
  static bool segment_sized(std::size_t bytes) noexcept {
    return bytes >= kSegmentGranule && bytes % kSegmentGranule == 0;
  }
  // Whether a segment-sized allocation should look (check) now: every 16th, so a program
  // without such an allocator, allocating segment-sized blocks from luma's cache, pays the
  // loader's lock for a sixteenth of them. Every context's first allocation looks too.
  bool due() noexcept { return (ticks_.fetch_add(1, std::memory_order_relaxed) & 15) == 0; }

 private:
  static constexpr std::size_t kSegmentGranule = std::size_t{2} << 20;
  std::atomic<bool> active_{false};
  std::atomic<unsigned long long> seen_adds_{0};
  std::atomic<unsigned> ticks_{0};
};

}  // namespace luma::shim
