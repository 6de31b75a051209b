// trace_format.cpp - the names of entry points and event kinds, and the header's CRC-32.
#include "trace/trace_format.h"

#include <array>

namespace luma::core::trace {

std::string_view entry_point_name(EntryPoint e) noexcept {
  switch (e) {
    case EntryPoint::unknown: return "unknown";
    case EntryPoint::cudaMalloc: return "cudaMalloc";
    case EntryPoint::cudaFree: return "cudaFree";
    case EntryPoint::cudaMallocAsync: return "cudaMallocAsync";
    case EntryPoint::cudaFreeAsync: return "cudaFreeAsync";
    case EntryPoint::cudaMallocFromPoolAsync: return "cudaMallocFromPoolAsync";
    case EntryPoint::cudaMallocManaged: return "cudaMallocManaged";
    case EntryPoint::cudaMallocPitch: return "cudaMallocPitch";
    case EntryPoint::cuMemAlloc: return "cuMemAlloc";
    case EntryPoint::cuMemFree: return "cuMemFree";
    case EntryPoint::cuMemAllocAsync: return "cuMemAllocAsync";
    case EntryPoint::cuMemFreeAsync: return "cuMemFreeAsync";
    case EntryPoint::cuMemAllocPitch: return "cuMemAllocPitch";
    case EntryPoint::cuMemAllocManaged: return "cuMemAllocManaged";
    case EntryPoint::empty_cache: return "empty_cache";
    case EntryPoint::internal: return "internal";
  }
  return "unknown";
}

std::string_view event_kind_name(EventKind k) noexcept {
  switch (k) {
    case EventKind::alloc: return "alloc";
    case EventKind::free_requested: return "free_requested";
    case EventKind::free_completed: return "free_completed";
    case EventKind::segment_reserve: return "segment_reserve";
    case EventKind::segment_release: return "segment_release";
    case EventKind::oom: return "oom";
    case EventKind::empty_cache: return "empty_cache";
  }
  return "unknown";
}

std::string_view forwarded_entry_name(ForwardedEntry e) noexcept {
  switch (e) {
#define LUMA_X(name, value) \
  case ForwardedEntry::name: return #name;
    LUMA_FORWARDED_ENTRIES(LUMA_X)
#undef LUMA_X
  }
  return "unknown";
}

std::string_view forwarded_op_name(ForwardedOp op) noexcept {
  switch (op) {
    case ForwardedOp::alloc: return "alloc";
    case ForwardedOp::free: return "free";
    case ForwardedOp::map: return "map";
    case ForwardedOp::unmap: return "unmap";
  }
  return "unknown";
}

namespace {
// The IEEE 802.3 polynomial (zlib's crc32), reflected; the table is built at compile time.
constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();
}  // namespace

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < size; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace luma::core::trace
