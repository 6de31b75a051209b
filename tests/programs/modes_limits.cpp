// modes_limits.cpp - the workload's modes about running out of memory: the device's
// capacity (oom), luma's memory limit (limit), and a limit shared by the processes of a
// limit_group (group-share, whose other process runs the hold mode).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

// Allocates chunks until the first failure, which must be out of memory; appends them to
// held and returns how many it got (bounded whatever the capacity).
size_t fill(size_t chunk, std::vector<void*>& held) {
  constexpr size_t kMaxChunks = 1 << 16;
  size_t got = 0;
  int last = 0;
  while (got < kMaxChunks) {
    void* p = nullptr;
    last = A.alloc(&p, chunk);
    if (last != 0) break;
    held.push_back(p);
    ++got;
  }
  if (got == kMaxChunks) fail("fill: never ran out of memory", 0);
  expect(last, A.oom_code, "alloc past the limit");
  return got;
}

}  // namespace

int mode_oom(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  size_t chunk = argc == 1 ? parse(argv[0], "CHUNK") : 64 * kMiB;
  constexpr size_t kMaxChunks = 1 << 16;  // bounds the loop whatever the capacity
  std::vector<void*> held;
  int last = 0;
  while (held.size() < kMaxChunks) {
    void* p = nullptr;
    last = A.alloc(&p, chunk);
    if (last != 0) break;
    held.push_back(p);
  }
  if (held.size() == kMaxChunks) fail("oom: never ran out of memory", 0);
  expect(last, A.oom_code, "alloc past capacity");
  if (held.empty()) fail("oom: not even one chunk fitted", last);
  for (void* p : held) ok(A.free(p), "free");
  void* p = nullptr;
  ok(A.alloc(&p, chunk), "alloc after freeing everything");
  ok(A.free(p), "free");
  std::printf("oom: out of memory after %zu chunks of %zu bytes (code %d); recovered\n",
              held.size(), chunk, last);
  return 0;
}

// Under a memory limit (LUMA_CONF memory_limit / memory_fraction): what cudaMemGetInfo
// says before, at and after the limit, and how many chunks fit. A small block is freed
// first, so its cached segment must be released before the last chunks fit.
int mode_limit(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  size_t chunk = argc == 1 ? parse(argv[0], "CHUNK") : 16 * kMiB;
  size_t f0 = 0, t0 = 0, f1 = 0, t1 = 0, f2 = 0, t2 = 0;
  ok(A.mem_info(&f0, &t0), "mem info");
  void* small = nullptr;
  ok(A.alloc(&small, 1000), "alloc small");
  ok(A.free(small), "free small");
  std::vector<void*> held;
  size_t n = fill(chunk, held);
  ok(A.mem_info(&f1, &t1), "mem info at the limit");
  for (void* p : held) ok(A.free(p), "free");
  ok(A.mem_info(&f2, &t2), "mem info after freeing");
  std::printf("limit: total %zu free %zu; %zu chunks of %zu; at the limit free %zu total %zu; "
              "after freeing free %zu total %zu\n", t0, f0, n, chunk, f1, t1, f2, t2);
  if (t0 != t1 || t1 != t2) fail("limit: total changed", 0);
  if (f0 > t0 || f1 > t1 || f2 > t2) fail("limit: free above total", 0);
  if (f1 >= chunk) fail("limit: free says another chunk fits, but the allocation failed", 0);
  return 0;
}

// limit_group member that holds K chunks until told to go (the group-share mode's
// other process): reports how many it got on READY_FD, then waits for EOF on HOLD_FD.
int mode_hold(int argc, char** argv) {
  if (argc != 4) return kExitUsage;
  size_t chunk = parse(argv[0], "CHUNK"), k = parse(argv[1], "K");
  int ready = static_cast<int>(parse(argv[2], "READY_FD"));
  int hold = static_cast<int>(parse(argv[3], "HOLD_FD"));
  alarm(120);  // never outlives a test that lost track of it
  std::vector<void*> held;
  for (size_t i = 0; i < k; ++i) {
    void* p = nullptr;
    ok(A.alloc(&p, chunk), "hold: alloc");
    held.push_back(p);
  }
  char line[32];
  int len = std::snprintf(line, sizeof line, "%zu\n", held.size());
  if (write(ready, line, static_cast<size_t>(len)) != len) fail("hold: write", errno);
  close(ready);
  char c = 0;
  while (read(hold, &c, 1) > 0) {
  }
  for (void* p : held) ok(A.free(p), "hold: free");
  return 0;
}

// Two processes of one limit_group (inherited LUMA_CONF): another process of this program
// holds K chunks; this one gets what is left under the group's limit; the other is then
// killed with SIGKILL (no exit handler runs) and this one gets its share. The test judges
// the counts (without a group each process has the whole limit, and nothing comes back).
int mode_group_share(int argc, char** argv) {
  if (argc != 2) return kExitUsage;
  size_t chunk = parse(argv[0], "CHUNK"), k = parse(argv[1], "K");
  int ready[2], hold[2];
  if (pipe(ready) != 0 || pipe(hold) != 0) fail("pipe", errno);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) fail("fork", errno);
  if (pid == 0) {
    close(ready[0]);
    close(hold[1]);
    std::string c = std::to_string(chunk), kk = std::to_string(k), r = std::to_string(ready[1]),
                h = std::to_string(hold[0]);
    char self[] = "/proc/self/exe", mode[] = "hold";
    char* args[] = {const_cast<char*>(g_prog), mode, c.data(), kk.data(), r.data(), h.data(), nullptr};
    execv(self, args);
    std::_Exit(kExitUsage);
  }
  close(ready[1]);
  close(hold[0]);
  char line[32] = {};
  ssize_t got = read(ready[0], line, sizeof line - 1);
  close(ready[0]);
  size_t member = got > 0 ? parse(std::string(line, static_cast<size_t>(got) - 1).c_str(), "member") : 0;
  if (member != k) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    fail("group-share: the member did not get its chunks", 0);
  }
  std::vector<void*> held;
  size_t mine = fill(chunk, held);
  kill(pid, SIGKILL);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) fail("waitpid", errno);
  close(hold[1]);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) fail("group-share: member status", status);
  size_t after = fill(chunk, held);
  for (void* p : held) ok(A.free(p), "free");
  std::printf("group-share: member held %zu chunks of %zu; this process got %zu; after the "
              "member was killed %zu more\n", member, chunk, mine, after);
  return 0;
}

}  // namespace luma::programs
