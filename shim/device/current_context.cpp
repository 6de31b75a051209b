// current_context.cpp - see current_context.h.
#include "device/current_context.h"

#include <cstring>

namespace luma::shim {

std::atomic<std::uint64_t> CurrentContext::generation_{1};
std::atomic<bool> CurrentContext::tracking_{true};

CurrentContext::Entry& CurrentContext::entry() noexcept {
  // initial-exec: no allocation and no lock on first use (the hooks run in any thread,
  // inside the driver's callers' locks).
  static thread_local Entry e [[gnu::tls_model("initial-exec")]];
  return e;
}

bool changes_current_context(const char* name) noexcept {
  static constexpr const char* kNames[] = {
      "cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxCreate", "cuCtxDestroy",
      "cuCtxAttach",     "cuCtxDetach",      "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxRelease",
  };
  if (name == nullptr) return false;
  for (const char* n : kNames)
    if (std::strcmp(name, n) == 0) return true;
  return false;
}

}  // namespace luma::shim
