// c10_cuda_stand_in.cpp - built as libc10_cuda.so for tests: a stand-in for PyTorch's CUDA
// caching allocator library (c10/cuda/CUDACachingAllocator.cpp) in the ways that matter to
// luma: it allocates its own segments with cuMemAlloc (2 MiB for requests up to 1 MiB,
// 20 MiB below 10 MiB, else the request rounded up to 2 MiB, PyTorch's sizes), carves
// blocks out of them, keeps freed blocks for reuse, and says which segment a block lies
// in: what torch.multiprocessing exports for a CUDA tensor is the handle of that segment's
// start and the tensor's offset from it. luma recognises the library by its name
// (shim/program/program_cache.h) as it recognises PyTorch's.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "driver/cuda_abi.h"

extern "C" {
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
}

namespace {

constexpr size_t kMiB = size_t{1} << 20;

struct Segment {
  CUdeviceptr base = 0;
  size_t size = 0;
  size_t used = 0;  // bump pointer: blocks are carved in order, freed ones reused by size
};

std::mutex g_mutex;
std::vector<Segment> g_segments;
std::multimap<size_t, CUdeviceptr> g_free;  // freed blocks by size
std::map<CUdeviceptr, size_t> g_live;       // block -> size

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t segment_size(size_t n) {
  if (n <= kMiB) return 2 * kMiB;
  if (n < 10 * kMiB) return 20 * kMiB;
  return round_up(n, 2 * kMiB);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int c10_stand_in_alloc(CUdeviceptr* p, size_t n) {
  std::lock_guard lock(g_mutex);
  n = round_up(n == 0 ? 1 : n, 512);
  if (auto it = g_free.find(n); it != g_free.end()) {
    *p = it->second;
    g_free.erase(it);
    g_live[*p] = n;
    return CUDA_SUCCESS;
  }
  const bool small = n <= kMiB;
  for (Segment& s : g_segments) {
    if ((s.size == 2 * kMiB) != small || s.size - s.used < n) continue;
    *p = s.base + s.used;
    s.used += n;
    g_live[*p] = n;
    return CUDA_SUCCESS;
  }
  Segment s;
  s.size = segment_size(n);
  if (CUresult r = cuMemAlloc_v2(&s.base, s.size); r != CUDA_SUCCESS) return r;
  s.used = n;
  *p = s.base;
  g_segments.push_back(s);
  g_live[*p] = n;
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) int c10_stand_in_free(CUdeviceptr p) {
  std::lock_guard lock(g_mutex);
  auto it = g_live.find(p);
  if (it == g_live.end()) return CUDA_ERROR_INVALID_VALUE;
  g_free.emplace(it->second, p);
  g_live.erase(it);
  return CUDA_SUCCESS;
}

// The start and size of the segment holding p (its own record, as PyTorch's allocator
// keeps it: no driver call).
__attribute__((visibility("default"))) int c10_stand_in_segment(CUdeviceptr p, CUdeviceptr* base,
                                                                size_t* size) {
  std::lock_guard lock(g_mutex);
  for (const Segment& s : g_segments)
    if (p >= s.base && p < s.base + s.size) {
      *base = s.base;
      *size = s.size;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

// Gives every segment back to the driver (torch.cuda.empty_cache with nothing live).
__attribute__((visibility("default"))) int c10_stand_in_empty_cache() {
  std::lock_guard lock(g_mutex);
  if (!g_live.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (const Segment& s : g_segments)
    if (CUresult r = cuMemFree_v2(s.base); r != CUDA_SUCCESS) return r;
  g_segments.clear();
  g_free.clear();
  return CUDA_SUCCESS;
}

}  // extern "C"
