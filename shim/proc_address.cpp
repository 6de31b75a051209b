// proc_address.cpp - the table behind proc_address.h. Versions are those at which cuda.h
// introduced each ABI: the 64-bit _v2 memory calls in CUDA 3.2 (3020), cuStreamDestroy_v2
// and cuPointerGetAttribute in 4.0, cuStreamCreateWithPriority in 5.5, cuGetProcAddress in
// 11.3 and its _v2 ABI (with symbolStatus) in 12.0, cuCtxDestroy_v2 in 4.0, the _v2 ABI of
// cuDevicePrimaryCtxRelease / Reset in 11.0 (the 7.0 ABI is forwarded untouched),
// cuMemFreeAsync in 11.2.
#include "proc_address.h"

#include <array>

namespace luma::shim {
namespace {

struct Entry {
  std::string_view base_name;  // what callers pass to cuGetProcAddress
  int min_version;             // the first cudaVersion that means luma's ABI
  int max_version;             // the last one (exclusive upper end: 0 = none)
  Hook hook;
  const char* symbol;          // the exported name of that ABI
};

constexpr std::array<Entry, 17> kTable{{
    {"cuGetProcAddress", 12000, 0, Hook::get_proc_address_v2, "cuGetProcAddress_v2"},
    {"cuGetProcAddress", 11030, 12000, Hook::get_proc_address_v1, "cuGetProcAddress"},
    {"cuMemAlloc", 3020, 0, Hook::mem_alloc, "cuMemAlloc_v2"},
    {"cuMemFree", 3020, 0, Hook::mem_free, "cuMemFree_v2"},
    {"cuMemAllocPitch", 3020, 0, Hook::mem_alloc_pitch, "cuMemAllocPitch_v2"},
    {"cuMemGetInfo", 3020, 0, Hook::mem_get_info, "cuMemGetInfo_v2"},
    {"cuMemGetAddressRange", 3020, 0, Hook::mem_get_address_range, "cuMemGetAddressRange_v2"},
    {"cuPointerGetAttribute", 4000, 0, Hook::pointer_get_attribute, "cuPointerGetAttribute"},
    {"cuStreamCreate", 2000, 0, Hook::stream_create, "cuStreamCreate"},
    {"cuStreamCreateWithPriority", 5050, 0, Hook::stream_create_with_priority,
     "cuStreamCreateWithPriority"},
    {"cuStreamDestroy", 4000, 0, Hook::stream_destroy, "cuStreamDestroy_v2"},
    {"cuCtxDestroy", 4000, 0, Hook::ctx_destroy, "cuCtxDestroy_v2"},
    {"cuDevicePrimaryCtxRelease", 11000, 0, Hook::primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxReset", 11000, 0, Hook::primary_ctx_reset, "cuDevicePrimaryCtxReset_v2"},
    // cuMemFreeAsync (CUDA 11.2): a request with the per-thread flag gets the _ptsz hook
    // instead (hooks.cpp, substitute(): decided by which real function the driver gave).
    {"cuMemFreeAsync", 11020, 0, Hook::mem_free_async, "cuMemFreeAsync"},
    {"cuMemFreeAsync_ptsz", 11020, 0, Hook::mem_free_async_ptsz, "cuMemFreeAsync_ptsz"},
    {"", 0, 0, Hook::none, nullptr},
}};

}  // namespace

Hook hook_for_request(std::string_view name, int cuda_version) noexcept {
  for (const Entry& e : kTable) {
    if (e.hook == Hook::none || e.base_name != name) continue;
    if (cuda_version >= e.min_version && (e.max_version == 0 || cuda_version < e.max_version))
      return e.hook;
  }
  return Hook::none;
}

Hook hook_for_symbol(std::string_view name) noexcept {
  if (name.size() < 3 || name[0] != 'c' || name[1] != 'u') return Hook::none;
  for (const Entry& e : kTable)
    if (e.symbol != nullptr && name == e.symbol) return e.hook;
  return Hook::none;
}

const char* hook_symbol(Hook hook) noexcept {
  for (const Entry& e : kTable)
    if (e.hook == hook) return e.symbol;
  return nullptr;
}

}  // namespace luma::shim
