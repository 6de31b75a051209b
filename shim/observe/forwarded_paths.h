// forwarded_paths.h - the allocation paths luma does not serve but counts: the program's
// stream-ordered pool allocations, managed memory and pinned host memory go to the
// driver untouched, and each call is counted here so the exit statistics show them (a
// program that allocates only with cudaMallocAsync still gets a report).
//
// One list of paths (LUMA_FORWARDED_PATHS) makes the enum, the counters and the rows of
// the statistics table. The counters are lock-free atomics of the leaked State, read at
// exit without a lock. They are per process: these calls name a stream, a context or no
// device at all, and luma does not ask the driver which device they landed on.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stats/stats_format.h"

namespace luma::shim {

// X(id, name): name is what the statistics print, id what the trace records. A VMM
// mapping counts as an allocation of its mapped bytes in virtual_mappings (the memory
// itself is counted once, by cuMemCreate, in virtual_memory).
// clang-format off
#define LUMA_FORWARDED_PATHS(X) \
  X(stream_ordered, "stream-ordered pool (cuMemAlloc[FromPool]Async, cuMemFreeAsync)") \
  X(managed, "managed (cuMemAllocManaged)") \
  X(pinned_host, "pinned host (cuMemAllocHost, cuMemHostAlloc, cuMemFreeHost)") \
  X(virtual_memory, "virtual memory (cuMemCreate, cuMemRelease)") \
  X(virtual_mappings, "virtual memory mappings (cuMemMap, cuMemUnmap)")
// clang-format on

enum class ForwardedPath : std::size_t {
#define LUMA_X(id, name) id,
  LUMA_FORWARDED_PATHS(LUMA_X)
#undef LUMA_X
};

inline constexpr std::size_t kForwardedPathCount = 0
#define LUMA_X(id, name) +1
    LUMA_FORWARDED_PATHS(LUMA_X)
#undef LUMA_X
    ;

// The path's id as the trace records it (docs/trace-format.md, forwarded_call).
inline const char* forwarded_path_id(ForwardedPath p) noexcept {
  static constexpr const char* kIds[] = {
#define LUMA_X(id, name) #id,
      LUMA_FORWARDED_PATHS(LUMA_X)
#undef LUMA_X
  };
  const auto i = static_cast<std::size_t>(p);
  return i < kForwardedPathCount ? kIds[i] : "unknown";
}

class ForwardedCounters {
 public:
  // A successful forwarded allocation of `bytes`, or a successful forwarded free (the
  // driver knows the size of what it frees; luma does not look it up).
  void allocated(ForwardedPath p, std::size_t bytes) noexcept {
    Row& r = rows_[static_cast<std::size_t>(p)];
    r.alloc_calls.fetch_add(1, std::memory_order_relaxed);
    r.alloc_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  void freed(ForwardedPath p) noexcept {
    rows_[static_cast<std::size_t>(p)].free_calls.fetch_add(1, std::memory_order_relaxed);
  }
  // Whether any forwarded call was counted (the process has something to report).
  bool any() const noexcept {
    for (const Row& r : rows_)
      if (r.alloc_calls.load(std::memory_order_relaxed) != 0 ||
          r.free_calls.load(std::memory_order_relaxed) != 0)
        return true;
    return false;
  }
  // One row per path, in the list's order, for core::format_forwarded_*.
  std::vector<core::ForwardedPathStats> snapshot() const {
    static constexpr const char* kNames[] = {
#define LUMA_X(id, name) name,
        LUMA_FORWARDED_PATHS(LUMA_X)
#undef LUMA_X
    };
    std::vector<core::ForwardedPathStats> out;
    for (std::size_t i = 0; i < kForwardedPathCount; ++i)
      out.push_back({kNames[i], rows_[i].alloc_calls.load(std::memory_order_relaxed),
                     rows_[i].alloc_bytes.load(std::memory_order_relaxed),
                     rows_[i].free_calls.load(std::memory_order_relaxed)});
    return out;
  }

 private:
  struct Row {
    std::atomic<std::uint64_t> alloc_calls{0};
    std::atomic<std::uint64_t> alloc_bytes{0};
    std::atomic<std::uint64_t> free_calls{0};
  };
  std::array<Row, kForwardedPathCount> rows_{};
};

}  // namespace luma::shim
