// page_pool.h - the physical memory behind expandable segments (core::Device's virtual
// memory). A memory is one driver allocation (cuMemCreate) of some pages, and it is mapped
// whole at one place (cuMemMap maps a memory from its start only: cuda.h 13.0, "offset ...
// currently must be zero"), so it is unmapped whole too. A memory unmapped from where its
// pages were free is "spare": the next growth maps it where memory is needed before it
// makes a new one, so free memory moves inside a pool, or from the other pool, with an
// unmap and a map and no new driver allocation (docs/placement.md, "Expandable segments").
// Spare memories live only inside one growth (or one release): trim() gives back every one
// left.
//
// Spare memory is memory the device still holds: counted in the pool it was unmapped from
// (spare()), which the allocator adds to that pool's reserved bytes until trim().
// Not thread-safe: used under the allocator's lock. Host memory for its maps is allocated
// inside map/unmap and a failure is reported as out of memory, with nothing changed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/device.h"
#include "base/pool.h"

namespace luma::core {

class PagePool {
 public:
  explicit PagePool(Device& device) noexcept : dev_(device) {}
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // The page size (Device::VirtualMemory::page); set once, before any other call.
  void set_page(std::size_t page) noexcept { page_ = page; }

  // Maps memory over [addr, addr + bytes) (page multiples; unmapped, and so up to
  // addr + limit): spare memories first, each whole where it fits (one may reach past
  // `bytes`, up to the limit), then new memories of at most `unit` bytes each for the
  // rest (a smaller memory can be unmapped alone sooner; each is one driver allocation).
  // All or nothing. Returns the bytes mapped (>= bytes), or 0 and *why (error 0: out of
  // memory, host or device; else the device's own code). *made: the bytes of new memory.
  std::size_t map(std::uintptr_t addr, std::size_t bytes, std::size_t limit, std::size_t unit,
                  Reservation* why, std::size_t* made) noexcept;
  // Memories made and given back so far (driver allocations and frees). A map that makes
  // new memory first gives back the spare memories it does not take (so the device never
  // holds both): they leave spare() without being mapped.
  std::uint64_t made() const noexcept { return made_; }
  std::uint64_t released() const noexcept { return released_; }

  // The first mapping that starts at or after addr: its start and size (size 0: none).
  struct Mapping {
    std::uintptr_t start = 0;
    std::size_t size = 0;
  };
  Mapping mapping_from(std::uintptr_t addr) const noexcept;

  // Unmaps the memory mapped at `start` (a mapping's start); it becomes spare, counted in
  // pool p. false: the device keeps it mapped (a capture underway), or no host memory.
  bool unmap(Pool p, std::uintptr_t start) noexcept;

  // Gives back every spare memory the device lets go; returns the bytes per pool (where
  // each was counted) and how many memories.
  struct Trimmed {
    std::array<std::size_t, kPools> bytes{};
    std::size_t memories = 0;
  };
  Trimmed trim() noexcept;

  // Forgets everything without a device call (the device's memory is gone with its
  // context). Returns the memories forgotten.
  std::size_t forget() noexcept;

  std::size_t spare(Pool p) const noexcept { return spare_bytes_[static_cast<std::size_t>(p)]; }
  std::size_t memories() const noexcept { return memories_.size(); }
  std::size_t mapped_bytes() const noexcept { return mapped_bytes_; }
  // Whether [addr, addr + bytes) lies inside mapped memory (the allocator's check).
  bool covered(std::uintptr_t addr, std::size_t bytes) const noexcept;
  // Walks every structure; empty when consistent.
  std::vector<std::string> check() const;

 private:
  template <class Plan>
  void release_spare_except(const Plan& plan) noexcept;

  struct Memory {
    std::size_t bytes = 0;
    std::uintptr_t at = 0;  // where it is mapped; 0: spare
    Pool counted = Pool::small;  // spare: the pool whose reserved bytes count it
  };

  Device& dev_;
  std::size_t page_ = 0;
  std::unordered_map<std::uint64_t, Memory> memories_;
  std::map<std::uintptr_t, std::uint64_t> mapped_;  // mapping start -> memory
  std::multimap<std::size_t, std::uint64_t> spare_;  // size -> spare memory
  std::size_t mapped_bytes_ = 0;
  std::uint64_t made_ = 0, released_ = 0;
  std::array<std::size_t, kPools> spare_bytes_{};
};

}  // namespace luma::core
