// plan.h - a plan: one offset per lifetime (same order as the input), and the arena it fills.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/lifetime.h"

namespace luma::core {

struct Plan {
  std::string strategy;                // which strategy produced it
  std::vector<std::uint64_t> offsets;  // offsets[i] belongs to lifetimes[i]
  std::uint64_t arena = 0;             // largest offset + size
};

// The arena a set of offsets needs: the largest offset + size (0 for no buffers).
inline std::uint64_t arena_of(const std::vector<Lifetime>& lifetimes,
                              const std::vector<std::uint64_t>& offsets) noexcept {
  std::uint64_t arena = 0;
  for (std::size_t i = 0; i < lifetimes.size() && i < offsets.size(); ++i)
    arena = std::max(arena, offsets[i] + lifetimes[i].size);
  return arena;
}

}  // namespace luma::core
