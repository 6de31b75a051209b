// host_cache_prog.cpp - pinned host memory patterns for the host cache tests
// (host_cache_e2e_test.cpp), linked with the stand-in driver and run with and without
// libluma.so preloaded. Each mode prints "key=value" lines the test reads, with the
// stand-in's own count of real pinned allocations (luma_fake_get_host_counters).
//   reuse N      N rounds of cuMemHostAlloc(1 MiB + 1), cuMemFreeHost, cuCtxSynchronize
//   flags        flag sets: cuMemHostGetFlags and cuMemHostGetDevicePointer of reused blocks;
//                bad flags and size 0
//   bound        4 blocks of 1 MiB freed, then 4 asked for again
//   foreign      a block allocated behind luma's back (the driver's own symbol) freed
//                through cuMemFreeHost; a stack address; a second free
//   capture      a block freed while a global-mode capture is underway on a non-blocking
//                stream (luma records nothing there, the capture stays valid), then the
//                capture ended and the block asked for again once the work is done
//   threads T R  T threads, R rounds each: a block of one of 4 sizes, filled with the
//                thread's byte, checked, freed; blocks must never be shared between threads
//   pending S    a block whose cuMemcpyHtoDAsync on stream S (legacy | nonblocking) has not
//                run yet is freed, a block of the same size asked for and overwritten,
//                then the copy runs: the device must hold the first block's bytes
//   contexts     a PORTABLE block freed in the primary context while a copy from it is
//                queued in a second context (created, with device memory luma serves): not
//                reused until that copy ran; then a block freed while the second context
//                has work queued, that context destroyed, and the block asked for again
//                (with luma only, as pending: the stand-in alone frees the block under the
//                queued copy, which then reads freed memory)
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "fake_control.h"
#include "fake_driver_api.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "host_cache_prog: %s failed: %d\n", what, r);
    std::_Exit(1);
  }
}

void init() {
  check(cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

void counters() {
  luma_fake_host_counters c{};
  luma_fake_get_host_counters(&c);
  std::printf("driver_allocs=%llu\ndriver_frees=%llu\ndriver_live=%llu\n",
              static_cast<unsigned long long>(c.alloc_calls),
              static_cast<unsigned long long>(c.free_calls),
              static_cast<unsigned long long>(c.live_allocations));
}

int reuse(int rounds) {
  std::vector<void*> seen;
  int repeats = 0;
  for (int i = 0; i < rounds; ++i) {
    void* p = nullptr;
    check(cuMemHostAlloc(&p, kMiB + 1, 0), "cuMemHostAlloc");
    std::memset(p, i, kMiB + 1);  // the whole size asked for is usable
    for (void* q : seen) repeats += q == p;
    seen.push_back(p);
    check(cuMemFreeHost(p), "cuMemFreeHost");
    // The program waits for its work each round (as a staging loop does before reading its
    // results): luma's fence of the free is then done, whatever the timing.
    check(cuCtxSynchronize(), "cuCtxSynchronize");
  }
  std::printf("repeats=%d\n", repeats);
  counters();
  return 0;
}

int flags() {
  const unsigned mapped = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
  void* a = nullptr;
  check(cuMemHostAlloc(&a, 3 * kMiB, mapped), "cuMemHostAlloc(mapped)");
  check(cuMemFreeHost(a), "cuMemFreeHost");
  check(cuCtxSynchronize(), "cuCtxSynchronize");  // the fence is done
  void* plain = nullptr;
  check(cuMemAllocHost_v2(&plain, 3 * kMiB), "cuMemAllocHost");
  unsigned f = 99;
  check(cuMemHostGetFlags(&f, plain), "cuMemHostGetFlags(plain)");
  std::printf("plain_is_first=%d\nplain_flags=%u\n", plain == a, f);
  void* again = nullptr;
  check(cuMemHostAlloc(&again, 3 * kMiB - 100, mapped), "cuMemHostAlloc(mapped again)");
  f = 99;
  check(cuMemHostGetFlags(&f, again), "cuMemHostGetFlags(mapped)");
  CUdeviceptr d = 0;
  check(cuMemHostGetDevicePointer_v2(&d, again, 0), "cuMemHostGetDevicePointer");
  std::printf("mapped_is_first=%d\nmapped_flags=%u\ndevice_pointer_ok=%d\n", again == a, f,
              d == reinterpret_cast<CUdeviceptr>(again));
  check(cuMemFreeHost(again), "cuMemFreeHost");
  check(cuMemFreeHost(plain), "cuMemFreeHost");
  void* bad = nullptr;
  std::printf("bad_flags=%d\n", static_cast<int>(cuMemHostAlloc(&bad, 4096, 0x80)));
  std::printf("zero_size=%d\n", static_cast<int>(cuMemHostAlloc(&bad, 0, 0)));
  counters();
  return 0;
}

int bound() {
  void* p[4];
  for (void*& q : p) check(cuMemHostAlloc(&q, kMiB, 0), "cuMemHostAlloc");
  for (void* q : p) check(cuMemFreeHost(q), "cuMemFreeHost");
  check(cuCtxSynchronize(), "cuCtxSynchronize");  // the fences are done
  std::printf("after_free_driver_frees=");
  luma_fake_host_counters c{};
  luma_fake_get_host_counters(&c);
  std::printf("%llu\n", static_cast<unsigned long long>(c.free_calls));
  int reused = 0;
  for (void*& q : p) {
    void* n = nullptr;
    check(cuMemHostAlloc(&n, kMiB, 0), "cuMemHostAlloc");
    for (void* old : p) reused += old == n;
    q = n;
  }
  std::printf("reused=%d\n", reused);
  for (void* q : p) check(cuMemFreeHost(q), "cuMemFreeHost");
  counters();
  return 0;
}

int foreign() {
  // The stand-in's own function, found in its library with glibc's dlsym (libluma.so's
  // dlsym would hand out luma's): a block luma never handed out, as one allocated before
  // luma was loaded or through a path it does not see.
  using Dlsym = void* (*)(void*, const char*);
  Dlsym glibc_dlsym = nullptr;
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5"})
    if (glibc_dlsym == nullptr) glibc_dlsym = reinterpret_cast<Dlsym>(dlvsym(RTLD_NEXT, "dlsym", version));
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto real = lib != nullptr && glibc_dlsym != nullptr
                  ? reinterpret_cast<CUresult (*)(void**, size_t, unsigned)>(
                        glibc_dlsym(lib, "cuMemHostAlloc"))
                  : nullptr;
  if (real == nullptr) {
    std::fprintf(stderr, "host_cache_prog: the stand-in's cuMemHostAlloc not found\n");
    return 1;
  }
  void* p = nullptr;
  check(real(&p, kMiB, 0), "the stand-in's cuMemHostAlloc");
  std::printf("foreign_free=%d\n", static_cast<int>(cuMemFreeHost(p)));
  int local = 0;
  std::printf("stack_free=%d\n", static_cast<int>(cuMemFreeHost(&local)));
  void* q = nullptr;
  check(cuMemHostAlloc(&q, kMiB, 0), "cuMemHostAlloc");
  check(cuMemFreeHost(q), "cuMemFreeHost");
  std::printf("second_free=%d\n", static_cast<int>(cuMemFreeHost(q)));
  counters();
  return 0;
}

int pending(const std::string& which) {
  CUstream s = nullptr;
  if (which == "nonblocking") check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const size_t n = 2 * kMiB;
  CUdeviceptr dev = 0;
  check(cuMemAlloc_v2(&dev, n), "cuMemAlloc");
  void* a = nullptr;
  check(cuMemHostAlloc(&a, n, 0), "cuMemHostAlloc");
  std::memset(a, 'a', n);
  luma_fake_set_gate_open(0);  // the copy is queued, not run: "still running", no timing
  check(cuMemcpyHtoDAsync_v2(dev, a, n, s), "cuMemcpyHtoDAsync");
  check(cuMemFreeHost(a), "cuMemFreeHost");
  // On a non-blocking stream the copy is no part of the legacy stream's work: the legacy
  // stream is drained here, so a fence on it alone would be done now, whatever the timing.
  if (s != nullptr) check(cuStreamSynchronize(nullptr), "cuStreamSynchronize(legacy)");
  void* b = nullptr;
  check(cuMemHostAlloc(&b, n, 0), "cuMemHostAlloc while the copy is pending");
  std::memset(b, 'b', n);
  std::printf("reused_while_pending=%d\n", b == a);
  luma_fake_set_gate_open(1);
  check(s != nullptr ? cuStreamSynchronize(s) : cuCtxSynchronize(), "synchronize");
  std::vector<char> back(n);
  check(cuMemcpyDtoH_v2(back.data(), dev, n), "cuMemcpyDtoH");
  size_t wrong = 0;
  for (char c : back) wrong += c != 'a';
  std::printf("copied_bytes_wrong=%zu\n", wrong);
  check(cuMemFreeHost(b), "cuMemFreeHost");
  void* c = nullptr;
  check(cuMemHostAlloc(&c, n, 0), "cuMemHostAlloc after the copy");
  std::printf("reused_after=%d\n", c == a || c == b);
  check(cuMemFreeHost(c), "cuMemFreeHost");
  counters();
  return 0;
}

int contexts() {
  CUcontext primary = nullptr;
  check(cuCtxGetCurrent(&primary), "cuCtxGetCurrent");
  CUdevice device = 0;
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  CUcontext other = nullptr;
  check(cuCtxCreate_v2(&other, 0, device), "cuCtxCreate");  // current now
  const size_t n = 2 * kMiB;
  CUdeviceptr dev = 0;
  check(cuMemAlloc_v2(&dev, n), "cuMemAlloc (second context)");
  const unsigned portable = CU_MEMHOSTALLOC_PORTABLE;
  check(cuCtxSetCurrent(primary), "cuCtxSetCurrent(primary)");
  void* a = nullptr;
  check(cuMemHostAlloc(&a, n, portable), "cuMemHostAlloc");
  std::memset(a, 'a', n);
  check(cuCtxSetCurrent(other), "cuCtxSetCurrent(second)");
  luma_fake_set_gate_open(0);  // the copy is queued, not run
  check(cuMemcpyHtoDAsync_v2(dev, a, n, nullptr), "cuMemcpyHtoDAsync (second context)");
  check(cuCtxSetCurrent(primary), "cuCtxSetCurrent(primary)");
  check(cuMemFreeHost(a), "cuMemFreeHost");
  // The primary context has no work: a fence of it alone would be done now.
  check(cuCtxSynchronize(), "cuCtxSynchronize(primary)");
  void* b = nullptr;
  check(cuMemHostAlloc(&b, n, portable), "cuMemHostAlloc while the copy is pending");
  std::memset(b, 'b', n);
  std::printf("reused_while_pending=%d\n", b == a);
  luma_fake_set_gate_open(1);
  check(cuCtxSetCurrent(other), "cuCtxSetCurrent(second)");
  check(cuCtxSynchronize(), "cuCtxSynchronize(second)");
  std::vector<char> back(n);
  check(cuMemcpyDtoH_v2(back.data(), dev, n), "cuMemcpyDtoH");
  size_t wrong = 0;
  for (char c : back) wrong += c != 'a';
  std::printf("copied_bytes_wrong=%zu\n", wrong);
  // b's fence gets a part in the second context, whose work is still queued; that context
  // then goes (its work finishes first), and its part of the fence with it.
  luma_fake_set_gate_open(0);
  check(cuMemcpyHtoDAsync_v2(dev, b, n, nullptr), "cuMemcpyHtoDAsync (second context)");
  check(cuCtxSetCurrent(primary), "cuCtxSetCurrent(primary)");
  check(cuMemFreeHost(b), "cuMemFreeHost");
  luma_fake_set_gate_open(1);
  check(cuCtxDestroy_v2(other), "cuCtxDestroy");
  check(cuCtxSetCurrent(primary), "cuCtxSetCurrent(primary)");
  void* c = nullptr;
  check(cuMemHostAlloc(&c, n, portable), "cuMemHostAlloc after the destroy");
  std::printf("reused_after_destroy=%d\n", c == a || c == b);
  check(cuMemFreeHost(c), "cuMemFreeHost");
  counters();
  return 0;
}

int capture() {
  CUstream s = nullptr;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUdeviceptr dev = 0;
  check(cuMemAlloc_v2(&dev, kMiB), "cuMemAlloc");
  void* a = nullptr;
  check(cuMemHostAlloc(&a, kMiB, 0), "cuMemHostAlloc");
  check(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  check(cuMemcpyHtoDAsync_v2(dev, a, kMiB, s), "cuMemcpyHtoDAsync (captured)");
  std::printf("free_in_capture=%d\n", static_cast<int>(cuMemFreeHost(a)));
  CUgraph graph = nullptr;
  std::printf("end_capture=%d\n", static_cast<int>(cuStreamEndCapture(s, &graph)));
  if (graph != nullptr) check(cuGraphDestroy(graph), "cuGraphDestroy");
  // Twice: the first allocation after the capture records the deferred fence, which the
  // synchronization then completes.
  void* b = nullptr;
  check(cuMemHostAlloc(&b, kMiB, 0), "cuMemHostAlloc after the capture");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  void* c = nullptr;
  check(cuMemHostAlloc(&c, kMiB, 0), "cuMemHostAlloc after the synchronization");
  std::printf("reused_after_capture=%d\n", b == a || c == a);
  check(cuMemFreeHost(b), "cuMemFreeHost");
  check(cuMemFreeHost(c), "cuMemFreeHost");
  counters();
  return 0;
}

int threads(int count, int rounds) {
  CUcontext ctx = nullptr;
  check(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  std::atomic<long> corrupt{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < count; ++t)
    workers.emplace_back([&, t] {
      check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
      const size_t sizes[] = {4096, 100000, kMiB + 1, 3 * kMiB};
      for (int i = 0; i < rounds; ++i) {
        const size_t n = sizes[(i + t) % 4];
        void* p = nullptr;
        check(cuMemHostAlloc(&p, n, i % 2 == 0 ? 0u : unsigned{CU_MEMHOSTALLOC_PORTABLE}), "cuMemHostAlloc");
        auto* bytes = static_cast<unsigned char*>(p);
        std::memset(bytes, t + 1, n);
        std::this_thread::yield();  // let another thread run while this one holds the block
        for (size_t k = 0; k < n; k += 4093) corrupt += bytes[k] != t + 1;
        corrupt += bytes[n - 1] != t + 1;
        check(cuMemFreeHost(p), "cuMemFreeHost");
      }
    });
  for (std::thread& w : workers) w.join();
  std::printf("corrupt=%ld\n", corrupt.load());
  counters();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: host_cache_prog reuse N | flags | bound | foreign | pending S | contexts\n");
    return 2;
  }
  init();
  const std::string mode = argv[1];
  if (mode == "reuse" && argc == 3) return reuse(std::atoi(argv[2]));
  if (mode == "flags") return flags();
  if (mode == "bound") return bound();
  if (mode == "foreign") return foreign();
  if (mode == "capture") return capture();
  if (mode == "threads" && argc == 4) return threads(std::atoi(argv[2]), std::atoi(argv[3]));
  if (mode == "pending" && argc == 3) return pending(argv[2]);
  if (mode == "contexts") return contexts();
  std::fprintf(stderr, "host_cache_prog: unknown mode\n");
  return 2;
}
