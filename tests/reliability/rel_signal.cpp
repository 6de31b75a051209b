// rel_signal.cpp - a program that is stopped by a signal while it holds device memory:
// allocates and frees through the driver API (so luma has statistics), keeps 3 blocks
// live, prints "ready" and waits. With "handler" it first installs its own SIGTERM/SIGINT
// handler that exits with 3: luma must leave that disposition alone.
// Usage: rel_signal [handler]
#include <signal.h>
#include <unistd.h>

#include "rel_common.h"

namespace {
void on_signal(int) { std::exit(3); }  // exit, not _exit: statistics are printed at exit
}  // namespace

int main(int argc, char** argv) {
  using namespace luma::reliability;
  const char* prog = "rel_signal";
  if (argc == 2 && std::strcmp(argv[1], "handler") == 0) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
  }
  CUcontext ctx[kMaxDevices] = {};
  bring_up(prog, ctx);
  CUdeviceptr live[3] = {};
  for (int i = 0; i < 100; ++i) {
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 4096 * static_cast<std::size_t>(i % 5 + 1)) != CUDA_SUCCESS)
      die(prog, "alloc");
    if (i < 3) {
      live[i] = p;
    } else if (cuMemFree_v2(p) != CUDA_SUCCESS) {
      die(prog, "free");
    }
  }
  // Held on purpose until the signal: the statistics must show them live.
  std::printf("ready (%d blocks live)\n", live[0] && live[1] && live[2] ? 3 : 0);
  std::fflush(stdout);
  for (;;) pause();
}
