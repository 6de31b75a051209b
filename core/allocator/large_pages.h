// large_pages.h - host memory for the caching allocator's big index arrays (block
// records, the pointer map), backed by 2 MiB pages where the OS offers them.
//
// Why: with a million live blocks the allocator's records and pointer map are a hundred
// MB visited at random, and with 4 KiB pages nearly every visit also misses the TLB. On
// the development VM a dependent random load over 64 MB took 261 ns with 4 KiB pages and
// 165 ns with 2 MiB pages (measured with a pointer chase; see docs/architecture.md).
// Requests under 2 MiB come from operator new: small allocators keep a small footprint.
//
// allocate_index_memory throws std::bad_alloc when no memory is left (callers reserve
// before they change state, so the allocator stays untouched); the memory is zeroed and
// aligned to a cache line (kIndexMemoryAlignment; block records are one line each).
#pragma once

#include <cstddef>

namespace luma::core {

inline constexpr std::size_t kIndexMemoryAlignment = 64;

void* allocate_index_memory(std::size_t bytes);
// `bytes` exactly as passed to allocate_index_memory.
void free_index_memory(void* p, std::size_t bytes) noexcept;
// What allocate_index_memory(bytes) holds in all (a mapping is whole large pages).
std::size_t index_memory_footprint(std::size_t bytes) noexcept;

}  // namespace luma::core
