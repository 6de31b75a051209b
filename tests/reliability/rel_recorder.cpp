// rel_recorder.cpp - a program to be killed while luma records its trace: THREADS threads
// each make PAIRS allocations of varying size through the driver API, each freed at once,
// and after every completed pair (both calls returned) print one line
// "<thread id> <pointer> <size>" with a single write(2), so whatever reached the pipe
// before a SIGKILL is a pair that completed. reliability.py then checks that the trace
// holds every printed pair, in each thread's order.
// Usage: rel_recorder THREADS PAIRS
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "rel_common.h"

namespace {

const char* g_prog = "rel_recorder";
CUcontext g_ctx[luma::reliability::kMaxDevices] = {};

void pairs(int t, std::uint64_t n) {
  using namespace luma::reliability;
  if (cuCtxSetCurrent(g_ctx[0]) != CUDA_SUCCESS) die(g_prog, "cuCtxSetCurrent");
  const long tid = syscall(SYS_gettid);
  for (std::uint64_t i = 0; i < n; ++i) {
    // Sizes from 256 B to about 2.3 MiB, so the small and large pools both see events.
    const std::size_t size = 256 * (1 + (i * 13 + static_cast<std::uint64_t>(t)) % 9000);
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, size) != CUDA_SUCCESS) die(g_prog, "alloc");
    *static_cast<unsigned char*>(as_ptr(p)) = static_cast<unsigned char>(i);
    if (cuMemFree_v2(p) != CUDA_SUCCESS) die(g_prog, "free");
    char line[96];
    const int len = std::snprintf(line, sizeof line, "%ld 0x%llx %zu\n", tid,
                                  static_cast<unsigned long long>(p), size);
    if (write(STDOUT_FILENO, line, static_cast<std::size_t>(len)) != len) die(g_prog, "write");
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace luma::reliability;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s THREADS PAIRS\n", g_prog);
    return kExitUsage;
  }
  const std::uint64_t threads = parse_u64(g_prog, argv[1], "THREADS");
  const std::uint64_t n = parse_u64(g_prog, argv[2], "PAIRS");
  if (threads == 0 || threads > 64) return kExitUsage;
  bring_up(g_prog, g_ctx);
  std::vector<std::thread> pool;
  for (std::uint64_t t = 0; t < threads; ++t) pool.emplace_back(pairs, static_cast<int>(t), n);
  for (auto& th : pool) th.join();
  return kExitOk;
}
