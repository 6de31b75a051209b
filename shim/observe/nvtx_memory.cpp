// nvtx_memory.cpp - see nvtx_memory.h.
#include "observe/nvtx_memory.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "config/log.h"

#ifdef LUMA_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>
#endif

namespace luma::shim {

bool nvtx_tool_present() noexcept {
  static const bool present = [] {
    const char* path = std::getenv("NVTX_INJECTION64_PATH");
    if (path != nullptr && path[0] != '\0') return true;
    return dlsym(RTLD_DEFAULT, "InitializeInjectionNvtx2Preinject") != nullptr ||
           dlsym(RTLD_DEFAULT, "InitializeInjectionNvtxExtensionPreinject") != nullptr;
  }();
  return present;
}

#ifdef LUMA_HAVE_NVTX
namespace {

nvtxDomainHandle_t luma_domain() noexcept {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("luma");
  return domain;
}

class NvtxMemorySink final : public core::EventSink, public DriverDevice::RangeObserver {
 public:
  explicit NvtxMemorySink(core::EventSink* next) : next_(next), domain_(luma_domain()) {}

  // Called with the allocator's lock held: one allocator's events arrive in order. Memory
  // mapped into an expandable segment (inside a range heap) is no heap of its own.
  void on_event(const core::Event& e) noexcept override {
    switch (e.kind) {
      case core::EventKind::segment_reserve:
        if (!in_range(e.address)) add_heap(e.address, e.size, "luma segment");
        break;
      case core::EventKind::segment_release:
        if (!in_range(e.address)) drop_heap(e.address);
        break;
      case core::EventKind::alloc: add_region(e.address, e.requested != 0 ? e.requested : e.size); break;
      case core::EventKind::free_requested: drop_region(e.address); break;
      default: break;
    }
    if (next_ != nullptr) next_->on_event(e);
  }

  // An expandable segment's address range: one heap from its reservation to its release.
  void range_reserved(std::uintptr_t base, std::size_t bytes) noexcept override {
    add_heap(base, bytes, "luma expandable segment");
    try {
      ranges_[base] = bytes;
    } catch (...) {  // no host memory: its pages become heaps of their own
      drop_heap(base);
    }
  }
  void range_released(std::uintptr_t base) noexcept override {
    if (ranges_.erase(base) != 0) drop_heap(base);
  }

 private:
  bool in_range(std::uint64_t address) const noexcept {
    auto it = ranges_.upper_bound(address);
    if (it == ranges_.begin()) return false;
    --it;
    return address - it->first < it->second;
  }

  void add_heap(std::uint64_t base, std::uint64_t size, const char* what) noexcept {
    nvtxMemVirtualRangeDesc_t range{};
    range.ptr = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(base));
    range.size = static_cast<std::size_t>(size);
    nvtxMemHeapDesc_t desc{};
    desc.extCompatID = NVTX_EXT_COMPATID_MEM;
    desc.structSize = sizeof desc;
    desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
    desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    desc.typeSpecificDescSize = sizeof range;
    desc.typeSpecificDesc = &range;
    desc.messageType = NVTX_MESSAGE_TYPE_ASCII;
    desc.message.ascii = what;
    const nvtxMemHeapHandle_t heap = nvtxMemHeapRegister(domain_, &desc);
    try {
      heaps_[base] = heap;
    } catch (...) {  // no host memory: this segment's blocks go undescribed
      nvtxMemHeapUnregister(domain_, heap);
    }
  }

  void drop_heap(std::uint64_t base) noexcept {
    auto it = heaps_.find(base);
    if (it == heaps_.end()) return;
    nvtxMemHeapUnregister(domain_, it->second);  // its regions go with it
    heaps_.erase(it);
  }

  void add_region(std::uint64_t address, std::uint64_t bytes) noexcept {
    auto it = heaps_.upper_bound(address);
    if (it == heaps_.begin()) return;
    --it;
    nvtxMemVirtualRangeDesc_t range{};
    range.ptr = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(address));
    range.size = static_cast<std::size_t>(bytes);
    nvtxMemRegionsRegisterBatch_t batch{};
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof batch;
    batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    batch.heap = it->second;
    batch.regionCount = 1;
    batch.regionDescElementSize = sizeof range;
    batch.regionDescElements = &range;
    nvtxMemRegionsRegister(domain_, &batch);
  }

  void drop_region(std::uint64_t address) noexcept {
    nvtxMemRegionRef_t ref{};
    ref.pointer = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(address));
    nvtxMemRegionsUnregisterBatch_t batch{};
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof batch;
    batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
    batch.refCount = 1;
    batch.refElementSize = sizeof ref;
    batch.refElements = &ref;
    nvtxMemRegionsUnregister(domain_, &batch);
  }

  core::EventSink* next_;
  nvtxDomainHandle_t domain_;
  std::map<std::uint64_t, nvtxMemHeapHandle_t> heaps_;  // by segment (or range) base
  std::map<std::uint64_t, std::size_t> ranges_;         // expandable segments' ranges
};

}  // namespace

core::EventSink* nvtx_memory_sink(core::EventSink* next, DriverDevice& device) noexcept {
  if (!nvtx_tool_present()) return nullptr;
  try {
    static std::once_flag said;
    std::call_once(said, [] {
      log_noexcept(LogLevel::info, "an NVTX tool is present: luma's segments and blocks are "
                                        "described to it (NVTX memory API)");
    });
    auto* sink = new NvtxMemorySink(next);  // lives as long as its allocator: never freed
    device.set_range_observer(sink);
    return sink;
  } catch (...) {
    return nullptr;
  }
}
#else
core::EventSink* nvtx_memory_sink(core::EventSink*, DriverDevice&) noexcept { return nullptr; }
#endif

}  // namespace luma::shim
