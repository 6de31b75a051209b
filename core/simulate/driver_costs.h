// driver_costs.h - what each driver call that changes the device's memory costs the
// program, by call and size: the one table `luma simulate` estimates driver time with
// (SimResult::driver_ns, per copy with --repeat). Each row says where its figure comes
// from: measured on a GPU (docs/gpu-results.md) or estimated, and then from what.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace luma::core {

// The driver calls a caching allocator's memory makes (core::Device's memory half).
enum class DriverCall : std::uint8_t {
  mem_alloc,        // cuMemAlloc: an ordinary segment
  mem_free,         // cuMemFree (synchronizes the device)
  mem_create,       // cuMemCreate: an expandable segment's physical memory
  mem_release,      // cuMemRelease
  mem_map,          // cuMemMap + cuMemSetAccess of one memory
  mem_unmap,        // cuMemUnmap (synchronizes with work using the range)
  address_reserve,  // cuMemAddressReserve
  address_free,     // cuMemAddressFree
};
inline constexpr std::size_t kDriverCalls = 8;

std::string_view driver_call_name(DriverCall c) noexcept;

// One row: the call's cost in ns at `bytes` (costs between two rows of the same call are
// interpolated linearly in the size; below the first and above the last, that row's).
struct DriverCost {
  DriverCall call;
  std::uint64_t bytes;
  std::uint64_t ns;
  bool measured;           // false: an estimate (source says from what)
  std::string_view source;
};

// The whole table, by call, each call's rows by size.
std::span<const DriverCost> driver_costs() noexcept;
// The estimated cost of one call of `bytes`.
std::uint64_t driver_call_ns(DriverCall c, std::uint64_t bytes) noexcept;
// Whether every row of the call is measured.
bool driver_cost_measured(DriverCall c) noexcept;

}  // namespace luma::core
