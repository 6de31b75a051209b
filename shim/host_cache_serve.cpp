// host_cache_serve.cpp - cuMemHostAlloc, cuMemAllocHost and cuMemFreeHost as luma serves
// them (serve.h): from the pinned host cache (host_cache_driver.h) when LUMA_CONF's
// host_cache is on, else forwarded and counted as a forwarded path (forwarded_paths.h), as
// is every call the cache leaves to the driver (bad arguments, no current context, a
// pointer luma did not hand out).
#include "serve.h"

#include "context_entries.h"
#include "forwarded_calls.h"

namespace luma::shim {
namespace {

// The context the block belongs to: the current one, with its entry made so the fences
// of later frees cover its streams. nullptr: the call is left to the driver.
CUcontext serving_context(State& s) {
  ContextEntry* e = current_entry(s);
  return e != nullptr ? e->ctx : nullptr;
}

template <typename Real>
CUresult host_alloc(State& s, void** pp, std::size_t bytes, unsigned flags, core::trace::ForwardedEntry entry,
                    Real real) {
  if (s.host_cache != nullptr) {
    if (CUcontext ctx = serving_context(s)) {
      if (auto r = s.host_cache->allocate(pp, bytes, flags, ctx, real)) {
        if (*r == CUDA_SUCCESS) {
          core::trace::ForwardedCall call;
          call.op = core::trace::ForwardedOp::alloc;
          call.entry = entry;
          call.address = reinterpret_cast<std::uint64_t>(*pp);
          call.bytes = bytes;
          on_host_cache_call(s, call);
        }
        return *r;
      }
    }
  }
  const CUresult r = real(pp, bytes);
  if (r == CUDA_SUCCESS) on_forwarded_alloc(s, ForwardedPath::pinned_host, bytes, entry, *pp);
  return r;
}

}  // namespace

CUresult serve_mem_host_alloc(State& s, void** pp, std::size_t bytes, unsigned flags) {
  return host_alloc(s, pp, bytes, flags, core::trace::ForwardedEntry::cuMemHostAlloc, [&s, flags](void** p, std::size_t n) {
    return s.driver.mem_host_alloc(p, n, flags);
  });
}

CUresult serve_mem_alloc_host(State& s, void** pp, std::size_t bytes) {
  // "cuMemAllocHost: ... the same as cuMemHostAlloc with Flags 0" (its pool is flags 0).
  return host_alloc(s, pp, bytes, 0, core::trace::ForwardedEntry::cuMemAllocHost, [&s](void** p, std::size_t n) {
    return s.driver.mem_alloc_host(p, n);
  });
}

CUresult serve_mem_free_host(State& s, void* p) {
  if (s.host_cache != nullptr && p != nullptr) {
    // The current context gets its entry, so the fence covers its streams too. Whatever
    // happens there, the free must reach the cache: forwarded, a block the cache still
    // counts as live would be freed under it.
    try {
      current_entry(s);
    } catch (...) {
    }
    if (auto r = s.host_cache->free(p)) {
      if (*r == CUDA_SUCCESS) {
        core::trace::ForwardedCall call;
        call.op = core::trace::ForwardedOp::free;
        call.entry = core::trace::ForwardedEntry::cuMemFreeHost;
        call.address = reinterpret_cast<std::uint64_t>(p);
        on_host_cache_call(s, call);
      }
      return *r;
    }
  }
  const CUresult r = s.driver.mem_free_host(p);
  if (r == CUDA_SUCCESS && p != nullptr)
    on_forwarded_free(s, ForwardedPath::pinned_host, core::trace::ForwardedEntry::cuMemFreeHost, p);
  return r;
}

}  // namespace luma::shim
