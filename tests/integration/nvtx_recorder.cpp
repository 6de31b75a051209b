// nvtx_recorder.cpp - an NVTX injection library for tests (NVTX_INJECTION64_PATH=this
// library): it takes the NVTX memory extension's calls and keeps the heaps and regions
// registered now, as a tool like compute-sanitizer would. A program under test asks it
// what is registered (nvtx_recorder_* below, found with dlopen(RTLD_NOLOAD) + dlsym) and
// compares that with the blocks it holds. Calls that break the API's rules (a region
// outside every heap, an unknown region or heap unregistered) are counted as errors.
#define NVTX_NO_IMPL  // the types and ids only: the calls come from the program's NVTX
#include <nvtx3/nvToolsExtMem.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace {

std::mutex g_mutex;
std::map<std::uintptr_t, std::size_t> g_heaps;    // base -> size
std::map<std::uintptr_t, std::size_t> g_regions;  // start -> size
std::size_t g_errors = 0;

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

bool inside_a_heap(std::uintptr_t p, std::size_t n) {
  auto it = g_heaps.upper_bound(p);
  if (it == g_heaps.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

nvtxMemHeapHandle_t NVTX_API heap_register(nvtxDomainHandle_t, nvtxMemHeapDesc_t const* desc) {
  std::lock_guard lock(g_mutex);
  if (desc == nullptr || desc->type != NVTX_MEM_TYPE_VIRTUAL_ADDRESS ||
      desc->usage != NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR || desc->typeSpecificDesc == nullptr) {
    ++g_errors;
    return nullptr;
  }
  const auto* range = static_cast<const nvtxMemVirtualRangeDesc_t*>(desc->typeSpecificDesc);
  if (!g_heaps.emplace(addr(range->ptr), range->size).second) ++g_errors;
  return reinterpret_cast<nvtxMemHeapHandle_t>(const_cast<void*>(range->ptr));
}

void NVTX_API heap_unregister(nvtxDomainHandle_t, nvtxMemHeapHandle_t heap) {
  std::lock_guard lock(g_mutex);
  auto it = g_heaps.find(addr(heap));
  if (it == g_heaps.end()) {
    ++g_errors;
    return;
  }
  // The heap's regions go with it.
  g_regions.erase(g_regions.lower_bound(it->first), g_regions.lower_bound(it->first + it->second));
  g_heaps.erase(it);
}

void NVTX_API regions_register(nvtxDomainHandle_t, nvtxMemRegionsRegisterBatch_t const* desc) {
  std::lock_guard lock(g_mutex);
  if (desc == nullptr || desc->regionType != NVTX_MEM_TYPE_VIRTUAL_ADDRESS) {
    ++g_errors;
    return;
  }
  const auto* ranges = static_cast<const nvtxMemVirtualRangeDesc_t*>(desc->regionDescElements);
  for (std::size_t i = 0; i < desc->regionCount; ++i) {
    const std::uintptr_t p = addr(ranges[i].ptr);
    if (g_heaps.count(addr(desc->heap)) == 0 || !inside_a_heap(p, ranges[i].size) ||
        !g_regions.emplace(p, ranges[i].size).second)
      ++g_errors;
  }
}

void NVTX_API regions_unregister(nvtxDomainHandle_t, nvtxMemRegionsUnregisterBatch_t const* desc) {
  std::lock_guard lock(g_mutex);
  if (desc == nullptr || desc->refType != NVTX_MEM_REGION_REF_TYPE_POINTER) {
    ++g_errors;
    return;
  }
  for (std::size_t i = 0; i < desc->refCount; ++i)
    if (g_regions.erase(addr(desc->refElements[i].pointer)) == 0) ++g_errors;
}

}  // namespace

extern "C" {

// NVTX's core asks for this; the recorder takes no core calls.
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(const void*) { return 1; }

__attribute__((visibility("default"))) int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t* info) {
  if (info == nullptr) return 0;
  if (info->moduleId != NVTX_EXT_MODULEID_MEM || info->segmentsCount == 0) return 1;
  intptr_t* slots = info->segments[0].functionSlots;
  const std::size_t n = info->segments[0].slotCount;
  auto set = [&](std::size_t id, auto* fn) {
    if (id < n) slots[id] = reinterpret_cast<intptr_t>(fn);
  };
  set(NVTX3EXT_CBID_nvtxMemHeapRegister, &heap_register);
  set(NVTX3EXT_CBID_nvtxMemHeapUnregister, &heap_unregister);
  set(NVTX3EXT_CBID_nvtxMemRegionsRegister, &regions_register);
  set(NVTX3EXT_CBID_nvtxMemRegionsUnregister, &regions_unregister);
  return 1;
}

// Copies up to max registered regions (or heaps) into starts/sizes, in address order;
// returns how many there are.
__attribute__((visibility("default"))) std::size_t nvtx_recorder_regions(std::uintptr_t* starts, std::size_t* sizes,
                                                                         std::size_t max) {
  std::lock_guard lock(g_mutex);
  std::size_t i = 0;
  for (const auto& [p, n] : g_regions) {
    if (i < max) {
      starts[i] = p;
      sizes[i] = n;
    }
    ++i;
  }
  return i;
}

__attribute__((visibility("default"))) std::size_t nvtx_recorder_heaps(std::uintptr_t* bases, std::size_t* sizes,
                                                                       std::size_t max) {
  std::lock_guard lock(g_mutex);
  std::size_t i = 0;
  for (const auto& [p, n] : g_heaps) {
    if (i < max) {
      bases[i] = p;
      sizes[i] = n;
    }
    ++i;
  }
  return i;
}

__attribute__((visibility("default"))) std::size_t nvtx_recorder_errors() {
  std::lock_guard lock(g_mutex);
  return g_errors;
}

}  // extern "C"
