// real_driver.h - the real CUDA driver as luma reaches it: glibc's own dlsym, and the
// driver entry points luma forwards to or calls itself, resolved once at run time from
// dlopen("libcuda.so.1") (no link-time dependency on libcuda).
//
// Every pointer is the real driver's and never one of luma's hooks, so calling through
// this table can never come back into the cache. Must never be used before load()
// succeeded; a missing entry point is nullptr and its users fall back or report an error.
#pragma once

#include "driver/cuda_abi.h"
#include "driver/entry_points.h"

namespace luma::shim {

struct RealDriver {
  void* handle = nullptr;  // of libcuda.so.1
  // One pointer per row of entry_points.h: the real function behind each hook (a
  // stream-ordered free may name a luma block, so cuMemFreeAsync has both twins), then
  // what luma calls itself (contexts, synchronization, events for fences, device queries
  // for a trace's header). A missing entry point stays nullptr.
#define LUMA_REAL_HOOK_FIELD(id, symbol, request, min_version, max_version, pfn, ...) pfn id = nullptr;
#define LUMA_REAL_CALL_FIELD(id, driver_name, version, pfn) pfn id = nullptr;
  LUMA_HOOKS(LUMA_REAL_HOOK_FIELD)
  LUMA_DRIVER_CALLS(LUMA_REAL_CALL_FIELD)
#undef LUMA_REAL_HOOK_FIELD
#undef LUMA_REAL_CALL_FIELD

  // True when everything luma needs to serve allocations was found.
  bool can_serve() const noexcept;
};

// glibc's dlsym (the one luma's exported dlsym overrides). Never nullptr after the first
// call on a glibc system; resolved without calling dlsym itself.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym() noexcept;

// Loads libcuda.so.1 and resolves the table; false (and a table of nullptrs) when the
// driver is absent. Not thread-safe: called once, from the shim's one-time initialisation.
bool load_real_driver(RealDriver& out) noexcept;

}  // namespace luma::shim
