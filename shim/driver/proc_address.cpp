// proc_address.cpp - the lookups behind proc_address.h, over the rows of LUMA_HOOKS
// (entry_points.h, which also says where each version comes from).
#include "driver/proc_address.h"

#include <array>

namespace luma::shim {
namespace {

struct Entry {
  std::string_view request;  // what callers pass to cuGetProcAddress
  int min_version;           // the first cudaVersion that means luma's ABI
  int max_version;           // the first one that no longer does (0 = none)
  Hook hook;
  const char* symbol;        // the exported name of that ABI
  std::string_view driver_name;  // the function in the driver (twins share it)
  bool per_thread;               // the per-thread-default-stream variant
};

constexpr bool kPerThread_by_dlsym = false, kPerThread_legacy = false, kPerThread_per_thread = true;

constexpr std::array kTable{
#define LUMA_HOOK_ENTRY(id, symbol, request, min_version, max_version, pfn, how, driver_name) \
  Entry{request, min_version, max_version, Hook::id, #symbol, driver_name, kPerThread_##how},
    LUMA_HOOKS(LUMA_HOOK_ENTRY)
#undef LUMA_HOOK_ENTRY
};
static_assert(kTable.size() + 1 == static_cast<std::size_t>(Hook::count));

}  // namespace

Hook hook_for_request(std::string_view name, int cuda_version) noexcept {
  for (const Entry& e : kTable) {
    if (e.request != name) continue;
    if (cuda_version >= e.min_version && (e.max_version == 0 || cuda_version < e.max_version))
      return e.hook;
  }
  return Hook::none;
}

Hook hook_for_symbol(std::string_view name) noexcept {
  if (name.size() < 3 || name[0] != 'c' || name[1] != 'u') return Hook::none;
  for (const Entry& e : kTable)
    if (name == e.symbol) return e.hook;
  return Hook::none;
}

Hook twin_of(Hook hook) noexcept {
  for (const Entry& e : kTable) {
    if (e.hook != hook) continue;
    for (const Entry& t : kTable)
      if (t.hook != hook && t.driver_name == e.driver_name && t.min_version == e.min_version &&
          t.per_thread != e.per_thread)
        return t.hook;
  }
  return Hook::none;
}

const char* hook_symbol(Hook hook) noexcept {
  for (const Entry& e : kTable)
    if (e.hook == hook) return e.symbol;
  return nullptr;
}

}  // namespace luma::shim
