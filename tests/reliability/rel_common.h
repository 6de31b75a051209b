// rel_common.h - what the reliability programs share: the stand-in device brought up
// through the driver API (cuInit, one primary context per device, made current per
// thread), block tags that expose any overlap, and one way to fail loudly.
// These programs call the driver by its exported names (-lcuda), so under
// LD_PRELOAD=libluma.so every allocation is luma's. Test code only: never shipped.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_control.h"
#include "fake_driver_api.h"

namespace luma::reliability {

// Exit codes the harness (reliability.py) understands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitWrong = 1;
inline constexpr int kExitUsage = 2;

// cudaMalloc's promise and luma's alignment: every block starts on this grid, so two
// overlapping blocks always share the first word of some granule.
inline constexpr std::size_t kGranule = 256;
inline constexpr int kMaxDevices = 8;

[[noreturn]] inline void die(const char* prog, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", prog, what.c_str());
  std::fflush(nullptr);
  std::_Exit(kExitWrong);
}

inline std::uint64_t parse_u64(const char* prog, const char* s, const char* what) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0') {
    std::fprintf(stderr, "%s: %s must be a number, got '%s'\n", prog, what, s);
    std::exit(kExitUsage);
  }
  return v;
}

// cuInit and the primary contexts; returns the device count (dies on error).
inline int bring_up(const char* prog, CUcontext* contexts) {
  if (CUresult r = cuInit(0)) die(prog, "cuInit returned " + std::to_string(r));
  int n = 0;
  if (CUresult r = cuDeviceGetCount(&n)) die(prog, "cuDeviceGetCount returned " + std::to_string(r));
  if (n > kMaxDevices) n = kMaxDevices;
  for (int d = 0; d < n; ++d) {
    CUdevice dev = 0;
    if (cuDeviceGet(&dev, d) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&contexts[d], dev) != 0)
      die(prog, "no primary context for device " + std::to_string(d));
  }
  if (cuCtxSetCurrent(contexts[0]) != CUDA_SUCCESS) die(prog, "cuCtxSetCurrent failed");
  return n;
}

inline std::uint64_t tag_word(std::uint64_t id, std::size_t granule) {
  return (id * 0x9E3779B97F4A7C15ull) ^ (granule + 1);
}

// Whether the last byte of an n-byte block lies outside every granule's tag word (when it
// does not, the word already covers it).
inline bool last_byte_free(std::size_t n) { return (n - 1) % kGranule >= sizeof(std::uint64_t); }

// Tags [p, p + n): the first word of every granule and the last byte. The stand-in's
// device pointers are host addresses, so the program writes them directly (a copy through
// the driver per granule would make 10^6 operations per thread take hours).
inline void write_tag(void* p, std::size_t n, std::uint64_t id) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t off = 0, g = 0; off + sizeof(std::uint64_t) <= n; off += kGranule, ++g) {
    std::uint64_t w = tag_word(id, g);
    std::memcpy(b + off, &w, sizeof w);
  }
  if (last_byte_free(n)) b[n - 1] = static_cast<unsigned char>(id | 1);
}

// "" when the tag of write_tag(p, n, id) is intact, else what was wrong.
inline std::string check_tag(const void* p, std::size_t n, std::uint64_t id) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t off = 0, g = 0; off + sizeof(std::uint64_t) <= n; off += kGranule, ++g) {
    std::uint64_t w = 0;
    std::memcpy(&w, b + off, sizeof w);
    if (w != tag_word(id, g)) return "granule at byte " + std::to_string(off) + " overwritten";
  }
  if (last_byte_free(n) && b[n - 1] != static_cast<unsigned char>(id | 1))
    return "last byte overwritten";
  return {};
}

inline void* as_ptr(CUdeviceptr p) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

}  // namespace luma::reliability
