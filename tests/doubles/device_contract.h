// device_contract.h - one conformance check of the core::Device contract (the comment atop
// core/base/device.h), for every implementation: the test doubles, the simulator's device,
// the limited device and the shim's driver device. check_device_contract() drives a device
// through each rule the allocator relies on and returns the rules it broke, one string
// each, starting with the rule's name ("reserve.aligned: ..."); empty when it conforms.
//
// It calls the device as the allocator would (one thread, each token released once, the
// fence methods never in mode none, no virtual memory call when the page is 0) and gives
// back everything it took, so a double that counts violations of its own can be asked
// afterwards too. Header-only, gtest-free.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/device.h"

namespace luma::core {

struct DeviceContractOptions {
  // Segments reserved at once, each a multiple of 256 (the allocator's alignment).
  std::vector<std::size_t> sizes = {256, 768, 4096, 65536, std::size_t{2} << 20};
  // A reserve (and, with virtual memory, a create_memory of it rounded up to the page)
  // the device cannot give: it must answer out of memory, error 0. 0: not checked (a
  // device without a capacity).
  std::size_t too_big = 0;
  // Pages of the address range reserved for the virtual memory rules (at least 3).
  std::size_t vm_pages = 4;
  // Fences recorded (and each waited for or polled, and released).
  int fences = 4;
};

inline std::vector<std::string> check_device_contract(Device& d, const DeviceContractOptions& o = {}) {
  std::vector<std::string> v;
  auto fail = [&v](const char* rule, std::string what) { v.push_back(std::string(rule) + ": " + std::move(what)); };
  const auto num = [](std::uintmax_t x) { return std::to_string(x); };
  constexpr std::size_t kNone = ~std::size_t{0};

  // fence_mode(): constant for the device's lifetime.
  const FenceMode mode = d.fence_mode();
  for (int i = 0; i < 3; ++i)
    if (d.fence_mode() != mode) fail("fence_mode.constant", "fence_mode() changed between calls");

  // headroom(): left never above the limit.
  auto headroom = [&](const char* when) {
    const Device::Headroom h = d.headroom();
    if (h.left > h.limit)
      fail("headroom.left_within_limit", std::string(when) + ": left " + num(h.left) + " > limit " + num(h.limit));
    return h;
  };

  // reserve(bytes): a base aligned to at least 256 B, a new range of exactly those bytes
  // (none overlaps another held); under a limit, headroom's left drops by at least them.
  struct Held {
    std::uintptr_t base;
    std::size_t bytes;
  };
  std::vector<Held> held;
  for (std::size_t bytes : o.sizes) {
    const Device::Headroom before = headroom("before a reserve");
    const Reservation r = d.reserve(bytes);
    if (r.base == nullptr) {
      fail("reserve.gives", "no base for " + num(bytes) + " bytes (error " + num(static_cast<std::uintmax_t>(r.error)) + ")");
      continue;
    }
    const auto a = reinterpret_cast<std::uintptr_t>(r.base);
    if (a % 256 != 0) fail("reserve.aligned", "base " + num(a) + " of " + num(bytes) + " bytes is not 256-aligned");
    for (const Held& h : held)
      if (a < h.base + h.bytes && h.base < a + bytes)
        fail("reserve.distinct", "[" + num(a) + ", +" + num(bytes) + ") overlaps [" + num(h.base) + ", +" + num(h.bytes) + ")");
    held.push_back({a, bytes});
    const Device::Headroom after = headroom("after a reserve");
    if (before.limit != kNone && before.left != kNone && after.left + bytes > before.left)
      fail("headroom.drops", "left " + num(before.left) + " -> " + num(after.left) + " after reserving " + num(bytes));
  }
  // release(base, bytes): exactly as returned; true.
  for (const Held& h : held)
    if (!d.release(reinterpret_cast<void*>(h.base), h.bytes))
      fail("release.true", "release of [" + num(h.base) + ", +" + num(h.bytes) + ") returned false");

  // Out of memory is error 0 (the allocator then releases its cache and retries).
  if (o.too_big != 0) {
    const Reservation r = d.reserve(o.too_big);
    if (r.base != nullptr) {
      fail("reserve.out_of_memory", "a reserve of " + num(o.too_big) + " bytes was given");
      d.release(r.base, o.too_big);
    } else if (r.error != 0) {
      fail("reserve.out_of_memory", "out of memory reported as error " + num(static_cast<std::uintmax_t>(r.error)) + ", not 0");
    }
  }

  // Fences (never called in mode none): each token a new one, polled without harm,
  // waited for (true: nothing here is capturing), released exactly once. kNoFence is no
  // token: reusable at once, never released.
  if (mode != FenceMode::none) {
    (void)d.fence_batch_blocks();
    std::set<Fence> outstanding;
    std::vector<Fence> tokens;
    for (int i = 0; i < o.fences; ++i) {
      const Fence f = d.record_fence();
      if (f == kNoFence) continue;
      if (!outstanding.insert(f).second) fail("fence.distinct", "token " + num(f) + " given again before its release");
      tokens.push_back(f);
    }
    // The first half waited for, the rest polled then released undone (as the allocator's
    // drop of a lost context does), the newest first.
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      (void)d.fence_done(tokens[i]);
      if (i < (tokens.size() + 1) / 2 && !d.fence_wait(tokens[i]))
        fail("fence.wait", "fence_wait(" + num(tokens[i]) + ") returned false with nothing capturing");
    }
    for (std::size_t i = tokens.size(); i-- > 0;) d.fence_release(tokens[i]);
    // A token recorded after the releases works as the first ones did.
    const Fence f = d.record_fence();
    if (f != kNoFence) {
      if (!d.fence_wait(f)) fail("fence.wait", "fence_wait(" + num(f) + ") returned false with nothing capturing");
      d.fence_release(f);
    }
  }

  // Virtual memory: page 0 (none: nothing more is called), or a power of two that is a
  // multiple of 256, with an address space of whole pages.
  const Device::VirtualMemory vm = d.virtual_memory();
  if (vm.page == 0) return v;
  if (!std::has_single_bit(vm.page) || vm.page % 256 != 0)
    fail("virtual_memory.page", "page " + num(vm.page) + " is not a power of two multiple of 256");
  if (vm.address_space == 0 || vm.address_space % vm.page != 0)
    fail("virtual_memory.address_space", "address space " + num(vm.address_space) + " is not whole pages");
  const Device::VirtualMemory again = d.virtual_memory();
  if (again.page != vm.page || again.address_space != vm.address_space)
    fail("virtual_memory.constant", "virtual_memory() changed between calls");
  if (!v.empty()) return v;  // the rules below need a sound page

  const std::size_t page = vm.page;
  const std::size_t range_bytes = std::max<std::size_t>(o.vm_pages, 3) * page;
  const Reservation range = d.reserve_address(range_bytes);
  if (range.base == nullptr) {
    fail("reserve_address.gives", "no range of " + num(range_bytes) + " bytes (error " + num(static_cast<std::uintmax_t>(range.error)) + ")");
    return v;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(range.base);
  if (base % page != 0) fail("reserve_address.aligned", "base " + num(base) + " is not page-aligned");

  // A memory of one page and one of two, mapped whole from offset 0 inside the range,
  // next to each other; unmapped exactly as mapped, released, the range given back.
  struct Mapped {
    std::uint64_t handle;
    std::uintptr_t at;
    std::size_t bytes;
  };
  std::vector<Mapped> maps;
  std::size_t at = base + page;  // not at the range's start: inside it, anywhere
  for (std::size_t pages : {std::size_t{1}, std::size_t{2}}) {
    const std::size_t bytes = pages * page;
    const Device::Headroom before = headroom("before a create_memory");
    const Device::Memory m = d.create_memory(bytes);
    if (m.handle == 0) {
      fail("create_memory.gives", "no memory of " + num(bytes) + " bytes (error " + num(static_cast<std::uintmax_t>(m.error)) + ")");
      break;
    }
    const Device::Headroom after = headroom("after a create_memory");
    if (before.limit != kNone && before.left != kNone && after.left + bytes > before.left)
      fail("headroom.drops", "left " + num(before.left) + " -> " + num(after.left) + " after a memory of " + num(bytes));
    if (at + bytes > base + range_bytes) {  // vm_pages too small for both: release it unmapped
      if (!d.release_memory(m.handle, bytes)) fail("release_memory.true", "release of an unmapped memory returned false");
      break;
    }
    const int err = d.map_memory(reinterpret_cast<void*>(at), m.handle, 0, bytes);
    if (err != 0) {
      fail("map_memory.maps", "mapping " + num(bytes) + " bytes at base + " + num(at - base) + " returned " + num(static_cast<std::uintmax_t>(err)));
      if (!d.release_memory(m.handle, bytes)) fail("release_memory.true", "release of an unmapped memory returned false");
      continue;
    }
    maps.push_back({m.handle, at, bytes});
    at += bytes;
  }
  for (const Mapped& m : maps) {
    if (!d.unmap_memory(reinterpret_cast<void*>(m.at), m.bytes)) {
      fail("unmap_memory.true", "unmapping [base + " + num(m.at - base) + ", +" + num(m.bytes) + ") returned false");
      continue;
    }
    if (!d.release_memory(m.handle, m.bytes)) fail("release_memory.true", "release of memory " + num(m.handle) + " returned false");
  }
  if (!d.release_address(range.base, range_bytes)) fail("release_address.true", "release of the range returned false");

  if (o.too_big != 0) {
    const std::size_t bytes = (o.too_big + page - 1) / page * page;
    const Device::Memory m = d.create_memory(bytes);
    if (m.handle != 0) {
      fail("create_memory.out_of_memory", "a memory of " + num(bytes) + " bytes was made");
      d.release_memory(m.handle, bytes);
    } else if (m.error != 0) {
      fail("create_memory.out_of_memory", "out of memory reported as error " + num(static_cast<std::uintmax_t>(m.error)) + ", not 0");
    }
  }
  return v;
}

}  // namespace luma::core
