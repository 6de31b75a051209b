// resolution.cpp - which function a program gets for a driver symbol: luma's hook for the
// ABIs luma serves, through cuGetProcAddress (substitute) or dlsym on the real driver
// (dlsym_for_driver); the driver's own for everything else.
#include <dlfcn.h>

#include <cstring>

#include "config/log.h"
#include "device/current_context.h"
#include "driver/dlsym_hook.h"
#include "serve.h"

namespace luma::shim {

void substitute(const char* symbol, void** pfn, int version) noexcept {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr) return;
  State* s = state_if_ready();
  if (s != nullptr && s->settings.disable) return;
  Hook h = hook_for_request(symbol, version);
  if (h == Hook::none) {
    // A context call at an ABI luma does not hook: it could change a current context
    // unseen, so every allocation asks the driver from now on (current_context.h).
    if (changes_current_context(symbol) && CurrentContext::tracking()) {
      CurrentContext::stop_tracking();
      log_noexcept(LogLevel::info, "{} requested at ABI {}: luma asks the driver for the current "
                                        "context at every allocation from now on", symbol, version);
    }
    return;
  }
  if (const Hook twin = twin_of(h); twin != Hook::none) {
    // Which twin the driver handed out (the request's flags and the program's default
    // stream decided): luma's hook must forward to that same one.
    if (s == nullptr) return;
    if (*pfn == real_function(s->driver, twin)) h = twin;
    else if (*pfn != real_function(s->driver, h)) return;  // a variant luma does not know
  }
  *pfn = hook_function(h);
}

bool in_libcuda(void* fn) noexcept {
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* base = std::strrchr(info.dli_fname, '/');
  base = base != nullptr ? base + 1 : info.dli_fname;
  return std::strncmp(base, "libcuda.so", 10) == 0;
}

// dlsym_hook.cpp's dlsym, for a name that starts with "cu" looked up outside luma: a driver
// entry point luma serves, found in the real driver, is answered with luma's hook.
void* dlsym_for_driver(void* handle, const char* name, DlsymFn real) noexcept {
  Hook h = hook_for_symbol(name);
  if (h == Hook::none) return real(handle, name);
  void* fn = real(handle, name);
  // Only lookups into the real driver are redirected; a name found elsewhere (luma's own
  // export through RTLD_DEFAULT, another library's) is answered as glibc would.
  if (fn != nullptr && in_libcuda(fn)) return hook_function(h);
  return fn;
}

}  // namespace luma::shim
