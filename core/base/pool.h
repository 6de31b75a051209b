// pool.h - the caching allocator's two pools (PyTorch's small and large): which one a
// request goes to is a size rule (size_rounding.h), and statistics are kept per pool.
#pragma once

#include <cstddef>
#include <cstdint>

namespace luma::core {

enum class Pool : std::uint8_t { small = 0, large = 1 };
inline constexpr std::size_t kPools = 2;

}  // namespace luma::core
