// dlsym_hook.cpp - the dlsym libluma.so exports (it overrides the program's dlsym@GLIBC_2.34
// / @GLIBC_2.2.5), and glibc's own, found with dlvsym(RTLD_NEXT).
//
// Alone in its file on purpose: a sanitizer runtime preloaded before libluma.so calls
// dlsym(RTLD_NEXT, ...) while it initialises itself, before instrumented code may run, so
// sanitizer builds compile this file - and only this file - without instrumentation
// (shim/meson.build). Everything it runs before the "cu" test is plain code; the driver
// names go on to hooks.cpp, which is instrumented like the rest.
#include <dlfcn.h>

#include <atomic>

#include "driver/dlsym_hook.h"
#include "driver/real_driver.h"
#include "threads/recursion_guard.h"

namespace luma::shim {
namespace {

// A program bound dlsym at GLIBC_2.34 (glibc >= 2.34) or GLIBC_2.2.5 (older x86-64 builds);
// both name the same function in the glibc that is running.
constexpr const char* kDlsymVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};

}  // namespace

DlsymFn real_dlsym() noexcept {
  static std::atomic<DlsymFn> cached{nullptr};
  DlsymFn fn = cached.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  for (const char* version : kDlsymVersions) {
    fn = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", version));
    if (fn != nullptr) break;
  }
  cached.store(fn, std::memory_order_release);
  return fn;
}

}  // namespace luma::shim

// Fast for every name luma does not serve: one character test, then glibc's dlsym as a tail
// call, so glibc still sees the program's return address (RTLD_NEXT is resolved relative to
// the caller).
//
// RTLD_NEXT lookups always go straight to glibc, as a tail call, even for driver names: a
// library that wraps a driver function (defines cuMemAlloc_v2, forwards with
// dlsym(RTLD_NEXT, ...), as profilers and GPU-sharing layers do) must get the next
// definition after itself. Answered from inside luma, "next" would mean next after
// libluma.so, which is the wrapper itself again: endless recursion. The CUDA runtimes
// never use RTLD_NEXT (they dlopen the driver and ask it through cuGetProcAddress), so
// nothing luma serves is lost.
extern "C" [[gnu::visibility("default")]] void* dlsym(void* handle, const char* name) {
  using namespace luma::shim;
  DlsymFn real = real_dlsym();
  if (handle == RTLD_NEXT) return real(handle, name);
  if (name[0] == 'c' && name[1] == 'u' && !RecursionGuard::active())
    return dlsym_for_driver(handle, name, real);
  return real(handle, name);
}
