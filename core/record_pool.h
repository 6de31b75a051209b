// record_pool.h - fixed-size records (blocks, segments) handed out from large chunks and
// taken back onto a free list, so the allocator's hot path never calls new or delete.
// ensure(n) is the only call that allocates host memory (and may throw std::bad_alloc,
// before the caller changed anything); get() and put() never allocate: the free list's
// capacity always covers every record ever made. Chunks live as long as the pool.
#pragma once

#include <algorithm>
#include <cstddef>
#include <new>
#include <type_traits>
#include <vector>

#include "large_pages.h"

namespace luma::core {

template <typename T>
class RecordPool {
  static_assert(std::is_trivially_destructible_v<T>, "records are reused without destruction");
  static_assert(alignof(T) <= kIndexMemoryAlignment, "chunks are aligned to a cache line");

 public:
  RecordPool() = default;
  RecordPool(const RecordPool&) = delete;
  RecordPool& operator=(const RecordPool&) = delete;
  ~RecordPool() {
    for (const Chunk& c : chunks_) free_index_memory(c.memory, c.bytes);
  }

  // Makes sure at least n records can be taken without allocating. Chunks double, so
  // the number of chunks stays logarithmic and large ones get large pages.
  void ensure(std::size_t n) {
    if (free_.size() >= n) return;
    const std::size_t count = std::max<std::size_t>({64, total_, n});
    chunks_.reserve(chunks_.size() + 1);
    free_.reserve(total_ + count);
    const std::size_t bytes = count * sizeof(T);
    auto* records = static_cast<T*>(allocate_index_memory(bytes));
    chunks_.push_back({records, bytes});
    for (std::size_t i = count; i-- > 0;) free_.push_back(records + i);
    total_ += count;
  }
  T* get() noexcept {  // the caller ensured one
    T* r = free_.back();
    free_.pop_back();
    return ::new (static_cast<void*>(r)) T{};
  }
  void put(T* r) noexcept { free_.push_back(r); }
  std::size_t in_use() const noexcept { return total_ - free_.size(); }
  std::size_t spare() const noexcept { return free_.size(); }

 private:
  struct Chunk {
    T* memory;
    std::size_t bytes;
  };
  std::vector<Chunk> chunks_;
  std::vector<T*> free_;
  std::size_t total_ = 0;
};

}  // namespace luma::core
