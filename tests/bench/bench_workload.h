// bench_workload.h - the allocation pattern every allocator in bench_allocator runs, made
// before timing so the random number generator is never measured: a number of live blocks
// kept constant, each step freeing a random live block and allocating a new one, with a
// realistic size mix (about 70% <= 64 KiB, 27% up to 4 MiB, 3% up to 64 MiB).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace luma::bench {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;

// Steps are replayed in a ring of this many; a power of two so the index is a mask.
inline constexpr std::size_t kSteps = std::size_t{1} << 16;

struct Workload {
  std::vector<std::size_t> initial;   // sizes of the live blocks made before timing
  std::vector<std::uint32_t> victim;  // per step: which live slot is freed ...
  std::vector<std::size_t> size;      // ... and the size allocated in its place
};

inline std::size_t draw_size(std::mt19937_64& rng) {
  const auto pick = rng() % 100;
  if (pick < 70) return 1 + rng() % (64 * KiB);
  if (pick < 97) return 64 * KiB + 1 + rng() % (4 * MiB - 64 * KiB);
  return 4 * MiB + 1 + rng() % (60 * MiB);
}

inline Workload make_workload(std::size_t live, std::uint64_t seed = 42) {
  std::mt19937_64 rng(seed);
  Workload w;
  w.initial.reserve(live);
  for (std::size_t i = 0; i < live; ++i) w.initial.push_back(draw_size(rng));
  w.victim.reserve(kSteps);
  w.size.reserve(kSteps);
  for (std::size_t i = 0; i < kSteps; ++i) {
    w.victim.push_back(static_cast<std::uint32_t>(rng() % live));
    w.size.push_back(draw_size(rng));
  }
  return w;
}

// Hands out address ranges from a bump counter, never touching them: lets 10^6 live
// blocks of up to 64 MiB exist without the RAM. Starts high so it is never 0.
class AddressSpace {
 public:
  void* take(std::size_t bytes) noexcept {
    const std::uintptr_t p = next_;
    next_ += (bytes + kGrain - 1) & ~(kGrain - 1);
    return reinterpret_cast<void*>(p);
  }

 private:
  static constexpr std::uintptr_t kGrain = 2 * MiB;
  std::uintptr_t next_ = std::uintptr_t{1} << 44;
};

}  // namespace luma::bench
