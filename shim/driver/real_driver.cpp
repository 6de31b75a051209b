// real_driver.cpp - finds glibc's dlsym and the real driver's entry points.
// Entry points are asked from the driver's own cuGetProcAddress_v2 with the ABI version
// luma was written against, exactly as the CUDA runtime does (docs/cuda-facts.md), so
// that a name whose signature changed (cuCtxSynchronize in CUDA 13) still gives the ABI
// declared in cuda_abi.h. Must never call luma's own hooks nor log (the logger may not
// exist yet when this runs).
#include "driver/real_driver.h"

#include <dlfcn.h>

#include <atomic>

namespace luma::shim {
namespace {

enum class How { by_dlsym, legacy, per_thread };

template <typename Fn>
void resolve(const RealDriver& d, DlsymFn sym, How how, const char* name, int version,
             Fn& out) noexcept {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  switch (how) {
    case How::by_dlsym:
      fn = sym(d.handle, name);
      break;
    case How::per_thread:
      if (d.get_proc_address_v2(name, &fn, version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                &status) != CUDA_SUCCESS)
        fn = nullptr;
      break;
    case How::legacy:
      // LEGACY_STREAM: luma records its fences on the legacy default stream (handle 0),
      // which is what the non-_ptsz entry points mean by it.
      if (d.get_proc_address_v2(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status) !=
              CUDA_SUCCESS ||
          fn == nullptr) {
        fn = nullptr;
        if (d.get_proc_address_v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
            CUDA_SUCCESS)
          fn = nullptr;
      }
      break;
  }
  out = reinterpret_cast<Fn>(fn);
}

}  // namespace

bool RealDriver::can_serve() const noexcept {
  return mem_alloc && mem_free && ctx_get_current && ctx_push_current && ctx_pop_current &&
         ctx_get_device && ctx_synchronize && event_create && event_record && event_query &&
         event_synchronize && event_destroy;
}

bool load_real_driver(RealDriver& d) noexcept {
  d = RealDriver{};
  DlsymFn sym = real_dlsym();
  if (sym == nullptr) return false;
  d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (d.handle == nullptr) return false;
  // cuGetProcAddress itself comes from dlsym; everything else through it.
  resolve(d, sym, How::by_dlsym, "cuGetProcAddress_v2", 0, d.get_proc_address_v2);
  if (d.get_proc_address_v2 == nullptr) return false;
#define LUMA_RESOLVE_HOOK(id, symbol, request, min_version, max_version, pfn, how, driver_name) \
  resolve(d, sym, How::how, driver_name, min_version, d.id);
#define LUMA_RESOLVE_CALL(id, driver_name, version, pfn) \
  resolve(d, sym, How::legacy, driver_name, version, d.id);
  LUMA_HOOKS(LUMA_RESOLVE_HOOK)
  LUMA_DRIVER_CALLS(LUMA_RESOLVE_CALL)
#undef LUMA_RESOLVE_HOOK
#undef LUMA_RESOLVE_CALL
  return true;
}

}  // namespace luma::shim
