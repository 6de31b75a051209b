// proc_address.h - which driver entry points luma serves, by the name and ABI version a
// caller asks for. The cudaVersion argument of cuGetProcAddress, not the name, says which
// ABI the caller was compiled against (HAMi-core got this wrong on CUDA 12/13): luma
// substitutes its function only when that ABI is the one it implements, and everything
// else - older ABIs, names it does not serve - goes to the real driver untouched.
// Pure: no driver, no globals. The flags argument never changes the answer here: of the
// entry points luma serves only cuMemFreeAsync has a per-thread twin, and which one a
// request gets is decided by the driver's own answer (hooks.cpp, substitute()).
#pragma once

#include <cstdint>
#include <string_view>

#include "driver/entry_points.h"

namespace luma::shim {

// One enumerator per row of LUMA_HOOKS (entry_points.h), in its order.
enum class Hook : std::uint8_t {
  none = 0,
#define LUMA_HOOK_ENUMERATOR(id, ...) id,
  LUMA_HOOKS(LUMA_HOOK_ENUMERATOR)
#undef LUMA_HOOK_ENUMERATOR
  count,
};

// What cuGetProcAddress(name, ..., cuda_version, ...) should hand out instead of the
// driver's function; Hook::none: the driver's answer, untouched.
Hook hook_for_request(std::string_view name, int cuda_version) noexcept;

// What a lookup of an exact exported symbol name (dlsym on libcuda's handle) should give.
Hook hook_for_symbol(std::string_view name) noexcept;

// The exported symbol name of a hook ("cuMemAlloc_v2"); nullptr for none.
const char* hook_symbol(Hook hook) noexcept;

// The other variant of the same driver function (legacy <-> per-thread default stream:
// cuMemFreeAsync and cuMemFreeAsync_ptsz), or Hook::none when it has none.
Hook twin_of(Hook hook) noexcept;

}  // namespace luma::shim
