// random_lifetimes.h - reproducible random inputs for the property tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/lifetime.h"

namespace luma::core::testing {

// n buffers over [0, horizon) with lifetimes up to max_len and sizes 1..max_size; a few get
// an alignment above 1 when aligned is set.
inline std::vector<Lifetime> random_lifetimes(std::size_t n, std::uint64_t seed,
                                              std::uint64_t horizon = 1000,
                                              std::uint64_t max_len = 100,
                                              std::uint64_t max_size = 4096,
                                              bool aligned = false) {
  std::vector<Lifetime> out;
  out.reserve(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (std::size_t i = 0; i < n; ++i) {
    Lifetime lt;
    lt.id = std::to_string(i);
    lt.lower = next() % horizon;
    lt.upper = lt.lower + 1 + next() % max_len;
    lt.size = 1 + next() % max_size;
    if (aligned && next() % 4 == 0) lt.alignment = std::uint64_t{1} << (next() % 9);
    out.push_back(lt);
  }
  return out;
}

}  // namespace luma::core::testing
