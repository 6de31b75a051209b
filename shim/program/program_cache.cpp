// program_cache.cpp - see program_cache.h.
#include "program/program_cache.h"

#include <link.h>

#include <cstdlib>
#include <cstring>

#include "config/log.h"

namespace luma::shim {
namespace {

struct ProgramCache {
  const char* name;     // for the log line
  const char* library;  // the start of the loaded object's file name
  const char* off_env;  // set (to anything): the program's cache is off
};

// PyTorch's CUDA caching allocator lives in libc10_cuda.so and is on unless
// PYTORCH_NO_CUDA_MEMORY_CACHING is set (c10/cuda/CUDACachingAllocator.cpp,
// forceUncachedAllocator: getenv(...) != nullptr). Its other backend, cudaMallocAsync,
// allocates through cuMemAllocAsync, which luma forwards anyway.
constexpr ProgramCache kProgramCaches[] = {
    {"PyTorch's CUDA caching allocator", "libc10_cuda.so", "PYTORCH_NO_CUDA_MEMORY_CACHING"},
};

struct Scan {
  unsigned long long adds = 0;
  bool first = true;
  bool only_count = false;
  const ProgramCache* found = nullptr;
};

const char* base_name(const char* path) noexcept {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

int visit(dl_phdr_info* info, std::size_t, void* data) noexcept {
  auto* scan = static_cast<Scan*>(data);
  if (scan->first) {
    scan->first = false;
    scan->adds = info->dlpi_adds;
    if (scan->only_count) return 1;
  }
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  const char* name = base_name(info->dlpi_name);
  for (const ProgramCache& c : kProgramCaches) {
    if (std::strncmp(name, c.library, std::strlen(c.library)) != 0) continue;
    if (std::getenv(c.off_env) != nullptr) continue;
    scan->found = &c;
    return 1;
  }
  return 0;
}

}  // namespace

void ProgramCacheWatch::check(bool enabled) noexcept {
  if (!enabled || active()) return;
  // The loader's count of objects added so far: nothing new, nothing to look at.
  Scan count;
  count.only_count = true;
  dl_iterate_phdr(visit, &count);
  if (count.adds == seen_adds_.load(std::memory_order_relaxed)) return;
  Scan scan;
  dl_iterate_phdr(visit, &scan);
  seen_adds_.store(scan.adds, std::memory_order_relaxed);
  if (scan.found == nullptr || active_.exchange(true)) return;
  log_noexcept(LogLevel::info,
               "{} is active in this process: its allocations get driver allocations of their "
               "own (counted and limited by luma, not cached again; LUMA_CONF=program_cache:0 "
               "caches them)",
               scan.found->name);
}

}  // namespace luma::shim
