// trace_prog.cpp - a driver-API program (-lcuda, the stand-in) for the trace end-to-end
// tests: it reports on stdout each step it has completed, so a test that kills it knows
// which events the trace must hold.
//   trace_prog pairs N          N alloc/free pairs (sizes vary); "pair I" after each free
//   trace_prog stacks N         N allocs made by luma_trace_test_allocating_function
//   trace_prog fork             alloc, fork (child: alloc+free attempt, exit), 10 pairs
//   trace_prog threads T N      T threads, N pairs each
//   trace_prog oom N            10 pairs, then 1 MiB allocs made by luma_trace_test_oom_function
//                               until out of memory (at most N); "oom after K"
// Exit codes: 0 ok, 1 a CUDA call failed, 2 usage.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_driver_api.h"

namespace {

CUcontext g_ctx = nullptr;

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "trace_prog: %s failed: %d\n", what, r);
    std::_Exit(1);
  }
}

void init() {
  check(cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&g_ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
}

// One line per completed step, written at once (the test may SIGKILL us at any moment).
void say(const std::string& line) {
  const std::string text = line + "\n";
  if (::write(STDOUT_FILENO, text.data(), text.size()) < 0) std::_Exit(1);
}

std::size_t size_of(std::size_t i) { return 256 * (1 + i % 37) + (i % 3) * 1000; }

void pair(std::size_t i) {
  CUdeviceptr p = 0;
  check(cuMemAlloc_v2(&p, size_of(i)), "cuMemAlloc_v2");
  check(cuMemFree_v2(p), "cuMemFree_v2");
}

}  // namespace

// The call site the stacks test expects `luma stats` to name.
extern "C" [[gnu::noinline]] CUdeviceptr luma_trace_test_allocating_function(std::size_t n) {
  CUdeviceptr p = 0;
  check(cuMemAlloc_v2(&p, n), "cuMemAlloc_v2");
  asm volatile("" ::: "memory");  // keep the call a call, and this frame on the stack
  return p;
}

// The call site the out-of-memory test expects the report's top sites to name (the
// program is linked with -rdynamic: libluma.so names functions with dladdr).
extern "C" [[gnu::noinline]] CUresult luma_trace_test_oom_function(CUdeviceptr* p) {
  const CUresult r = cuMemAlloc_v2(p, 1 << 20);
  asm volatile("" ::: "memory");
  return r;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  auto arg = [&](int i) { return argc > i ? std::strtoul(argv[i], nullptr, 10) : 0ul; };
  init();
  if (mode == "pairs") {
    for (std::size_t i = 0; i < arg(2); ++i) {
      pair(i);
      say("pair " + std::to_string(i));
    }
  } else if (mode == "stacks") {
    std::vector<CUdeviceptr> live;
    for (std::size_t i = 0; i < arg(2); ++i) live.push_back(luma_trace_test_allocating_function(4096));
    for (CUdeviceptr p : live) check(cuMemFree_v2(p), "cuMemFree_v2");
  } else if (mode == "oom") {
    for (std::size_t i = 0; i < 10; ++i) pair(i);
    std::vector<CUdeviceptr> live;
    CUresult r = CUDA_SUCCESS;
    while (live.size() < arg(2)) {
      CUdeviceptr p = 0;
      r = luma_trace_test_oom_function(&p);
      if (r != CUDA_SUCCESS) break;
      live.push_back(p);
    }
    if (r != CUDA_ERROR_OUT_OF_MEMORY) {
      std::fprintf(stderr, "trace_prog: no out-of-memory error after %zu allocs (%d)\n", live.size(), r);
      return 1;
    }
    say("oom after " + std::to_string(live.size()));
    for (CUdeviceptr p : live) check(cuMemFree_v2(p), "cuMemFree_v2");
  } else if (mode == "fork") {
    CUdeviceptr a = 0;
    check(cuMemAlloc_v2(&a, 1 << 20), "cuMemAlloc_v2");
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) {
      CUdeviceptr c = 0;  // CUDA does not survive fork: an error, never a hang
      if (cuMemAlloc_v2(&c, 4096) == CUDA_SUCCESS) cuMemFree_v2(c);
      say("child done");
      std::exit(0);  // the full exit path: luma's destructor runs in the child too
    }
    int status = 0;
    waitpid(child, &status, 0);
    for (std::size_t i = 0; i < 10; ++i) pair(i);
    check(cuMemFree_v2(a), "cuMemFree_v2");
    say("parent done");
  } else if (mode == "threads") {
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < arg(2); ++t) {
      threads.emplace_back([n = arg(3)] {
        check(cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
        for (std::size_t i = 0; i < n; ++i) pair(i);
      });
    }
    for (auto& t : threads) t.join();
    say("threads done");
  } else {
    return 2;
  }
  return 0;
}
