// proc_address.h - which driver entry points luma serves, by the name and ABI version a
// caller asks for. The cudaVersion argument of cuGetProcAddress, not the name, says which
// ABI the caller was compiled against (HAMi-core got this wrong on CUDA 12/13): luma
// substitutes its function only when that ABI is the one it implements, and everything
// else - older ABIs, names it does not serve - goes to the real driver untouched.
// Pure: no driver, no globals. The flags argument never changes the answer: none of the
// entry points luma serves has a per-thread-default-stream (_ptsz/_ptds) variant.
#pragma once

#include <cstdint>
#include <string_view>

namespace luma::shim {

enum class Hook : std::uint8_t {
  none = 0,
  get_proc_address_v1,  // cuGetProcAddress, the CUDA 11.3 ABI (no symbolStatus)
  get_proc_address_v2,  // cuGetProcAddress_v2, the CUDA 12.0 ABI
  mem_alloc,            // cuMemAlloc_v2
  mem_free,             // cuMemFree_v2
  mem_alloc_pitch,      // cuMemAllocPitch_v2
  mem_get_info,         // cuMemGetInfo_v2
  mem_get_address_range,  // cuMemGetAddressRange_v2
  pointer_get_attribute,  // cuPointerGetAttribute
  stream_create,          // cuStreamCreate
  stream_create_with_priority,  // cuStreamCreateWithPriority
  stream_destroy,               // cuStreamDestroy_v2
  ctx_destroy,                  // cuCtxDestroy_v2
  primary_ctx_release,          // cuDevicePrimaryCtxRelease_v2
  primary_ctx_reset,            // cuDevicePrimaryCtxReset_v2
  mem_free_async,               // cuMemFreeAsync (a luma block is freed into the cache)
  mem_free_async_ptsz,          // cuMemFreeAsync_ptsz (its per-thread-default-stream twin)
  count,
};

// What cuGetProcAddress(name, ..., cuda_version, ...) should hand out instead of the
// driver's function; Hook::none: the driver's answer, untouched.
Hook hook_for_request(std::string_view name, int cuda_version) noexcept;

// What a lookup of an exact exported symbol name (dlsym on libcuda's handle) should give.
Hook hook_for_symbol(std::string_view name) noexcept;

// The exported symbol name of a hook ("cuMemAlloc_v2"); nullptr for none.
const char* hook_symbol(Hook hook) noexcept;

}  // namespace luma::shim
