// page_pool.h - the physical memory behind expandable segments (core::Device's virtual
// memory): memories the device makes (one driver allocation each, as many pages as one
// growth lacks), mapped page by page so that any page can be unmapped alone, and the
// pages unmapped but not given back ("spare"), which the next growth maps before it
// makes new memory. A memory goes back to the device only when none of its pages is
// mapped (trim). So a free page moves from the middle of a pool, or from the other pool,
// to where memory is needed with an unmap and a map and no new driver allocation: the
// pool's memory follows the program's need page by page while driver allocations stay
// few (docs/placement.md, "Expandable segments").
//
// Spare pages are memory the device still holds: each is counted in the pool it was
// unmapped from (spare()), which the allocator adds to that pool's reserved bytes.
// Not thread-safe: used under the allocator's lock. Host memory for its maps is allocated
// inside map/unmap and a failure is reported as out of memory, with nothing changed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
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
  std::size_t page() const noexcept { return page_; }

  // Maps [addr, addr + bytes) (whole pages) for pool p: spare pages first (p's own
  // first), then one new memory for the rest. All or nothing. Returns {addr, 0}, or no
  // base and why (error 0: out of memory, host or device; else the device's own code).
  // *made: the size of the new memory made (0: none), for the caller's statistics.
  Reservation map(Pool p, std::uintptr_t addr, std::size_t bytes, std::size_t* made) noexcept;

  // Unmaps the pages of [addr, addr + bytes) from the lowest on, each becoming spare in
  // pool p; stops at a page the device keeps mapped (a capture underway). Returns the
  // bytes unmapped: a prefix of the range.
  std::size_t unmap(Pool p, std::uintptr_t addr, std::size_t bytes) noexcept;

  // Gives back every memory none of whose pages is mapped; returns the bytes given back
  // per pool (where its spare pages were counted) and the memories released.
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
  std::size_t mapped_bytes() const noexcept { return pages_.size() * page_; }
  // Whether addr is the start of a mapped page (for the allocator's invariant check).
  bool page_mapped(std::uintptr_t addr) const noexcept { return pages_.count(addr) != 0; }
  // Walks every structure; empty when consistent (each memory's mapped and spare pages
  // add up to its size, no page both mapped and spare).
  std::vector<std::string> check() const;

 private:
  struct Memory {
    std::size_t bytes = 0;
    std::size_t mapped_pages = 0;
  };
  struct Page {
    std::uint64_t memory = 0;
    std::size_t offset = 0;
  };
  struct Spare {
    Page page;
    Pool pool = Pool::small;
  };

  Device& dev_;
  std::size_t page_ = 0;
  std::unordered_map<std::uint64_t, Memory> memories_;
  std::map<std::uintptr_t, Page> pages_;  // mapped page address -> what is mapped there
  std::vector<Spare> spare_;
  std::array<std::size_t, kPools> spare_bytes_{};
};

}  // namespace luma::core
