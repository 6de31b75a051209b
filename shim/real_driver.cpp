// real_driver.cpp - finds glibc's dlsym and the real driver's entry points.
// Entry points are asked from the driver's own cuGetProcAddress_v2 with the ABI version
// luma was written against, exactly as the CUDA runtime does (cuda-interposition.md), so
// that a name whose signature changed (cuCtxSynchronize in CUDA 13) still gives the ABI
// declared in cuda_abi.h. Must never call luma's own hooks nor log (the logger may not
// exist yet when this runs).
#include "real_driver.h"

#include <dlfcn.h>

#include <atomic>

namespace luma::shim {
namespace {

template <typename Fn>
void resolve_per_thread(const RealDriver& d, const char* name, int version, Fn& out) noexcept {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (d.get_proc_address_v2(name, &fn, version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                            &status) != CUDA_SUCCESS)
    fn = nullptr;
  out = reinterpret_cast<Fn>(fn);
}

template <typename Fn>
void resolve(const RealDriver& d, const char* name, int version, Fn& out) noexcept {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  // LEGACY_STREAM: luma records its fences on the legacy default stream (handle 0), which
  // is what the non-_ptsz entry points mean by it.
  if (d.get_proc_address_v2(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status) !=
          CUDA_SUCCESS ||
      fn == nullptr) {
    fn = nullptr;
    if (d.get_proc_address_v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
        CUDA_SUCCESS)
      fn = nullptr;
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
  d.get_proc_address_v2 =
      reinterpret_cast<PFN_cuGetProcAddress_v2>(sym(d.handle, "cuGetProcAddress_v2"));
  d.get_proc_address_v1 =
      reinterpret_cast<PFN_cuGetProcAddress_v1>(sym(d.handle, "cuGetProcAddress"));
  if (d.get_proc_address_v2 == nullptr) return false;

  resolve(d, "cuMemAlloc", kCudaVersionV2Memory, d.mem_alloc);
  resolve(d, "cuMemFree", kCudaVersionV2Memory, d.mem_free);
  resolve(d, "cuMemAllocPitch", kCudaVersionV2Memory, d.mem_alloc_pitch);
  resolve(d, "cuMemGetInfo", kCudaVersionV2Memory, d.mem_get_info);
  resolve(d, "cuMemGetAddressRange", kCudaVersionV2Memory, d.mem_get_address_range);
  resolve(d, "cuPointerGetAttribute", 4000, d.pointer_get_attribute);
  resolve(d, "cuMemFreeAsync", 11020, d.mem_free_async);
  resolve_per_thread(d, "cuMemFreeAsync", 11020, d.mem_free_async_ptsz);
  resolve(d, "cuStreamCreate", 2000, d.stream_create);
  resolve(d, "cuStreamCreateWithPriority", 5050, d.stream_create_with_priority);
  resolve(d, "cuStreamDestroy", 4000, d.stream_destroy);
  resolve(d, "cuCtxGetCurrent", 4000, d.ctx_get_current);
  resolve(d, "cuCtxPushCurrent", 4000, d.ctx_push_current);
  resolve(d, "cuCtxPopCurrent", 4000, d.ctx_pop_current);
  resolve(d, "cuCtxGetDevice", 2000, d.ctx_get_device);
  resolve(d, "cuCtxSynchronize", 2000, d.ctx_synchronize);
  resolve(d, "cuEventCreate", 2000, d.event_create);
  resolve(d, "cuEventRecord", 2000, d.event_record);
  resolve(d, "cuEventQuery", 2000, d.event_query);
  resolve(d, "cuEventSynchronize", 2000, d.event_synchronize);
  resolve(d, "cuEventDestroy", 4000, d.event_destroy);
  resolve(d, "cuCtxDestroy", 4000, d.ctx_destroy);
  resolve(d, "cuDevicePrimaryCtxRetain", 7000, d.primary_ctx_retain);
  resolve(d, "cuDevicePrimaryCtxRelease", 11000, d.primary_ctx_release);
  resolve(d, "cuDevicePrimaryCtxReset", 11000, d.primary_ctx_reset);
  resolve(d, "cuDevicePrimaryCtxGetState", 7000, d.primary_ctx_get_state);
  resolve(d, "cuDeviceGetCount", 2000, d.device_get_count);
  resolve(d, "cuDeviceGet", 2000, d.device_get);
  resolve(d, "cuDeviceGetName", 2000, d.device_get_name);
  resolve(d, "cuDeviceTotalMem", 3020, d.device_total_mem);
  return true;
}

}  // namespace luma::shim
