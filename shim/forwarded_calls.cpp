// forwarded_calls.cpp - see forwarded_calls.h.
#include "forwarded_calls.h"

#include <mutex>
#include <new>
#include <unordered_map>

namespace luma::shim {
namespace {

using core::trace::ForwardedCall;
using core::trace::ForwardedEntry;
using core::trace::ForwardedOp;

// The size of each live cuMemCreate handle, so that cuMemRelease (which names only the
// handle) is recorded with its bytes. A mutex is enough: these calls are rare and each
// costs the driver far more. Leaked with the State (calls may come during exit).
class HandleSizes {
 public:
  void add(CUmemGenericAllocationHandle h, std::size_t bytes) noexcept {
    std::lock_guard lock(m_);
    try {
      sizes_[h] = bytes;
    } catch (...) {  // out of host memory: the release is recorded without its bytes
    }
  }
  std::size_t take(CUmemGenericAllocationHandle h) noexcept {
    std::lock_guard lock(m_);
    auto it = sizes_.find(h);
    if (it == sizes_.end()) return 0;
    const std::size_t n = it->second;
    sizes_.erase(it);
    return n;
  }

 private:
  std::mutex m_;
  std::unordered_map<CUmemGenericAllocationHandle, std::size_t> sizes_;
};

HandleSizes* handle_sizes() noexcept {
  static HandleSizes* h = new (std::nothrow) HandleSizes;
  return h;
}

std::uint64_t stream_value(CUstream s) noexcept { return reinterpret_cast<std::uint64_t>(s); }


}  // namespace

// Counted while luma is active, as the served calls are: with caching off luma is not
// there to report, and a child forked after the parent served reports nothing.
// The trace record names the entry point and the pointer when the caller gives them.
void on_forwarded_alloc(State& s, ForwardedPath path, std::size_t bytes, ForwardedEntry entry,
                        const void* ptr) noexcept {
  on_forwarded_call(s, path, call_of(ForwardedOp::alloc, entry, reinterpret_cast<std::uint64_t>(ptr), bytes));
}

void on_forwarded_free(State& s, ForwardedPath path, ForwardedEntry entry, const void* ptr) noexcept {
  on_forwarded_call(s, path, call_of(ForwardedOp::free, entry, reinterpret_cast<std::uint64_t>(ptr), 0));
}

void on_mem_alloc_async(State& s, CUdeviceptr* dptr, std::size_t bytes, CUstream stream) noexcept {
  on_forwarded_call(s, ForwardedPath::stream_ordered,
                    call_of(ForwardedOp::alloc, ForwardedEntry::cuMemAllocAsync, dptr != nullptr ? *dptr : 0,
                            bytes, stream_value(stream)));
}


void on_forwarded_call(State& s, ForwardedPath path, ForwardedCall call) noexcept {
  if (!s.serves()) return;
  if (call.op == ForwardedOp::alloc || call.op == ForwardedOp::map)
    s.forwarded.allocated(path, call.bytes);
  else
    s.forwarded.freed(path);
  if (!s.recorder.wanted()) return;
  call.path = forwarded_path_id(path);
  s.recorder.record_forwarded(s.driver, call);
}

void on_host_cache_call(State& s, ForwardedCall call) noexcept {
  if (!s.serves() || !s.recorder.wanted()) return;
  call.path = "pinned_host_cache";
  s.recorder.record_forwarded(s.driver, call);
}

void on_mem_alloc_from_pool_async(State& s, CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool,
                                  CUstream stream) noexcept {
  on_forwarded_call(s, ForwardedPath::stream_ordered,
                    call_of(ForwardedOp::alloc, ForwardedEntry::cuMemAllocFromPoolAsync,
                            dptr != nullptr ? *dptr : 0, bytes, stream_value(stream)));
}

void on_mem_alloc_managed(State& s, CUdeviceptr* dptr, std::size_t bytes, unsigned) noexcept {
  on_forwarded_call(s, ForwardedPath::managed,
                    call_of(ForwardedOp::alloc, ForwardedEntry::cuMemAllocManaged,
                            dptr != nullptr ? *dptr : 0, bytes));
}

void on_mem_create(State& s, CUmemGenericAllocationHandle* handle, std::size_t bytes,
                   const CUmemAllocationProp*, unsigned long long) noexcept {
  const CUmemGenericAllocationHandle h = handle != nullptr ? *handle : 0;
  if (h != 0 && s.serves())
    if (HandleSizes* sizes = handle_sizes()) sizes->add(h, bytes);
  on_forwarded_call(s, ForwardedPath::virtual_memory,
                    call_of(ForwardedOp::alloc, ForwardedEntry::cuMemCreate, 0, bytes, 0, h));
}

void on_mem_release(State& s, CUmemGenericAllocationHandle handle) noexcept {
  HandleSizes* sizes = handle_sizes();
  const std::size_t bytes = sizes != nullptr ? sizes->take(handle) : 0;
  on_forwarded_call(s, ForwardedPath::virtual_memory,
                    call_of(ForwardedOp::free, ForwardedEntry::cuMemRelease, 0, bytes, 0, handle));
}

void on_mem_map(State& s, CUdeviceptr ptr, std::size_t bytes, std::size_t,
                CUmemGenericAllocationHandle handle, unsigned long long) noexcept {
  on_forwarded_call(s, ForwardedPath::virtual_mappings,
                    call_of(ForwardedOp::map, ForwardedEntry::cuMemMap, ptr, bytes, 0, handle));
}

void on_mem_unmap(State& s, CUdeviceptr ptr, std::size_t bytes) noexcept {
  on_forwarded_call(s, ForwardedPath::virtual_mappings,
                    call_of(ForwardedOp::unmap, ForwardedEntry::cuMemUnmap, ptr, bytes));
}

}  // namespace luma::shim
