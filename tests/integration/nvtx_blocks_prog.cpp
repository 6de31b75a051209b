// nvtx_blocks_prog.cpp - run under libluma.so with NVTX_INJECTION64_PATH=nvtx_recorder:
// what luma describes through the NVTX memory API must be exactly the blocks this program
// holds. It allocates blocks of mixed sizes (driver API), frees some, and at each check
// asks the recorder for the registered regions: their starts and sizes must equal the
// live blocks' pointers and requested sizes, each inside a registered heap (a segment).
// A block big enough for a segment of its own (LUMA_CONF=ipc_own_segment) takes its heap
// along when freed. Exit: 0 every check passed, 1 a mismatch (stderr says which), 2 no
// recorder loaded.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "driver/cuda_abi.h"

extern "C" {
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
}

namespace {

using Query = std::size_t (*)(std::uintptr_t*, std::size_t*, std::size_t);
Query g_regions = nullptr, g_heaps = nullptr;
std::size_t (*g_errors)() = nullptr;
int g_failures = 0;

std::map<std::uintptr_t, std::size_t> ask(Query q) {
  std::vector<std::uintptr_t> p(4096);
  std::vector<std::size_t> n(4096);
  const std::size_t count = q(p.data(), n.data(), p.size());
  std::map<std::uintptr_t, std::size_t> out;
  for (std::size_t i = 0; i < count && i < p.size(); ++i) out[p[i]] = n[i];
  return out;
}

void check(const char* when, const std::map<std::uintptr_t, std::size_t>& live) {
  const auto regions = ask(g_regions);
  const auto heaps = ask(g_heaps);
  if (regions != live) {
    ++g_failures;
    std::fprintf(stderr, "%s: %zu regions registered, %zu blocks live\n", when, regions.size(), live.size());
    for (const auto& [p, n] : live) {
      auto it = regions.find(p);
      if (it == regions.end()) std::fprintf(stderr, "  block %#zx (%zu bytes): no region\n", p, n);
      else if (it->second != n) std::fprintf(stderr, "  block %#zx: region of %zu bytes, block of %zu\n", p, it->second, n);
    }
  }
  for (const auto& [p, n] : regions) {
    auto h = heaps.upper_bound(p);
    if (h == heaps.begin() || p + n > std::prev(h)->first + std::prev(h)->second) {
      ++g_failures;
      std::fprintf(stderr, "%s: region %#zx (%zu bytes) lies in no heap\n", when, p, n);
    }
  }
  if (g_errors() != 0) {
    ++g_failures;
    std::fprintf(stderr, "%s: the recorder counted %zu calls against the API's rules\n", when, g_errors());
  }
}

}  // namespace

int main() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return 1;
  std::map<std::uintptr_t, std::size_t> live;
  static const std::size_t kSizes[] = {4000, 200, 1 << 20, 70000, 512, 3 * (1 << 20) + 100, 1000, 12 << 20};
  for (int i = 0; i < 48; ++i) {
    CUdeviceptr p = 0;
    const std::size_t n = kSizes[i % (sizeof kSizes / sizeof kSizes[0])];
    if (cuMemAlloc_v2(&p, n) != CUDA_SUCCESS) return 1;
    live[p] = n;
  }
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  void* recorder = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (recorder == nullptr) {
    std::fprintf(stderr, "nvtx-blocks: the NVTX recorder was not loaded (no NVTX call was made)\n");
    return 2;
  }
  g_regions = reinterpret_cast<Query>(dlsym(recorder, "nvtx_recorder_regions"));
  g_heaps = reinterpret_cast<Query>(dlsym(recorder, "nvtx_recorder_heaps"));
  g_errors = reinterpret_cast<std::size_t (*)()>(dlsym(recorder, "nvtx_recorder_errors"));
  if (g_regions == nullptr || g_heaps == nullptr || g_errors == nullptr) return 2;
  check("after 48 allocations", live);
  int k = 0;
  for (auto it = live.begin(); it != live.end();) {
    if (k++ % 3 == 0) {
      if (cuMemFree_v2(it->first) != CUDA_SUCCESS) return 1;
      it = live.erase(it);
    } else {
      ++it;
    }
  }
  check("after freeing a third", live);
  for (int i = 0; i < 16; ++i) {  // freed blocks handed out again
    CUdeviceptr p = 0;
    const std::size_t n = kSizes[(i * 5) % (sizeof kSizes / sizeof kSizes[0])];
    if (cuMemAlloc_v2(&p, n) != CUDA_SUCCESS) return 1;
    live[p] = n;
  }
  check("after 16 more", live);
  // A block with a segment of its own: freed, its segment goes back, its heap with it.
  const std::size_t heaps_before = ask(g_heaps).size();
  CUdeviceptr own = 0;
  if (cuMemAlloc_v2(&own, 40 << 20) != CUDA_SUCCESS) return 1;
  const std::size_t heaps_with = ask(g_heaps).size();
  const bool own_heap = ask(g_heaps).count(own) == 1;
  if (cuMemFree_v2(own) != CUDA_SUCCESS) return 1;
  const auto heaps_after = ask(g_heaps);
  if (!own_heap || heaps_with != heaps_before + 1 || heaps_after.size() != heaps_before ||
      heaps_after.count(own) != 0) {
    ++g_failures;
    std::fprintf(stderr, "own segment: heaps %zu before, %zu with it (its own: %d), %zu after its free\n",
                 heaps_before, heaps_with, own_heap ? 1 : 0, heaps_after.size());
  }
  for (const auto& [p, n] : live)
    if (cuMemFree_v2(p) != CUDA_SUCCESS) return 1;
  live.clear();
  check("after freeing everything", live);
  if (g_failures != 0) return 1;
  std::printf("nvtx-blocks: the registered regions were the live blocks at every check\n");
  return 0;
}
