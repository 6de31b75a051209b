// record_pool.h - fixed-size records (blocks, segments) handed out from large chunks and
// taken back onto a free list, so the allocator's hot path never calls new or delete.
// ensure(n) is the only call that allocates host memory (and may throw std::bad_alloc,
// before the caller changed anything); get() and put() never allocate: the free list's
// capacity always covers every record ever made. Chunks live as long as the pool.
//
// Every record has a 32-bit number, kept in its `self` field, and at() finds a record by
// its number with a shift and a mask: chunks are all 2^ChunkShift records long (by default
// 32768: 2 MiB of 64-byte block records, one large page; segments, far fewer, use smaller
// chunks). A number is half the size of a pointer, which lets the
// allocator's pointer map keep a block and its size in 8 bytes. Numbers are given out in
// order as records are first taken, so a chunk's pages are touched only as it fills.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <new>
#include <type_traits>
#include <vector>

#include "allocator/large_pages.h"

namespace luma::core {

template <typename T, unsigned ChunkShift = 15>
class RecordPool {
  static_assert(std::is_trivially_destructible_v<T>, "records are reused without destruction");
  static_assert(alignof(T) <= kIndexMemoryAlignment, "chunks are aligned to a cache line");

 public:
  RecordPool() = default;
  RecordPool(const RecordPool&) = delete;
  RecordPool& operator=(const RecordPool&) = delete;
  ~RecordPool() {
    for (T* c : chunks_) free_index_memory(c, kChunkRecords * sizeof(T));
  }

  static constexpr unsigned kChunkShift = ChunkShift;
  static constexpr std::size_t kChunkRecords = std::size_t{1} << kChunkShift;
  // Numbers are 32 bits: 4 billion records (256 GiB of blocks' records) at most.
  static constexpr std::size_t kMaxRecords = std::size_t{1} << 32;

  // Makes sure at least n records can be taken without allocating.
  void ensure(std::size_t n) {
    while (spare() < n) add_chunk();
  }
  T* get() noexcept {  // the caller ensured one
    std::uint32_t self = 0;
    if (freed_ != 0) {
      self = free_[--freed_];
    } else {
      self = static_cast<std::uint32_t>(made_++);
    }
    --spare_;
    T* r = ::new (static_cast<void*>(at(self))) T{};
    r->self = self;
    return r;
  }
  void put(T* r) noexcept {  // capacity: add_chunk sized free_ for every record made
    free_[freed_++] = r->self;
    ++spare_;
  }
  // The record numbered i, for any i < made().
  T* at(std::uint32_t i) const noexcept { return chunks_[i >> kChunkShift] + (i & (kChunkRecords - 1)); }
  std::size_t made() const noexcept { return made_; }
  std::size_t in_use() const noexcept { return made_ - freed_; }
  // Records that can be taken without allocating: asked at every allocation, so kept.
  std::size_t spare() const noexcept { return spare_; }
  // Host memory held: the chunks and their list.
  std::size_t host_bytes() const noexcept {
    return chunks_.size() * index_memory_footprint(kChunkRecords * sizeof(T)) + chunks_.capacity() * sizeof(T*);
  }

 private:
  void add_chunk() {
    const std::size_t total = (chunks_.size() + 1) * kChunkRecords;
    if (total > kMaxRecords) throw std::bad_alloc();
    chunks_.reserve(chunks_.size() + 1);
    free_.resize(total);  // so that put() is a store: every record made fits
    chunks_.push_back(static_cast<T*>(allocate_index_memory(kChunkRecords * sizeof(T))));
    spare_ += kChunkRecords;
  }

  std::vector<T*> chunks_;
  // Numbers of records put back, taken again first (LIFO): free_[0, freed_). Sized for
  // every record there can be, so a put is one store (no capacity check: it is on every
  // free's path).
  std::vector<std::uint32_t> free_;
  std::size_t freed_ = 0;
  std::size_t made_ = 0;             // numbers [0, made_) have been given out
  std::size_t spare_ = 0;            // freed_ + the records never given out
};

}  // namespace luma::core
