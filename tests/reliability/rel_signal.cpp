// rel_signal.cpp - a program stopped by SIGTERM/SIGINT while it holds device memory:
// allocates and frees through the driver API (so luma has statistics and trace events),
// keeps 3 blocks live, prints "ready" and waits for the signal. The mode says what the
// program does about signals:
//   default        nothing: the default disposition (dies by the signal)
//   handler        its own handler (exit 3) installed before its first CUDA call
//   late-handler   its own handler (exit 3) installed after CUDA is up (replacing luma's)
//   chain          after CUDA is up, a handler that writes "chained" and then calls the
//                  handler it replaced (or, if that was SIG_DFL, restores it and re-raises)
//   ignore         SIG_IGN for both before CUDA: the signal must change nothing
//   threads        4 threads keep allocating, tagging and freeing while it waits
//   fork           after CUDA is up, forks a child that prints "child ready PID" and waits
//   nocuda         never touches CUDA (luma must install nothing)
// Usage: rel_signal [MODE]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "rel_common.h"

namespace {

const char* g_prog = "rel_signal";
CUcontext g_ctx[luma::reliability::kMaxDevices] = {};
struct sigaction g_replaced[NSIG] = {};

void on_signal_exit(int) { std::exit(3); }  // exit, not _exit: statistics are printed at exit

void on_signal_chain(int sig) {
  static const char line[] = "chained\n";
  (void)!write(STDOUT_FILENO, line, sizeof line - 1);
  const struct sigaction& old = g_replaced[sig];
  if ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL) {
    signal(sig, SIG_DFL);
    raise(sig);
  } else if ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler != SIG_IGN) {
    old.sa_handler(sig);
  }
}

void install(void (*fn)(int), bool keep_replaced) {
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction sa {};
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, keep_replaced ? &g_replaced[sig] : nullptr);
  }
}

// Allocates, tags, checks and frees until the process ends.
void churn(int t) {
  using namespace luma::reliability;
  if (cuCtxSetCurrent(g_ctx[0]) != CUDA_SUCCESS) die(g_prog, "cuCtxSetCurrent");
  for (std::uint64_t i = 0;; ++i) {
    CUdeviceptr p = 0;
    const std::size_t n = 256 * (1 + (i * 7 + static_cast<std::uint64_t>(t)) % 64);
    if (cuMemAlloc_v2(&p, n) != CUDA_SUCCESS) die(g_prog, "alloc in a churning thread");
    const std::uint64_t id = (static_cast<std::uint64_t>(t) << 40) | i;
    write_tag(as_ptr(p), n, id);
    if (!check_tag(as_ptr(p), n, id).empty()) die(g_prog, "tag overwritten");
    if (cuMemFree_v2(p) != CUDA_SUCCESS) die(g_prog, "free in a churning thread");
  }
}

void hold_memory() {
  using namespace luma::reliability;
  CUdeviceptr live[3] = {};
  for (int i = 0; i < 100; ++i) {
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 4096 * static_cast<std::size_t>(i % 5 + 1)) != CUDA_SUCCESS)
      die(g_prog, "alloc");
    if (i < 3) {
      live[i] = p;
    } else if (cuMemFree_v2(p) != CUDA_SUCCESS) {
      die(g_prog, "free");
    }
  }
  // Held on purpose until the signal: the statistics must show them live.
  if (!(live[0] && live[1] && live[2])) die(g_prog, "no live blocks");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace luma::reliability;
  const std::string mode = argc >= 2 ? argv[1] : "default";
  if (mode == "handler") install(on_signal_exit, false);
  if (mode == "ignore") install(SIG_IGN, false);
  if (mode == "nocuda") {
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  bring_up(g_prog, g_ctx);
  hold_memory();
  if (mode == "late-handler") install(on_signal_exit, false);
  if (mode == "chain") install(on_signal_chain, true);
  std::vector<std::thread> threads;
  if (mode == "threads")
    for (int t = 0; t < 4; ++t) threads.emplace_back(churn, t);
  if (mode == "fork") {
    const pid_t child = fork();
    if (child < 0) die(g_prog, "fork");
    if (child == 0) {
      std::printf("child ready %d\n", static_cast<int>(getpid()));
      std::fflush(stdout);
      for (;;) pause();
    }
    // The parent reports the child's end, then waits for its own signal.
    int status = 0;
    waitpid(child, &status, 0);
    std::printf("child ended: %s %d\n", WIFSIGNALED(status) ? "signal" : "exit",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    std::fflush(stdout);
  }
  std::printf("ready (3 blocks live)\n");
  std::fflush(stdout);
  for (;;) pause();
}
