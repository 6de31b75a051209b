// modes_lifecycle.cpp - the workload's modes about the life of a process that uses
// CUDA: exit from main, from a thread, while a call waits, in an atexit handler; fork,
// fork then exec, fork before luma served anything; exec with memory held.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

std::atomic<bool> g_exiting{false};

void atexit_handler() {
  void* p = nullptr;
  int r = A.alloc(&p, kMiB);
  if (r == 0) r = A.memset(p, 1, kMiB);
  if (r == 0) r = A.free(p);
  if (r != 0) {
    std::fprintf(stderr, "%s: atexit: handler alloc/memset/free returned %d\n", g_prog, r);
    std::fflush(nullptr);
    std::_Exit(kExitWrong);
  }
  std::printf("atexit: handler alloc/free ok\n");
  std::fflush(stdout);
}

}  // namespace

// Allocates CHUNK bytes, then becomes PROGRAM (execv, the same pid and start time; no exit
// handler runs, so luma's live record of this process is left behind: its readers must
// see that the process no longer publishes it).
int mode_exec_after_alloc(int argc, char** argv) {
  if (argc < 2) return kExitUsage;
  const size_t chunk = parse(argv[0], "CHUNK");
  void* p = nullptr;
  ok(A.alloc(&p, chunk), "exec-after-alloc: alloc");
  std::fflush(nullptr);
  execv(argv[1], argv + 1);
  fail("exec-after-alloc: execv", errno);
}

int mode_exit_main(int argc, char**) {
  if (argc != 0) return kExitUsage;
  void* p[8] = {};
  for (size_t i = 0; i < 8; ++i) ok(A.alloc(&p[i], (i + 1) * 4096), "alloc");
  for (size_t i = 0; i < 4; ++i) ok(A.free(p[i]), "free");
  std::printf("exit-main: returning from main with 4 blocks live\n");
  return 0;
}

int mode_exit_thread(int argc, char**) {
  if (argc != 0) return kExitUsage;
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([t] {
      for (uint64_t i = 0;; ++i) {
        void* p = nullptr;
        int r = A.alloc(&p, 4096 * static_cast<size_t>(t + 1));
        if (r == 0) r = A.free(p);
        if (r != 0 && !g_exiting.load()) fail("exit-thread: worker alloc/free", r);
        if (g_exiting.load()) std::this_thread::yield();
      }
    });
  }
  std::thread exiter([] {
    for (int i = 0; i < 1000; ++i) {
      void* p = nullptr;
      ok(A.alloc(&p, 8192), "alloc");
      ok(A.free(p), "free");
    }
    std::printf("exit-thread: calling exit(0) from a worker thread\n");
    std::fflush(stdout);
    g_exiting = true;
    std::exit(0);
  });
  exiter.join();  // never returns: exit() ends the process
  for (auto& w : workers) w.join();
  return kExitWrong;
}

// A call that never returns holds luma's lock when the program exits: a worker's
// allocation waits for GPU work that never finishes (the stand-in's gate is closed, as a
// kernel spinning on a host flag would never end), and main gives up and calls exit(0).
// The exit must not wait for that call (luma leaves the device out of its statistics).
// Stand-in only: skipped where luma_fake_set_gate_open does not exist.
int mode_exit_while_busy(int argc, char**) {
  if (argc != 0) return kExitUsage;
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");  // a runtime loads the driver
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto set_gate = lib == nullptr ? nullptr
                                 : reinterpret_cast<void (*)(int)>(dlsym(lib, "luma_fake_set_gate_open"));
  if (set_gate == nullptr) {
    std::printf("exit-while-busy: skipped (needs the stand-in driver)\n");
    return kExitSkip;
  }
  const size_t n = 30 * kMiB;
  static void* x = nullptr;
  ok(A.alloc(&x, n), "alloc X");
  set_gate(0);  // stream work queued from now on never starts
  ok(A.memset_async(x, 1, n, s), "memsetAsync X (never runs)");
  static std::atomic<bool> started{false};
  std::thread([n] {
    started = true;
    ok(A.free(x), "free X");
    void* y = nullptr;
    (void)A.alloc(&y, n);  // X's memory is the only fit: waits for the memset, forever
    std::printf("exit-while-busy: the allocation returned, which it cannot\n");
    std::_Exit(kExitWrong);
  }).detach();
  while (!started.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let it reach the wait
  std::printf("exit-while-busy: exit(0) while a worker waits inside an allocation\n");
  std::fflush(stdout);
  std::exit(0);
}

int mode_atexit(int argc, char**) {
  if (argc != 0) return kExitUsage;
  void* p = nullptr;
  ok(A.alloc(&p, 4096), "alloc");
  ok(A.free(p), "free");
  // Registered after CUDA came up, so it runs before the runtime's own teardown (atexit
  // handlers run in reverse order), as a program's handler that uses CUDA must be.
  std::atexit(atexit_handler);
  std::printf("atexit: main returning\n");
  return 0;
}

// A process in which luma started (a driver lookup, as a library loaded before fork
// makes) but served nothing yet forks; the child is served as a process of its own
// (Python multiprocessing workers) and is ended by SIGTERM, as a pool ends its workers.
// Run under luma the child's statistics must be written (with ended_by SIGTERM). The
// child prints its pid; the parent exits 0 when the child died by SIGTERM.
int mode_fork_before_serving(int argc, char**) {
  if (argc != 0) return kExitUsage;
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == nullptr) fail("dlopen libcuda.so.1", 0);
  using GetProcAddress = int (*)(const char*, void**, int, unsigned long long, int*);
  auto gpa = reinterpret_cast<GetProcAddress>(dlsym(driver, "cuGetProcAddress_v2"));
  if (gpa == nullptr) fail("dlsym cuGetProcAddress_v2", 0);
  void* fn = nullptr;
  int status = 0;
  gpa("cuMemAlloc", &fn, 13000, 0, &status);  // before cuInit: only a lookup
  int ready[2];
  if (pipe(ready) != 0) fail("pipe", errno);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) fail("fork", errno);
  if (pid == 0) {
    ::close(ready[0]);
    std::vector<void*> held;
    for (int i = 0; i < 8; ++i) {
      void* p = nullptr;
      ok(A.alloc(&p, 4096 * (i + 1)), "alloc in the child");
      held.push_back(p);
    }
    for (std::size_t i = 0; i < held.size(); i += 2) ok(A.free(held[i]), "free in the child");
    std::printf("fork-before-serving: child %d serving\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    if (::write(ready[1], "r", 1) != 1) std::_Exit(1);
    for (int i = 0; i < 1000; ++i) usleep(10 * 1000);  // ended by SIGTERM long before 10 s
    std::_Exit(1);
  }
  ::close(ready[1]);
  char c = 0;
  if (::read(ready[0], &c, 1) != 1) fail("the child never got ready", 0);
  kill(pid, SIGTERM);
  if (waitpid(pid, &status, 0) != pid) fail("waitpid", errno);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGTERM) fail("child not ended by SIGTERM", status);
  std::printf("fork-before-serving: child ended by SIGTERM\n");
  return 0;
}

int mode_fork(int argc, char**) {
  if (argc != 0) return kExitUsage;
  Tagged a{nullptr, 64 * 1024, 7};
  ok(A.alloc(&a.p, a.n), "alloc before fork");
  if (!write_tag(a)) fail("tag", 0);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) fail("fork", errno);
  if (pid == 0) {
    // CUDA initialised before fork cannot be used in the child (the real driver refuses);
    // the child must get an error or a working block, never a hang or a crash.
    void* q = nullptr;
    int r = A.alloc(&q, 4096);
    std::printf("fork: child alloc returned %d\n", r);
    std::fflush(stdout);
    std::exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) fail("waitpid", errno);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("fork: child status", status);
  std::vector<unsigned char> buf;
  std::string why = check_tag(a, buf);
  if (!why.empty()) fail(("fork: parent block after the child: " + why).c_str(), 0);
  ok(A.free(a.p), "free");
  void* p = nullptr;
  ok(A.alloc(&p, 4096), "alloc after fork");
  ok(A.free(p), "free after fork");
  std::printf("fork: parent ok\n");
  return 0;
}

int mode_fork_exec(int argc, char**) {
  if (argc != 0) return kExitUsage;
  void* p = nullptr;
  ok(A.alloc(&p, 4096), "alloc before fork");
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) fail("fork", errno);
  if (pid == 0) {
    char self[] = "/proc/self/exe";
    char loop[] = "loop", n[] = "100", size[] = "4096";
    char* args[] = {const_cast<char*>(g_prog), loop, n, size, nullptr};
    execv(self, args);
    std::_Exit(kExitUsage);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) fail("waitpid", errno);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("fork-exec: child status", status);
  ok(A.free(p), "free");
  std::printf("fork-exec: exec'd child ran its own CUDA ok\n");
  return 0;
}

}  // namespace luma::programs
