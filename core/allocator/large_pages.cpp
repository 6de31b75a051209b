// large_pages.cpp - see large_pages.h. Linux: an anonymous mapping aligned to 2 MiB and
// marked MADV_HUGEPAGE (transparent huge pages in "madvise" mode, Debian's default);
// elsewhere, or when the mapping fails for a reason other than memory, operator new.
#include "allocator/large_pages.h"

#include <cstdint>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace luma::core {
namespace {

constexpr std::size_t kLargePage = std::size_t{2} << 20;

constexpr std::size_t round_up(std::size_t v, std::size_t a) noexcept { return (v + a - 1) / a * a; }

bool use_mapping(std::size_t bytes) noexcept {
#if defined(__linux__)
  return bytes >= kLargePage;
#else
  (void)bytes;
  return false;
#endif
}

}  // namespace

void* allocate_index_memory(std::size_t bytes) {
  if (!use_mapping(bytes)) {
    void* p = ::operator new(bytes, std::align_val_t{kIndexMemoryAlignment});
    std::memset(p, 0, bytes);
    return p;
  }
#if defined(__linux__)
  // Map one large page more than needed, then trim both ends to a 2 MiB boundary: only
  // an aligned range can be backed by large pages.
  const std::size_t length = round_up(bytes, kLargePage);
  void* raw = ::mmap(nullptr, length + kLargePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = round_up(start, kLargePage);
  if (aligned > start) ::munmap(raw, aligned - start);
  const std::uintptr_t end = start + length + kLargePage;
  if (end > aligned + length) ::munmap(reinterpret_cast<void*>(aligned + length), end - (aligned + length));
  void* p = reinterpret_cast<void*>(aligned);
  ::madvise(p, length, MADV_HUGEPAGE);  // advice only: 4 KiB pages if the kernel declines
  return p;                             // anonymous mappings are zeroed
#else
  return nullptr;  // not reached: use_mapping() is false
#endif
}

std::size_t index_memory_footprint(std::size_t bytes) noexcept {
  return use_mapping(bytes) ? round_up(bytes, kLargePage) : bytes;
}

void free_index_memory(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (!use_mapping(bytes)) {
    ::operator delete(p, std::align_val_t{kIndexMemoryAlignment});
    return;
  }
#if defined(__linux__)
  ::munmap(p, round_up(bytes, kLargePage));
#endif
}

}  // namespace luma::core
