// driver_costs.cpp - the table of driver_costs.h. The measured pair is one
// cudaMalloc+cudaFree on an H200 (docs/gpu-results.md, "2. Speed": gpu_latency, median
// after warm-up); how it splits between the two calls was not measured, so each call gets
// half. The virtual-memory calls have not been timed on a GPU yet: their rows are
// estimates of the same order as the pair's, and scripts/gpu-check's costs stage
// measures them.
#include "simulate/driver_costs.h"

#include <array>

namespace luma::core {
namespace {

constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;
constexpr std::string_view kPairHalf =
    "half of a cudaMalloc+cudaFree pair measured on an H200 (docs/gpu-results.md); the split is assumed";
constexpr std::string_view kPairExtrapolated =
    "the H200 pair's slope from 64 to 256 MiB carried on to 1 GiB, halved: estimated";
constexpr std::string_view kVmmEstimate = "not measured: an estimate (scripts/gpu-check's costs stage times it)";

using C = DriverCall;
// The pair's medians (ns): 1 KiB 89,124; 1 MiB 93,502; 4 MiB 94,971; 16 MiB 106,462;
// 64 MiB 160,892; 256 MiB 278,124; 1 GiB extrapolated 746,604.
constexpr std::array kTable{
    DriverCost{C::mem_alloc, 1 * KiB, 44'562, false, kPairHalf},
    DriverCost{C::mem_alloc, 1 * MiB, 46'751, false, kPairHalf},
    DriverCost{C::mem_alloc, 4 * MiB, 47'486, false, kPairHalf},
    DriverCost{C::mem_alloc, 16 * MiB, 53'231, false, kPairHalf},
    DriverCost{C::mem_alloc, 64 * MiB, 80'446, false, kPairHalf},
    DriverCost{C::mem_alloc, 256 * MiB, 139'062, false, kPairHalf},
    DriverCost{C::mem_alloc, 1 * GiB, 373'302, false, kPairExtrapolated},
    DriverCost{C::mem_free, 1 * KiB, 44'562, false, kPairHalf},
    DriverCost{C::mem_free, 1 * MiB, 46'751, false, kPairHalf},
    DriverCost{C::mem_free, 4 * MiB, 47'486, false, kPairHalf},
    DriverCost{C::mem_free, 16 * MiB, 53'231, false, kPairHalf},
    DriverCost{C::mem_free, 64 * MiB, 80'446, false, kPairHalf},
    DriverCost{C::mem_free, 256 * MiB, 139'062, false, kPairHalf},
    DriverCost{C::mem_free, 1 * GiB, 373'302, false, kPairExtrapolated},
    // Physical memory is what cuMemAlloc makes too: assumed to cost as much.
    DriverCost{C::mem_create, 2 * MiB, 46'751, false, kVmmEstimate},
    DriverCost{C::mem_create, 1 * GiB, 373'302, false, kVmmEstimate},
    DriverCost{C::mem_release, 2 * MiB, 46'751, false, kVmmEstimate},
    DriverCost{C::mem_release, 1 * GiB, 373'302, false, kVmmEstimate},
    // Page-table work: assumed to grow with the pages mapped.
    DriverCost{C::mem_map, 2 * MiB, 10'000, false, kVmmEstimate},
    DriverCost{C::mem_map, 1 * GiB, 100'000, false, kVmmEstimate},
    DriverCost{C::mem_unmap, 2 * MiB, 10'000, false, kVmmEstimate},
    DriverCost{C::mem_unmap, 1 * GiB, 100'000, false, kVmmEstimate},
    DriverCost{C::address_reserve, 2 * MiB, 5'000, false, kVmmEstimate},
    DriverCost{C::address_free, 2 * MiB, 5'000, false, kVmmEstimate},
};

}  // namespace

std::string_view driver_call_name(DriverCall c) noexcept {
  switch (c) {
    case C::mem_alloc: return "cuMemAlloc";
    case C::mem_free: return "cuMemFree";
    case C::mem_create: return "cuMemCreate";
    case C::mem_release: return "cuMemRelease";
    case C::mem_map: return "cuMemMap+cuMemSetAccess";
    case C::mem_unmap: return "cuMemUnmap";
    case C::address_reserve: return "cuMemAddressReserve";
    case C::address_free: return "cuMemAddressFree";
  }
  return "?";
}

std::span<const DriverCost> driver_costs() noexcept { return kTable; }

std::uint64_t driver_call_ns(DriverCall c, std::uint64_t bytes) noexcept {
  const DriverCost* below = nullptr;
  for (const DriverCost& r : kTable) {
    if (r.call != c) continue;
    if (r.bytes >= bytes) {
      if (below == nullptr || r.bytes == bytes) return r.ns;
      const double f = double(bytes - below->bytes) / double(r.bytes - below->bytes);
      return static_cast<std::uint64_t>(double(below->ns) + f * (double(r.ns) - double(below->ns)));
    }
    below = &r;
  }
  return below != nullptr ? below->ns : 0;
}

bool driver_cost_measured(DriverCall c) noexcept {
  for (const DriverCost& r : kTable)
    if (r.call == c && !r.measured) return false;
  return true;
}

}  // namespace luma::core
