// workload.cpp - the test workload: one program, compiled once per way of reaching CUDA
// (api.h), that a test runs with or without LD_PRELOAD=libluma.so and judges by its exit
// code and output. Each mode checks its own results:
//   exit 0 success, 1 wrong result (message on stderr), 2 bad usage or setup,
//   3 hazard observed (CORRUPTED), 77 skipped (not enough devices; Meson's skip code).
// Modes are deterministic and fast under the stand-ins' defaults. A mode never trusts
// luma: it checks what a CUDA program would check.
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <barrier>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "api.h"

namespace luma::programs {
namespace {

constexpr int kExitWrong = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCorrupted = 3;
constexpr int kExitSkip = 77;
constexpr size_t kMiB = size_t{1} << 20;
// Long enough that the stand-in's slow memset is still queued when the program has freed,
// reallocated and rewritten the block (microseconds); short enough for a fast test.
constexpr uint64_t kHazardDelayUs = 100000;

const Api& A = api();
const char* g_prog = "prog";

[[noreturn]] void fail(const char* what, int code) {
  std::fprintf(stderr, "%s: %s: FAILED (code %d)\n", g_prog, what, code);
  std::fflush(nullptr);
  std::_Exit(kExitWrong);
}

void expect(int got, int want, const char* what) {
  if (got != want) {
    std::fprintf(stderr, "%s: %s returned %d, expected %d\n", g_prog, what, got, want);
    std::fflush(nullptr);
    std::_Exit(kExitWrong);
  }
}

void ok(int r, const char* what) {
  if (r != 0) fail(what, r);
}

size_t parse(const char* s, const char* what) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0') {
    std::fprintf(stderr, "%s: %s must be a number, got '%s'\n", g_prog, what, s);
    std::exit(kExitUsage);
  }
  return static_cast<size_t>(v);
}

// Fills a block with a tag (memset) and a header (memcpy HtoD) that name its owner, and
// checks both with a DtoH copy before it is freed.
struct Tagged {
  void* p = nullptr;
  size_t n = 0;
  uint64_t id = 0;
};

unsigned char tag_of(uint64_t id) { return static_cast<unsigned char>((id * 131) % 251 + 1); }

bool write_tag(Tagged& b) {
  if (A.memset(b.p, tag_of(b.id), b.n) != 0) return false;
  size_t hn = b.n < sizeof b.id ? b.n : sizeof b.id;
  return A.htod(b.p, &b.id, hn) == 0;
}

// Returns an empty string when the block holds its tag, else what was wrong.
std::string check_tag(const Tagged& b, std::vector<unsigned char>& buf) {
  buf.resize(b.n);
  if (int r = A.dtoh(buf.data(), b.p, b.n)) return "dtoh returned " + std::to_string(r);
  size_t hn = b.n < sizeof b.id ? b.n : sizeof b.id;
  if (std::memcmp(buf.data(), &b.id, hn) != 0) return "header overwritten";
  unsigned char t = tag_of(b.id);
  for (size_t i = hn; i < b.n; ++i) {
    if (buf[i] != t) {
      return "byte " + std::to_string(i) + " is " + std::to_string(buf[i]) + ", expected " +
             std::to_string(t);
    }
  }
  return {};
}

size_t random_size(std::mt19937_64& rng) {
  uint64_t k = rng() % 10;
  if (k < 5) return 1 + rng() % 4096;
  if (k < 9) return 4096 + rng() % (64 * 1024);
  return 64 * 1024 + rng() % kMiB;
}

int device_count() {
  int n = 0;
  ok(A.device_count(&n), "device count");
  return n;
}

// ---- modes ------------------------------------------------------------------------------

int mode_loop(int argc, char** argv) {
  if (argc != 2) return kExitUsage;
  size_t n = parse(argv[0], "N"), size = parse(argv[1], "SIZE");
  for (size_t i = 0; i < n; ++i) {
    void* p = nullptr;
    ok(A.alloc(&p, size), "alloc");
    ok(A.free(p), "free");
  }
  std::printf("loop: %zu alloc/free pairs of %zu bytes ok\n", n, size);
  return 0;
}

// N alloc/free pairs of SIZE in the last of K contexts, each of the others holding a block
// (driver API: contexts of the program's own; else skipped): what a free costs when the
// allocator that owns the block is not the first one asked.
int mode_loop_contexts(int argc, char** argv) {
  if (argc != 3) return kExitUsage;
  const size_t n = parse(argv[0], "N"), k = parse(argv[1], "K"), size = parse(argv[2], "SIZE");
  if (A.ctx_create == nullptr) {
    std::printf("loop-contexts: the %s API makes no contexts of its own: skipped\n", A.name);
    return kExitSkip;
  }
  if (k == 0 || k > 64) return kExitUsage;
  void* first = nullptr;
  ok(A.alloc(&first, size), "alloc in the primary context");
  std::vector<void*> contexts, held;
  for (size_t c = 1; c < k; ++c) {
    void* ctx = nullptr;
    ok(A.ctx_create(&ctx), "context create");  // current from now on
    void* p = nullptr;
    ok(A.alloc(&p, size), "alloc in a created context");
    contexts.push_back(ctx);
    held.push_back(p);
  }
  for (size_t i = 0; i < n; ++i) {
    void* p = nullptr;
    ok(A.alloc(&p, size), "alloc");
    ok(A.free(p), "free");
  }
  for (size_t c = contexts.size(); c-- > 0;) {
    ok(A.free(held[c]), "free in a created context");
    ok(A.ctx_destroy(contexts[c]), "context destroy");
  }
  ok(A.free(first), "free in the primary context");
  std::printf("loop-contexts: %zu pairs of %zu bytes in the last of %zu contexts ok\n", n, size, k);
  return 0;
}

int mode_loop_mixed(int argc, char** argv) {
  if (argc != 1) return kExitUsage;
  size_t n = parse(argv[0], "N");
  static const size_t kSizes[] = {200, 512, 1000, 4096, 8192, 65536, kMiB, 3 * kMiB};
  constexpr size_t kLive = 4;  // a few blocks live at once, so sizes interleave
  void* live[kLive] = {};
  for (size_t i = 0; i < n; ++i) {
    size_t slot = i % kLive;
    if (live[slot] != nullptr) ok(A.free(live[slot]), "free");
    ok(A.alloc(&live[slot], kSizes[i % (sizeof kSizes / sizeof kSizes[0])]), "alloc");
  }
  for (void* p : live) ok(A.free(p), "free");
  std::printf("loop-mixed: %zu allocations of mixed sizes ok\n", n);
  return 0;
}

int mode_stress(int argc, char** argv) {
  if (argc != 2) return kExitUsage;
  size_t threads = parse(argv[0], "THREADS"), n = parse(argv[1], "N");
  if (threads == 0 || threads > 256) return kExitUsage;
  int devices = device_count();
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      std::vector<Tagged> live;
      std::vector<unsigned char> buf;
      if (A.set_device(static_cast<int>(t % static_cast<size_t>(devices))) != 0) {
        ++failures;
        return;
      }
      auto release = [&](size_t k) {
        std::string why = check_tag(live[k], buf);
        if (!why.empty()) {
          std::fprintf(stderr, "%s: stress: thread %zu block %" PRIu64 " (%zu bytes): %s\n",
                       g_prog, t, live[k].id, live[k].n, why.c_str());
          ++failures;
        }
        if (int r = A.free(live[k].p)) {
          std::fprintf(stderr, "%s: stress: free returned %d\n", g_prog, r);
          ++failures;
        }
        live[k] = live.back();
        live.pop_back();
      };
      for (size_t i = 0; i < n; ++i) {
        if (live.size() < 16 && (live.empty() || rng() % 3 != 0)) {
          Tagged b;
          b.n = random_size(rng);
          b.id = (static_cast<uint64_t>(t) << 32) | i;
          if (int r = A.alloc(&b.p, b.n)) {
            std::fprintf(stderr, "%s: stress: alloc(%zu) returned %d\n", g_prog, b.n, r);
            ++failures;
            return;
          }
          if (!write_tag(b)) {
            ++failures;
            return;
          }
          live.push_back(b);
        } else {
          release(rng() % live.size());
        }
      }
      while (!live.empty()) release(live.size() - 1);
    });
  }
  for (auto& th : pool) th.join();
  if (failures.load() != 0) {
    std::fprintf(stderr, "%s: stress: %d failures\n", g_prog, failures.load());
    return kExitWrong;
  }
  std::printf("stress: %zu threads x %zu operations, every block checked ok\n", threads, n);
  return 0;
}

// The stand-in driver's delay makes the stream's memset slow; on a real GPU the symbol is
// absent and nothing changes (tests/gpu has the kernel version of this hazard).
void slow_down_stand_in_streams() {
  if (std::getenv("LUMA_FAKE_DELAY_US") != nullptr) return;  // the caller chose
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return;
  auto set_delay = reinterpret_cast<void (*)(uint64_t)>(dlsym(lib, "luma_fake_set_delay_us"));
  if (set_delay != nullptr) set_delay(kHazardDelayUs);
  dlclose(lib);
}

int mode_hazard(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const size_t n = kMiB;
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  slow_down_stand_in_streams();
  void* x = nullptr;
  ok(A.alloc(&x, n), "alloc X");
  ok(A.memset(x, 0, n), "memset X");
  ok(A.device_sync(), "device sync");
  ok(A.memset_async(x, 0xAA, n, s), "memsetAsync X on the non-blocking stream");
  ok(A.free(x), "free X");  // cudaFree promises the memset is done when it returns
  void* y = nullptr;
  ok(A.alloc(&y, n), "alloc Y");
  ok(A.memset(y, 0x55, n), "memset Y");
  ok(A.stream_sync(s), "stream sync");
  ok(A.device_sync(), "device sync");
  std::vector<unsigned char> buf(n);
  ok(A.dtoh(buf.data(), y, n), "dtoh Y");
  size_t old = 0, other = 0;
  for (unsigned char c : buf) {
    if (c == 0xAA) ++old;
    else if (c != 0x55) ++other;
  }
  ok(A.free(y), "free Y");
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("hazard: Y %s X\n", x == y ? "reuses" : "differs from");
  if (old != 0) {
    std::printf("hazard: CORRUPTED (%zu bytes of Y hold the freed block's late write)\n", old);
    return kExitCorrupted;
  }
  if (other != 0) {
    std::fprintf(stderr, "%s: hazard: %zu bytes of Y hold neither pattern\n", g_prog, other);
    return kExitWrong;
  }
  std::printf("hazard: CLEAN\n");
  return 0;
}

// Stream order: ROUNDS rounds of a block written by a slow memsetAsync on the legacy
// stream, freed, and allocated again at once for a second memsetAsync on the same stream,
// then checked. With every operation in the legacy stream's order the second write runs
// after the first whatever block the allocator hands out, so the data is always right; an
// allocator that knows this hands the same block back without waiting for the first write
// (luma: stream-ordered reuse). With `second-stream`, the program first makes a
// non-blocking stream (it uses it for nothing): the order no longer holds for an
// allocator that cannot see which stream a launch uses, and the fence is back. Prints how
// many rounds got the freed block back.
int mode_stream_order(int argc, char** argv) {
  if (argc > 2) return kExitUsage;
  const size_t rounds = argc >= 1 ? parse(argv[0], "ROUNDS") : 8;
  const bool second = argc >= 2 && std::strcmp(argv[1], "second-stream") == 0;
  if (argc >= 2 && !second) return kExitUsage;
  void* other = nullptr;
  if (second) ok(A.stream_create(&other, true), "stream create (non-blocking)");
  slow_down_stand_in_streams();
  const size_t n = kMiB;
  std::vector<unsigned char> buf(n);
  size_t same = 0;
  for (size_t r = 0; r < rounds; ++r) {
    void* x = nullptr;
    void* y = nullptr;
    ok(A.alloc(&x, n), "alloc X");
    ok(A.memset_async(x, 0xAA, n, nullptr), "slow memsetAsync X on the legacy stream");
    ok(A.free(x), "free X");
    ok(A.alloc(&y, n), "alloc Y");
    ok(A.memset_async(y, static_cast<int>(r & 0x3F), n, nullptr), "memsetAsync Y on the legacy stream");
    ok(A.stream_sync(nullptr), "legacy stream sync");
    ok(A.dtoh(buf.data(), y, n), "dtoh Y");
    for (unsigned char c : buf)
      if (c != static_cast<unsigned char>(r & 0x3F)) fail("stream-order: Y holds another write", 0);
    same += x == y ? 1 : 0;
    ok(A.free(y), "free Y");
  }
  if (other != nullptr) ok(A.stream_destroy(other), "stream destroy");
  std::printf("stream-order: %zu of %zu rounds got the freed block back; data right\n", same, rounds);
  return 0;
}

// Many streams: luma skips the fence event of a non-blocking stream the driver
// reports idle. Round 1 frees and reallocates with every stream idle (a fence where no
// stream needs an event); round 2 queues a slow write to the new block on one stream that
// was idle at that fence, frees it and reallocates: the block must not be handed out (or
// written) before the slow write ran. Round 3 frees with every stream idle, then queues
// slow work on another buffer: the freed block may be reused at once, and stays intact.
int mode_hazard_streams(int argc, char** argv) {
  if (argc != 1) return kExitUsage;
  const size_t count = parse(argv[0], "STREAMS");
  if (count < 1 || count > 4096) return kExitUsage;
  const size_t n = 16 * kMiB;  // a segment each: a freed block is reused only after its fence
  std::vector<void*> streams(count, nullptr);
  for (void*& s : streams) ok(A.stream_create(&s, true), "stream create (non-blocking)");
  void* busy = streams[count / 2];
  slow_down_stand_in_streams();
  size_t corrupted = 0, other = 0;
  auto check = [&](void* p) {
    std::vector<unsigned char> buf(n);
    ok(A.dtoh(buf.data(), p, n), "dtoh");
    for (unsigned char c : buf) {
      if (c == 0xAA) ++corrupted;
      else if (c != 0x55) ++other;
    }
  };
  // Round 1: every stream idle.
  void* x = nullptr;
  ok(A.alloc(&x, n), "alloc X");
  ok(A.free(x), "free X");
  void* y = nullptr;
  ok(A.alloc(&y, n), "alloc Y");
  ok(A.memset(y, 0, n), "memset Y");
  ok(A.device_sync(), "device sync");
  // Round 2: one stream busy with a write to Y when Y is freed.
  ok(A.memset_async(y, 0xAA, n, busy), "memsetAsync Y on one of the streams");
  ok(A.free(y), "free Y");
  void* z = nullptr;
  ok(A.alloc(&z, n), "alloc Z");
  ok(A.memset(z, 0x55, n), "memset Z");
  for (void* s : streams) ok(A.stream_sync(s), "stream sync");
  ok(A.device_sync(), "device sync");
  check(z);
  std::printf("hazard-streams: Z %s Y\n", z == y ? "reuses" : "differs from");
  // Round 3: Z freed with every stream idle, then slow work elsewhere on the same stream.
  void* q = nullptr;
  ok(A.alloc(&q, n), "alloc Q");
  ok(A.free(z), "free Z");
  ok(A.memset_async(q, 0xAA, n, busy), "memsetAsync Q after the free");
  void* w = nullptr;
  ok(A.alloc(&w, n), "alloc W");
  ok(A.memset(w, 0x55, n), "memset W");
  for (void* s : streams) ok(A.stream_sync(s), "stream sync");
  check(w);
  ok(A.free(w), "free W");
  ok(A.free(q), "free Q");
  for (void* s : streams) ok(A.stream_destroy(s), "stream destroy");
  if (corrupted != 0) {
    std::printf("hazard-streams: CORRUPTED (%zu bytes hold a freed block's late write)\n", corrupted);
    return kExitCorrupted;
  }
  if (other != 0) {
    std::fprintf(stderr, "%s: hazard-streams: %zu bytes hold neither pattern\n", g_prog, other);
    return kExitWrong;
  }
  std::printf("hazard-streams: CLEAN\n");
  return 0;
}

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

int mode_invalid_free(int argc, char**) {
  if (argc != 0) return kExitUsage;
  void* p = nullptr;
  ok(A.alloc(&p, kMiB), "alloc");
  int host = 0;
  expect(A.free(static_cast<char*>(p) + 256), A.invalid_code, "free(interior pointer)");
  expect(A.free(&host), A.invalid_code, "free(unknown pointer)");
  expect(A.free(p), 0, "free");
  expect(A.free(p), A.invalid_code, "free(freed pointer)");
  expect(A.free(nullptr), 0, "free(nullptr)");
  void* z = reinterpret_cast<void*>(1);
  int r = A.alloc(&z, 0);
  if (A.zero_size_ok) {
    expect(r, 0, "alloc(0)");
    if (z != nullptr) fail("alloc(0) did not return a null pointer", 0);
  } else {
    expect(r, A.invalid_code, "alloc(0)");
  }
  std::printf("invalid-free: interior, unknown and double free -> %d; free(nullptr) -> 0\n",
              A.invalid_code);
  return 0;
}

int mode_two_devices(int argc, char**) {
  if (argc != 0) return kExitUsage;
  int devices = device_count();
  if (devices < 2) {
    std::printf("two-devices: needs 2 devices, found %d: skipped\n", devices);
    return kExitSkip;
  }
  Tagged a{nullptr, 3 * kMiB + 100, 1}, b{nullptr, 5000, 2};
  ok(A.set_device(0), "set device 0");
  ok(A.alloc(&a.p, a.n), "alloc on device 0");
  if (!write_tag(a)) fail("tag on device 0", 0);
  ok(A.set_device(1), "set device 1");
  ok(A.alloc(&b.p, b.n), "alloc on device 1");
  if (!write_tag(b)) fail("tag on device 1", 0);
  std::vector<unsigned char> buf;
  if (!check_tag(a, buf).empty() || !check_tag(b, buf).empty()) fail("tags", 0);
  int ra = -1, rb = -1;
  std::thread t([&] {
    // Another thread, with the other device current, frees each block.
    if (A.set_device(1) == 0) ra = A.free(a.p);
    if (A.set_device(0) == 0) rb = A.free(b.p);
  });
  t.join();
  expect(ra, 0, "free of a device-0 block with device 1 current");
  expect(rb, 0, "free of a device-1 block with device 0 current");
  for (int d = 0; d < 2; ++d) {
    ok(A.set_device(d), "set device");
    void* p = nullptr;
    ok(A.alloc(&p, kMiB), "alloc again");
    ok(A.free(p), "free again");
  }
  std::printf("two-devices: allocated on 0 and 1, freed from another thread ok\n");
  return 0;
}

int mode_meminfo(int argc, char**) {
  if (argc != 0) return kExitUsage;
  size_t f0 = 0, t0 = 0, f1 = 0, t1 = 0, f2 = 0, t2 = 0;
  ok(A.mem_info(&f0, &t0), "mem info");
  size_t n = 256 * kMiB;
  if (n > f0 / 2) n = f0 / 2;
  void* p = nullptr;
  ok(A.alloc(&p, n), "alloc");
  ok(A.mem_info(&f1, &t1), "mem info");
  ok(A.free(p), "free");
  ok(A.mem_info(&f2, &t2), "mem info");
  std::printf("meminfo: total %zu; free before %zu, with %zu allocated %zu, after free %zu\n",
              t0, f0, n, f1, f2);
  if (t0 != t1 || t1 != t2) fail("meminfo: total changed", 0);
  if (f1 + n > f0) fail("meminfo: allocated memory not reported as used", 0);
  if (f2 < f1) fail("meminfo: free memory shrank after free", 0);
  return 0;
}

int mode_exit_main(int argc, char**) {
  if (argc != 0) return kExitUsage;
  void* p[8] = {};
  for (size_t i = 0; i < 8; ++i) ok(A.alloc(&p[i], (i + 1) * 4096), "alloc");
  for (size_t i = 0; i < 4; ++i) ok(A.free(p[i]), "free");
  std::printf("exit-main: returning from main with 4 blocks live\n");
  return 0;
}

std::atomic<bool> g_exiting{false};

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

int mode_threads_first(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  size_t threads = argc == 1 ? parse(argv[0], "THREADS") : 16;
  if (threads == 0 || threads > 256) return kExitUsage;
  std::barrier start(static_cast<std::ptrdiff_t>(threads));
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();  // every thread's first CUDA call at once
      Tagged b{nullptr, 65536 + t * 512, 100 + t};
      if (A.alloc(&b.p, b.n) != 0 || !write_tag(b)) {
        ++failures;
        return;
      }
      std::vector<unsigned char> buf;
      if (!check_tag(b, buf).empty()) ++failures;
      if (A.free(b.p) != 0) ++failures;
    });
  }
  for (auto& th : pool) th.join();
  if (failures.load() != 0) fail("threads-first", failures.load());
  std::printf("threads-first: %zu threads made their first CUDA call at once ok\n", threads);
  return 0;
}

int mode_async(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  size_t rounds = argc == 1 ? parse(argv[0], "ROUNDS") : 100;
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create");
  std::vector<unsigned char> buf(64 * 1024);
  for (size_t i = 0; i < rounds; ++i) {
    size_t n = 1024 + (i % 16) * 4096;
    void* p = nullptr;
    ok(A.alloc_async(&p, n, s), "allocAsync");
    int v = static_cast<int>(i % 200) + 1;
    ok(A.memset_async(p, v, n, s), "memsetAsync");
    ok(A.dtoh_async(buf.data(), p, n, s), "memcpyAsync DtoH");
    ok(A.free_async(p, s), "freeAsync");
    ok(A.stream_sync(s), "stream sync");
    for (size_t k = 0; k < n; ++k) {
      if (buf[k] != v) fail("async: data", static_cast<int>(k));
    }
  }
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("async: %zu stream-ordered alloc/use/free rounds ok\n", rounds);
  return 0;
}

// The device's memory goes with its reset (cudaDeviceReset / cuDevicePrimaryCtxReset_v2):
// blocks from before are invalid, new ones work. Under luma the cache must not hand out
// the memory that went (the stand-in unmapped it: a stale block faults or fails its tag).
// Stale pointers are freed before anything new is allocated: afterwards the driver may
// have given their address to a new allocation, and freeing it would free that one.
int mode_reset(int argc, char**) {
  if (argc != 0) return kExitUsage;
  Tagged a{nullptr, 4096, 1}, b{nullptr, 3 * kMiB, 2}, c{nullptr, 4096, 3}, d{nullptr, 3 * kMiB, 4};
  ok(A.alloc(&a.p, a.n), "alloc before the reset");
  ok(A.alloc(&b.p, b.n), "alloc before the reset");
  if (!write_tag(a) || !write_tag(b)) fail("tag before the reset", 0);
  ok(A.free(b.p), "free before the reset");  // cached by luma: must not come back
  ok(A.device_reset(), "device reset");
  const int stale = A.free(a.p);
  expect(stale, A.invalid_code, "free of a block from before the reset");
  ok(A.alloc(&c.p, c.n), "alloc after the reset");
  ok(A.alloc(&d.p, d.n), "alloc after the reset");
  if (!write_tag(c) || !write_tag(d)) fail("tag after the reset", 0);
  std::vector<unsigned char> buf;
  if (std::string e = check_tag(c, buf); !e.empty()) fail(e.c_str(), 0);
  if (std::string e = check_tag(d, buf); !e.empty()) fail(e.c_str(), 0);
  ok(A.free(c.p), "free after the reset");
  ok(A.free(d.p), "free after the reset");
  std::printf("reset: memory from before the reset is gone (free -> %d), new blocks work\n", stale);
  return 0;
}

// Contexts the program makes and destroys itself (driver API): each destruction takes
// its memory; the next context is served afresh, as is the primary context after its last
// release destroyed it and a retain brought it back.
int mode_contexts(int argc, char**) {
  if (argc != 0) return kExitUsage;
  if (A.ctx_create == nullptr) {
    std::printf("contexts: the %s API makes no contexts of its own: skipped\n", A.name);
    return kExitSkip;
  }
  std::vector<unsigned char> buf;
  for (uint64_t round = 0; round < 3; ++round) {
    void* ctx = nullptr;
    ok(A.ctx_create(&ctx), "context create");
    Tagged x{nullptr, 8192, 10 + round}, y{nullptr, 2 * kMiB, 20 + round};
    ok(A.alloc(&x.p, x.n), "alloc in a created context");
    ok(A.alloc(&y.p, y.n), "alloc in a created context");
    if (!write_tag(x) || !write_tag(y)) fail("tag in a created context", 0);
    if (std::string e = check_tag(x, buf); !e.empty()) fail(e.c_str(), 0);
    ok(A.free(y.p), "free in a created context");  // cached by luma when it serves
    ok(A.ctx_destroy(ctx), "context destroy");
    expect(A.free(x.p) != 0, 1, "free of a block of a destroyed context fails");
  }
  // The primary context: retained once more, released twice -> destroyed; retained again.
  Tagged p{nullptr, 4096, 30}, q{nullptr, 4096, 31};
  ok(A.alloc(&p.p, p.n), "alloc in the primary context");
  if (!write_tag(p)) fail("tag in the primary context", 0);
  ok(A.primary_release(), "primary context release");  // the program's own retain
  ok(A.primary_retain(), "primary context retain");
  expect(A.free(p.p) != 0, 1, "free of a block of the destroyed primary context fails");
  ok(A.alloc(&q.p, q.n), "alloc after the primary context came back");
  if (!write_tag(q)) fail("tag after the primary context came back", 0);
  if (std::string e = check_tag(q, buf); !e.empty()) fail(e.c_str(), 0);
  ok(A.free(q.p), "free after the primary context came back");
  std::printf("contexts: 3 created and destroyed, primary destroyed and back: ok\n");
  return 0;
}

// Contexts made and destroyed one after another, more of them than luma has slots for
// contexts alive at once: each is served like the first (only contexts alive at the same
// time may be limited). Two pairs per context, so a cache serves the second from the first.
int mode_many_contexts(int argc, char** argv) {
  if (argc != 1) return kExitUsage;
  if (A.ctx_create == nullptr) {
    std::printf("many-contexts: the %s API makes no contexts of its own: skipped\n", A.name);
    return kExitSkip;
  }
  const uint64_t rounds = parse(argv[0], "N");
  std::vector<unsigned char> buf;
  for (uint64_t round = 0; round < rounds; ++round) {
    void* ctx = nullptr;
    ok(A.ctx_create(&ctx), "context create");
    for (int pair = 0; pair < 2; ++pair) {
      Tagged x{nullptr, 8192, 100 + round};
      ok(A.alloc(&x.p, x.n), "alloc in a created context");
      if (!write_tag(x)) fail("tag in a created context", 0);
      if (std::string e = check_tag(x, buf); !e.empty()) fail(e.c_str(), 0);
      ok(A.free(x.p), "free in a created context");
    }
    ok(A.ctx_destroy(ctx), "context destroy");
  }
  std::printf("many-contexts: %llu created, used and destroyed: ok\n",
              static_cast<unsigned long long>(rounds));
  return 0;
}

// cuMemGetAddressRange of any byte of an allocation names a driver allocation that holds
// all of it: the range a program pairs with an IPC handle (docs/cuda-facts.md). Under luma
// that is the segment the block was carved from, as the driver describes it (the handle of
// its base maps the whole segment, so base + offset lands in the block).
int mode_address_range(int argc, char**) {
  if (argc != 0) return kExitUsage;
  if (A.address_range == nullptr) {
    std::printf("address-range: the %s API has no cuMemGetAddressRange: skipped\n", A.name);
    return kExitSkip;
  }
  constexpr size_t kSize = 5000;
  void* p[3] = {};
  for (void*& x : p) ok(A.alloc(&x, kSize), "alloc");
  for (void* x : p) {
    void* first_base = nullptr;
    size_t first_size = 0;
    for (size_t off : {size_t{0}, size_t{1}, size_t{100}, kSize - 1}) {
      void* base = nullptr;
      size_t size = 0;
      ok(A.address_range(static_cast<char*>(x) + off, &base, &size), "address range");
      const auto b = reinterpret_cast<uintptr_t>(base), o = reinterpret_cast<uintptr_t>(x);
      if (o < b || o + kSize > b + size) fail("address range does not hold the allocation", 0);
      if (off == 0) {
        first_base = base;
        first_size = size;
      } else if (base != first_base || size != first_size) {
        fail("two bytes of one allocation name different ranges", 0);
      }
    }
  }
  for (void* x : p) ok(A.free(x), "free");
  std::printf("address-range: every byte of 3 allocations names one range holding it\n");
  return 0;
}

// cudaFreeAsync / cuMemFreeAsync of memory from cudaMalloc / cuMemAlloc, which CUDA allows:
// three neighbouring blocks, the first two freed stream-ordered, and the third must keep its
// data and its memory (under luma all three share a segment, and the first is its base: a
// stream-ordered free handed to the driver would free the segment under the third). A
// block allocated afterwards works; an interior pointer is refused as the driver refuses it.
int mode_free_async_cached(int argc, char**) {
  if (argc != 0) return kExitUsage;
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  Tagged b{nullptr, 4096, 11}, c{nullptr, 4096, 12}, d{nullptr, 4096, 13};
  for (Tagged* t : {&b, &c, &d}) {
    ok(A.alloc(&t->p, t->n), "alloc");
    if (!write_tag(*t)) fail("write tag", 0);
  }
  ok(A.memset_async(c.p, 7, c.n, s), "memsetAsync of the block freed next");
  ok(A.free_async(c.p, s), "freeAsync of a cudaMalloc block");
  ok(A.free_async(b.p, s), "freeAsync of a cudaMalloc block");
  expect(A.free_async(static_cast<char*>(d.p) + 256, s), A.invalid_code, "freeAsync of an interior pointer");
  ok(A.stream_sync(s), "stream sync");
  std::vector<unsigned char> buf;
  if (std::string why = check_tag(d, buf); !why.empty()) {
    std::fprintf(stderr, "%s: free-async: the neighbour lost its data: %s\n", g_prog, why.c_str());
    return kExitWrong;
  }
  Tagged e{nullptr, 4096, 14};
  ok(A.alloc(&e.p, e.n), "alloc after the stream-ordered frees");
  if (!write_tag(e)) fail("write tag", 0);
  if (std::string why = check_tag(e, buf); !why.empty()) fail("free-async: new block", 0);
  ok(A.free(e.p), "free");
  ok(A.free(d.p), "free");
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("free-async: stream-ordered frees of cached blocks ok, the neighbour intact\n");
  return 0;
}

// ---- IPC and stream capture as real programs use them (driver API) --------------------

// The driver-API calls of api.h a mode needs, or nullptr after printing why it skips.
const DriverCalls* driver_calls(const char* mode) {
  if (A.driver == nullptr)
    std::printf("%s: the %s API has no IPC or capture entry points: skipped\n", mode, A.name);
  return A.driver;
}

std::string to_hex(const unsigned char* bytes, size_t n) {
  std::string s;
  char two[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(two, sizeof two, "%02x", bytes[i]);
    s += two;
  }
  return s;
}

bool from_hex(const std::string& hex, unsigned char* bytes, size_t n) {
  if (hex.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    bytes[i] = static_cast<unsigned char>(v);
  }
  return true;
}

// This program again, in peer MODE, as UCX or NCCL run their second rank: a new process,
// since a child forked after cuInit cannot use CUDA. It inherits the environment
// (LD_PRELOAD included); its stdin and stdout are pipes to this process, its stderr is ours.
class Peer {
 public:
  explicit Peer(const char* mode) {
    std::signal(SIGPIPE, SIG_IGN);  // a peer that dies early must not kill the exporter
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) fail("pipe", errno);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
    std::string name = g_prog;
    char* argv[] = {name.data(), const_cast<char*>(mode), nullptr};
    int rc = posix_spawn(&pid_, "/proc/self/exe", &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    if (rc != 0) fail("posix_spawn of the peer", rc);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() { (void)finish(); }

  void send(const std::string& text) {
    size_t done = 0;
    while (to_ >= 0 && done < text.size()) {
      ssize_t w = write(to_, text.data() + done, text.size() - done);
      if (w <= 0) break;  // the peer is gone; its exit code says why
      done += static_cast<size_t>(w);
    }
  }
  // One line from the peer's stdout ("" when it closed it).
  std::string read_line() {
    char line[256];
    if (from_ == nullptr || std::fgets(line, sizeof line, from_) == nullptr) return {};
    return line;
  }
  // Closes its stdin and waits: its exit code (-1: killed by a signal).
  int finish() {
    if (pid_ <= 0) return exit_code_;
    if (to_ >= 0) close(to_);
    to_ = -1;
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (from_ != nullptr) std::fclose(from_);
    from_ = nullptr;
    pid_ = 0;
    return exit_code_;
  }

 private:
  pid_t pid_ = 0;
  int to_ = -1;
  FILE* from_ = nullptr;
  int exit_code_ = -1;
};

// The reply a peer writes into block `id`: another tag and header.
constexpr uint64_t kReplyId = 100000;

// UCX / Open MPI / NCCL: each buffer is shared as (handle of the range base, offset,
// length), the range from cuMemGetAddressRange, the handle of its base; the peer keeps
// what it opened in a cache keyed by (range base, BUFFER_ID), as UCX does, adds the
// offset, checks the exporter's bytes and writes its reply; the exporter checks the
// replies. ROUNDS (2) rounds of N (40) buffers of mixed sizes (small ones share a segment
// under luma, MiB ones do not); each round's buffers are freed before the next is
// allocated, so later rounds reuse addresses and the peer's cache. BUFFER_ID is equal
// exactly for equal ranges.
int mode_ipc_ranges(int argc, char** argv) {
  if (argc > 2) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-ranges");
  if (D == nullptr) return kExitSkip;
  const size_t n = argc >= 1 ? parse(argv[0], "N") : 40;
  const size_t rounds = argc >= 2 ? parse(argv[1], "ROUNDS") : 2;
  if (n == 0 || n > 1000 || rounds == 0 || rounds > 100) return kExitUsage;
  static const size_t kSizes[] = {200, 4096, 5000, 512, 70000, kMiB, 3 * kMiB + 100, 1000};
  Peer peer("ipc-ranges-peer");
  size_t wrong = 0, id_mismatches = 0;
  std::vector<unsigned char> buf;
  for (size_t round = 0; round < rounds; ++round) {
    std::vector<Tagged> blocks(n);
    std::vector<std::pair<uintptr_t, size_t>> ranges(n);
    std::vector<unsigned long long> ids(n);
    std::string input;
    for (size_t i = 0; i < n; ++i) {
      Tagged& b = blocks[i];
      b.n = kSizes[(i + round * 3) % (sizeof kSizes / sizeof kSizes[0])];
      b.id = round * 1000 + i + 1;
      ok(A.alloc(&b.p, b.n), "alloc");
      if (!write_tag(b)) fail("write tag", 0);
      void* base = nullptr;
      size_t size = 0;
      ok(A.address_range(b.p, &base, &size), "cuMemGetAddressRange");
      const auto o = reinterpret_cast<uintptr_t>(b.p), bs = reinterpret_cast<uintptr_t>(base);
      if (o < bs || o + b.n > bs + size) fail("the range does not hold the buffer", 0);
      unsigned long long id_base = 0;
      ok(D->buffer_id(b.p, &ids[i]), "BUFFER_ID of the buffer");
      ok(D->buffer_id(base, &id_base), "BUFFER_ID of the range base");
      if (ids[i] != id_base) ++id_mismatches;
      ranges[i] = {bs, size};
      unsigned char h[kIpcHandleSize];
      ok(D->ipc_get(h, base), "cuIpcGetMemHandle of the range base");
      input += to_hex(h, sizeof h) + " " + std::to_string(bs) + " " + std::to_string(ids[i]) + " " +
               std::to_string(o - bs) + " " + std::to_string(b.n) + " " + std::to_string(b.id) + "\n";
    }
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < i; ++j)
        id_mismatches += (ranges[i] == ranges[j]) != (ids[i] == ids[j]);
    peer.send(input + "end\n");
    if (peer.read_line().empty()) break;  // the peer is gone: its exit code tells
    for (const Tagged& b : blocks) {
      std::string why = check_tag(Tagged{b.p, b.n, b.id + kReplyId}, buf);
      if (!why.empty() && wrong++ < 3)
        std::fprintf(stderr, "%s: ipc-ranges: buffer %" PRIu64 " (%zu bytes) lacks the peer's reply: %s\n",
                     g_prog, b.id, b.n, why.c_str());
    }
    for (const Tagged& b : blocks) ok(A.free(b.p), "free");
  }
  const int peer_rc = peer.finish();
  if (peer_rc != 0) std::fprintf(stderr, "%s: ipc-ranges: the peer exited %d\n", g_prog, peer_rc);
  if (wrong != 0)
    std::fprintf(stderr, "%s: ipc-ranges: %zu of %zu buffers lack the peer's reply\n", g_prog, wrong,
                 n * rounds);
  if (id_mismatches != 0)
    std::fprintf(stderr, "%s: ipc-ranges: BUFFER_ID is not equal exactly for equal ranges (%zu pairs)\n",
                 g_prog, id_mismatches);
  if (peer_rc != 0 || wrong != 0 || id_mismatches != 0) return kExitWrong;
  std::printf("ipc-ranges: %zu rounds of %zu buffers shared as (handle, offset, length), data "
              "checked both ways\n", rounds, n);
  return 0;
}

// The peer of ipc-ranges: stdin has "HANDLE_HEX BASE BUFFER_ID OFFSET LENGTH ID" lines, and
// "end" after each round; it answers each round with one line on stdout. What it opened
// stays open, keyed by (BASE, BUFFER_ID), until stdin ends.
int mode_ipc_ranges_peer(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-ranges-peer");
  if (D == nullptr) return kExitSkip;
  std::map<std::pair<uint64_t, uint64_t>, void*> cache;
  std::vector<Tagged> round;
  std::vector<unsigned char> buf;
  size_t wrong = 0, total = 0, opened = 0;
  char line[512];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    if (std::strncmp(line, "end", 3) == 0) {
      for (const Tagged& b : round) {
        std::string why = check_tag(b, buf);
        if (!why.empty() && wrong++ < 3)
          std::fprintf(stderr, "%s: ipc-ranges-peer: buffer %" PRIu64 " (%zu bytes): %s\n", g_prog,
                       b.id, b.n, why.c_str());
        Tagged reply{b.p, b.n, b.id + kReplyId};
        if (!write_tag(reply)) fail("ipc-ranges-peer: write the reply", 0);
      }
      total += round.size();
      round.clear();
      std::printf("round done\n");
      std::fflush(stdout);
      continue;
    }
    char hex[2 * kIpcHandleSize + 1];
    uint64_t base = 0, buffer_id = 0, id = 0;
    size_t offset = 0, length = 0;
    unsigned char h[kIpcHandleSize];
    if (std::sscanf(line, "%128s %" SCNu64 " %" SCNu64 " %zu %zu %" SCNu64, hex, &base, &buffer_id,
                    &offset, &length, &id) != 6 ||
        !from_hex(hex, h, sizeof h))
      fail("ipc-ranges-peer: bad input line", 0);
    void*& mapped = cache[{base, buffer_id}];
    if (mapped == nullptr) {
      ok(D->ipc_open(&mapped, h), "cuIpcOpenMemHandle");
      ++opened;
    }
    round.push_back(Tagged{static_cast<char*>(mapped) + offset, length, id});
  }
  for (const auto& [key, p] : cache) ok(D->ipc_close(p), "cuIpcCloseMemHandle");
  std::fprintf(stderr, "%s: ipc-ranges-peer: %zu buffers through %zu mappings\n", g_prog, total, opened);
  if (wrong != 0) {
    std::fprintf(stderr, "%s: ipc-ranges-peer: %zu of %zu buffers wrong\n", g_prog, wrong, total);
    return kExitWrong;
  }
  return 0;
}

// CUDA's simpleIPC sample: the exporter hands out the handle of the pointer it allocated,
// the peer uses the opened pointer itself as the buffer. Two blocks of SIZE, the second
// exported (under luma it may start inside a segment the first begins).
int mode_ipc_simple(int argc, char** argv) {
  if (argc != 1) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-simple");
  if (D == nullptr) return kExitSkip;
  const size_t n = parse(argv[0], "SIZE");
  if (n < sizeof(uint64_t)) return kExitUsage;
  Tagged first{nullptr, n, 1}, shared{nullptr, n, 2};
  ok(A.alloc(&first.p, n), "alloc");
  ok(A.alloc(&shared.p, n), "alloc");
  if (!write_tag(first) || !write_tag(shared)) fail("write tag", 0);
  unsigned char h[kIpcHandleSize];
  ok(D->ipc_get(h, shared.p), "cuIpcGetMemHandle of the allocated pointer");
  Peer simple_peer("ipc-simple-peer");
  simple_peer.send(to_hex(h, sizeof h) + " " + std::to_string(n) + " " + std::to_string(shared.id) + "\n");
  const int peer = simple_peer.finish();
  std::vector<unsigned char> buf;
  std::string reply = check_tag(Tagged{shared.p, n, shared.id + kReplyId}, buf);
  std::string kept = check_tag(first, buf);
  ok(A.free(first.p), "free");
  ok(A.free(shared.p), "free");
  if (peer != 0) {
    std::fprintf(stderr, "%s: ipc-simple: the peer exited %d\n", g_prog, peer);
    return kExitWrong;
  }
  if (!reply.empty()) fail(("ipc-simple: the peer's reply: " + reply).c_str(), 0);
  if (!kept.empty()) fail(("ipc-simple: the other block: " + kept).c_str(), 0);
  std::printf("ipc-simple: a %zu-byte block shared by its own pointer, data checked both ways\n", n);
  return 0;
}

// The peer of ipc-simple: stdin has "HANDLE_HEX LENGTH ID".
int mode_ipc_simple_peer(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-simple-peer");
  if (D == nullptr) return kExitSkip;
  char hex[2 * kIpcHandleSize + 1];
  size_t length = 0;
  uint64_t id = 0;
  unsigned char h[kIpcHandleSize];
  if (std::scanf("%128s %zu %" SCNu64, hex, &length, &id) != 3 || !from_hex(hex, h, sizeof h))
    fail("ipc-simple-peer: bad input", 0);
  void* p = nullptr;
  ok(D->ipc_open(&p, h), "cuIpcOpenMemHandle");
  std::vector<unsigned char> buf;
  std::string why = check_tag(Tagged{p, length, id}, buf);
  if (!why.empty()) {
    std::fprintf(stderr, "%s: ipc-simple-peer: the opened pointer does not hold the exported block: %s\n",
                 g_prog, why.c_str());
    ok(D->ipc_close(p), "cuIpcCloseMemHandle");
    return kExitWrong;
  }
  Tagged reply{p, length, id + kReplyId};
  if (!write_tag(reply)) fail("ipc-simple-peer: write the reply", 0);
  ok(D->ipc_close(p), "cuIpcCloseMemHandle");
  return 0;
}

// The stand-in's delay before each asynchronous operation; false on a real driver.
bool set_stand_in_delay(uint64_t us) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return false;
  auto set_delay = reinterpret_cast<void (*)(uint64_t)>(dlsym(lib, "luma_fake_set_delay_us"));
  if (set_delay != nullptr) set_delay(us);
  dlclose(lib);
  return set_delay != nullptr;
}

// Tagged blocks allocated, checked and freed until `stop` (bounded), as the other threads
// of a program allocate while one thread captures and launches a graph.
void churn(uint64_t thread, const std::atomic<bool>& stop, std::atomic<uint64_t>& ops,
           std::atomic<int>& failures) {
  std::mt19937_64 rng(thread);
  std::vector<Tagged> live;
  std::vector<unsigned char> buf;
  auto release = [&](size_t k) {
    std::string why = check_tag(live[k], buf);
    if (!why.empty()) {
      std::fprintf(stderr, "%s: graph-pattern: thread %" PRIu64 " block %" PRIu64 ": %s\n", g_prog,
                   thread, live[k].id, why.c_str());
      ++failures;
    }
    if (int r = A.free(live[k].p)) {
      std::fprintf(stderr, "%s: graph-pattern: a thread's free returned %d\n", g_prog, r);
      ++failures;
    }
    live[k] = live.back();
    live.pop_back();
  };
  for (uint64_t i = 0; i < 200000 && !stop.load() && failures.load() == 0; ++i) {
    if (live.size() < 8 && (live.empty() || rng() % 3 != 0)) {
      Tagged b{nullptr, 1 + rng() % (64 * 1024), (thread << 32) | i};
      if (int r = A.alloc(&b.p, b.n)) {
        std::fprintf(stderr, "%s: graph-pattern: a thread's alloc returned %d\n", g_prog, r);
        ++failures;
        break;
      }
      if (!write_tag(b)) ++failures;
      live.push_back(b);
    } else {
      release(rng() % live.size());
    }
    ++ops;
  }
  while (!live.empty()) release(live.size() - 1);
}

// Pinned host and managed memory, which luma forwards to the driver (and counts): ROUNDS
// rounds of cuMemAllocHost(4 KiB * (i+1)) written and read back, then cuMemFreeHost, and
// cuMemAllocManaged(8 KiB) written through the host, then cuMemFree. Nothing else is
// allocated, so luma's statistics hold only these calls.
int mode_host_managed(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  const DriverCalls* D = driver_calls("host-managed");
  if (D == nullptr) return 0;
  size_t rounds = argc == 1 ? parse(argv[0], "ROUNDS") : 4;
  for (size_t i = 0; i < rounds; ++i) {
    const size_t n = 4096 * (i + 1);
    void* h = nullptr;
    ok(D->host_alloc(&h, n), "cuMemAllocHost");
    std::memset(h, static_cast<int>(i + 1), n);
    if (static_cast<unsigned char*>(h)[n - 1] != i + 1) fail("host-managed: host data", static_cast<int>(i));
    ok(D->host_free(h), "cuMemFreeHost");
    void* m = nullptr;
    ok(D->managed_alloc(&m, 8192), "cuMemAllocManaged");
    std::memset(m, 7, 8192);
    ok(A.free(m), "cuMemFree of managed memory");
  }
  std::printf("host-managed: %zu pinned host and managed rounds ok\n", rounds);
  return 0;
}

// The allocation paths luma forwards beside cuMemAllocAsync (the driver API's pools and
// virtual memory): ROUNDS rounds of cuMemAllocFromPoolAsync(4 KiB * (i+1)) from a pool of
// the program's own, used and freed with cuMemFreeAsync; then ROUNDS rounds of cuMemCreate
// (2 x granularity), reserved, mapped, made accessible, used, unmapped, the range freed and
// the memory released. The driver's errors must reach the program unchanged: cuMemCreate
// of a size off the granularity and an allocation from a destroyed pool give
// CUDA_ERROR_INVALID_VALUE. Nothing else is allocated.
int mode_pool_vmm(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  const DriverCalls* D = driver_calls("pool-vmm");
  if (D == nullptr) return 0;
  const size_t rounds = argc == 1 ? parse(argv[0], "ROUNDS") : 3;
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create");
  void* pool = nullptr;
  ok(D->pool_create(&pool), "cuMemPoolCreate");
  std::vector<unsigned char> buf(4096 * (rounds + 1));
  for (size_t i = 0; i < rounds; ++i) {
    const size_t n = 4096 * (i + 1);
    void* p = nullptr;
    ok(D->pool_alloc(&p, n, pool, s), "cuMemAllocFromPoolAsync");
    const int v = static_cast<int>(i % 200) + 1;
    ok(A.memset_async(p, v, n, s), "memsetAsync");
    ok(A.dtoh_async(buf.data(), p, n, s), "memcpyAsync DtoH");
    ok(A.free_async(p, s), "cuMemFreeAsync");
    ok(A.stream_sync(s), "stream sync");
    if (buf[0] != v || buf[n - 1] != v) fail("pool-vmm: pool data", static_cast<int>(i));
  }
  ok(D->pool_destroy(pool), "cuMemPoolDestroy");
  void* q = nullptr;
  if (int r = D->pool_alloc(&q, 4096, pool, s); r != A.invalid_code)
    fail("pool-vmm: cuMemAllocFromPoolAsync from a destroyed pool returned", r);
  size_t g = 0;
  ok(D->vmm_granularity(&g), "cuMemGetAllocationGranularity");
  unsigned long long h = 0;
  if (int r = D->vmm_create(&h, g + 4096); r != A.invalid_code)
    fail("pool-vmm: cuMemCreate of a size off the granularity returned", r);
  for (size_t i = 0; i < rounds; ++i) {
    ok(D->vmm_create(&h, 2 * g), "cuMemCreate");
    void* va = nullptr;
    ok(D->vmm_reserve(&va, 4 * g), "cuMemAddressReserve");
    ok(D->vmm_map(va, 2 * g, h), "cuMemMap");
    ok(D->vmm_set_access(va, 2 * g), "cuMemSetAccess");
    const int v = static_cast<int>(i % 200) + 7;
    ok(A.memset(va, v, 2 * g), "memset of mapped memory");
    unsigned char last = 0;
    ok(A.dtoh(&last, static_cast<unsigned char*>(va) + 2 * g - 1, 1), "memcpy DtoH");
    if (last != v) fail("pool-vmm: mapped data", static_cast<int>(i));
    ok(D->vmm_unmap(va, 2 * g), "cuMemUnmap");
    ok(D->vmm_free_range(va, 4 * g), "cuMemAddressFree");
    ok(D->vmm_release(h), "cuMemRelease");
  }
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("pool-vmm: %zu pool and %zu virtual memory rounds ok (granularity %zu)\n", rounds,
              rounds, g);
  return 0;
}

// PyTorch's CUDA graphs: warm-up on a side stream; a relaxed-mode capture during which the
// capturing thread allocates and frees (under a relaxed capture-mode guard, as PyTorch's
// allocator does) and queues memsets and copies; the graph launched LAUNCHES times, its
// output checked each time; two other threads allocate, tag, check and free all along.
// Also, inside the capture: two blocks whose slow memsets (one on another stream, one on the
// stream then captured) were queued before the capture are freed, and the next allocations
// must not see those memsets land in them.
int mode_graph_pattern(int argc, char** argv) {
  if (argc > 1) return kExitUsage;
  const DriverCalls* D = driver_calls("graph-pattern");
  if (D == nullptr) return kExitSkip;
  const size_t launches = argc == 1 ? parse(argv[0], "LAUNCHES") : 20;
  constexpr size_t kN = 64 * 1024;
  void *s = nullptr, *side = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  ok(A.stream_create(&side, true), "stream create (non-blocking)");
  for (int round = 0; round < 3; ++round) {  // warm-up: blocks used on the stream, cached
    void *a = nullptr, *b = nullptr;
    ok(A.alloc(&a, kN), "warm-up alloc");
    ok(A.alloc(&b, 2 * kN), "warm-up alloc");
    ok(A.memset_async(a, 1, kN, s), "warm-up memsetAsync");
    ok(A.memset_async(b, 2, 2 * kN, s), "warm-up memsetAsync");
    ok(A.stream_sync(s), "warm-up stream sync");
    ok(A.free(a), "warm-up free");
    ok(A.free(b), "warm-up free");
  }
  void *in = nullptr, *out = nullptr, *t = nullptr, *u = nullptr;
  void *x = nullptr, *y = nullptr, *x2 = nullptr, *y2 = nullptr;
  ok(A.alloc(&in, kN), "alloc in");
  ok(A.alloc(&out, kN), "alloc out");
  ok(A.alloc(&x, kN), "alloc X");
  ok(A.memset(x, 0, kN), "memset X");
  ok(A.alloc(&x2, kN), "alloc X2");
  ok(A.memset(x2, 0, kN), "memset X2");

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> others;
  for (uint64_t k = 1; k <= 2; ++k) others.emplace_back([&, k] { churn(k, stop, ops, failures); });

  const bool slowed = set_stand_in_delay(kHazardDelayUs);
  ok(A.memset_async(x, 0xAA, kN, side), "slow memsetAsync X on the side stream");
  ok(A.memset_async(x2, 0xAA, kN, s), "slow memsetAsync X2 on the stream to capture");
  ok(D->begin_capture(s, kCaptureModeRelaxed), "cuStreamBeginCapture_v2 (relaxed)");
  const uint64_t ops_at_begin = ops.load();
  int mode = kCaptureModeRelaxed;  // PyTorch's CUDAStreamCaptureModeGuard around allocations
  ok(D->exchange_capture_mode(&mode), "cuThreadExchangeStreamCaptureMode (relaxed)");
  ok(A.free(x), "free X in the capture");  // its memset may still be queued
  ok(A.alloc(&y, kN), "alloc Y in the capture");
  ok(A.memset(y, 0x55, kN), "memset Y");
  ok(A.free(x2), "free X2 in the capture");
  ok(A.alloc(&y2, kN), "alloc Y2 in the capture");
  ok(A.memset(y2, 0x55, kN), "memset Y2");
  ok(A.alloc(&t, kN), "alloc in the capture");
  ok(A.alloc(&u, 3000), "alloc in the capture");
  ok(A.free(u), "free in the capture");
  ok(D->exchange_capture_mode(&mode), "cuThreadExchangeStreamCaptureMode (back)");
  ok(A.memset_async(out, 0, kN, s), "captured memsetAsync");
  ok(D->copy_async(t, in, kN, s), "captured copy in -> t");
  ok(D->copy_async(out, t, kN / 2, s), "captured copy t -> out");
  ok(A.memset_async(static_cast<char*>(out) + kN / 2, 0x77, kN / 2, s), "captured memsetAsync");
  // Let the other threads work during the capture (bounded: no assertion on time).
  for (int i = 0; i < 2000 && ops.load() < ops_at_begin + 50 && failures.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  void* graph = nullptr;
  ok(D->end_capture(s, &graph), "cuStreamEndCapture");
  ok(A.stream_sync(side), "side stream sync");
  ok(A.stream_sync(s), "stream sync");
  if (slowed) set_stand_in_delay(0);
  std::vector<unsigned char> buf(kN);
  size_t late = 0;
  for (void* p : {y, y2}) {
    ok(A.dtoh(buf.data(), p, kN), "dtoh Y");
    for (unsigned char c : buf) late += c != 0x55;
  }
  if (late != 0) {
    stop = true;
    for (auto& th : others) th.join();
    std::printf("graph-pattern: CORRUPTED (%zu bytes of Y and Y2, allocated in the capture, "
                "hold the freed blocks' late writes)\n", late);
    return kExitCorrupted;
  }
  void* exec = nullptr;
  ok(D->instantiate(&exec, graph), "cuGraphInstantiateWithFlags");
  std::vector<unsigned char> pattern(kN);
  for (size_t k = 0; k < launches && failures.load() == 0; ++k) {
    for (size_t j = 0; j < kN; ++j) pattern[j] = static_cast<unsigned char>(j * 7 + k * 13 + 1);
    ok(A.htod(in, pattern.data(), kN), "htod in");
    ok(D->launch(exec, s), "cuGraphLaunch");
    ok(A.stream_sync(s), "stream sync");
    ok(A.dtoh(buf.data(), out, kN), "dtoh out");
    for (size_t j = 0; j < kN; ++j) {
      const unsigned char want = j < kN / 2 ? pattern[j] : 0x77;
      if (buf[j] != want) {
        std::fprintf(stderr, "%s: graph-pattern: launch %zu: byte %zu of the output is %d, expected %d\n",
                     g_prog, k, j, buf[j], want);
        std::_Exit(kExitWrong);
      }
    }
  }
  stop = true;
  for (auto& th : others) th.join();
  if (failures.load() != 0) fail("graph-pattern: the other threads' blocks", failures.load());
  ok(D->exec_destroy(exec), "cuGraphExecDestroy");
  ok(D->graph_destroy(graph), "cuGraphDestroy");
  for (void* p : {in, out, y, y2, t}) ok(A.free(p), "free");
  ok(A.stream_destroy(s), "stream destroy");
  ok(A.stream_destroy(side), "stream destroy");
  std::printf("graph-pattern: relaxed capture with allocations, %zu launches checked, other "
              "threads' blocks intact\n", launches);
  return 0;
}

constexpr int kCaptureUnsupported = 900;  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
constexpr int kCaptureInvalidated = 901;  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED

// Ends the capture on s, which must have been invalidated: no graph.
void expect_invalidated(const DriverCalls* D, void* s, const char* what) {
  void* graph = reinterpret_cast<void*>(1);
  expect(D->end_capture(s, &graph), kCaptureInvalidated, what);
  if (graph != nullptr) fail("an invalidated capture gave a graph", 0);
}

// A global-mode capture (cudaStreamBeginCapture's default): the capturing thread's cuMemAlloc
// is refused with the driver's error and invalidates the capture, even where a cache could
// answer it (a block of the size was freed just before); so is its cuMemFree of a live
// block, which stays live.
int mode_capture_global(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-global");
  if (D == nullptr) return kExitSkip;
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  Tagged b{nullptr, 4096, 21};
  ok(A.alloc(&b.p, b.n), "alloc");
  if (!write_tag(b)) fail("write tag", 0);
  void* cached = nullptr;
  ok(A.alloc(&cached, 4096), "alloc");
  ok(A.free(cached), "free");
  ok(D->begin_capture(s, kCaptureModeGlobal), "cuStreamBeginCapture_v2 (global)");
  void* p = nullptr;
  const int alloc_rc = A.alloc(&p, 4096);
  std::printf("capture-global: cuMemAlloc in the capture -> %d\n", alloc_rc);
  expect(alloc_rc, kCaptureUnsupported, "cuMemAlloc in a global capture");
  expect_invalidated(D, s, "cuStreamEndCapture after cuMemAlloc");
  ok(D->begin_capture(s, kCaptureModeGlobal), "cuStreamBeginCapture_v2 (global)");
  const int free_rc = A.free(b.p);
  std::printf("capture-global: cuMemFree in the capture -> %d\n", free_rc);
  expect(free_rc, kCaptureUnsupported, "cuMemFree in a global capture");
  expect_invalidated(D, s, "cuStreamEndCapture after cuMemFree");
  std::vector<unsigned char> buf;
  if (std::string why = check_tag(b, buf); !why.empty()) fail(("capture-global: " + why).c_str(), 0);
  ok(A.free(b.p), "free after the capture");
  ok(A.alloc(&p, 4096), "alloc after the capture");
  ok(A.free(p), "free after the capture");
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("capture-global: refused and invalidated as the driver does; the block kept\n");
  return 0;
}

// cuMemFreeAsync, in a capture, of memory from cuMemAlloc (no allocation node of the graph
// returned it): the driver answers CUDA_ERROR_INVALID_VALUE, freeing nothing, and the
// capture stays valid (observed on an H200, driver 580: cuStreamEndCapture 0 in a global
// capture); the block keeps its data and is not handed out again until freed. In a global
// and in a relaxed capture.
int mode_capture_free_async(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-free-async");
  if (D == nullptr) return kExitSkip;
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  std::vector<unsigned char> buf;
  for (int mode : {kCaptureModeGlobal, kCaptureModeRelaxed}) {
    Tagged b{nullptr, 4096, 31}, c{nullptr, 4096, 32}, d{nullptr, 4096, 33};
    ok(A.alloc(&b.p, b.n), "alloc");
    ok(A.alloc(&c.p, c.n), "alloc");
    if (!write_tag(b) || !write_tag(c)) fail("write tag", 0);
    ok(D->begin_capture(s, mode), "cuStreamBeginCapture_v2");
    const int r = A.free_async(b.p, s);
    std::printf("capture-free-async: mode %d: cuMemFreeAsync in the capture -> %d\n", mode, r);
    expect(r, A.invalid_code, "cuMemFreeAsync of cuMemAlloc memory in a capture");
    void* graph = nullptr;
    const int end = D->end_capture(s, &graph);
    std::printf("capture-free-async: mode %d: cuStreamEndCapture after it -> %d\n", mode, end);
    expect(end, 0, "cuStreamEndCapture after cuMemFreeAsync (the capture stays valid)");
    if (graph == nullptr) fail("the capture ended without a graph", 0);
    ok(D->graph_destroy(graph), "graph destroy");
    ok(A.alloc(&d.p, d.n), "alloc after the capture");
    if (!write_tag(d)) fail("write tag", 0);
    for (const Tagged* k : {&b, &c, &d})
      if (std::string why = check_tag(*k, buf); !why.empty())
        fail(("capture-free-async: block " + std::to_string(k->id) + ": " + why).c_str(), 0);
    ok(A.free(b.p), "free of the block after the capture");
    ok(A.free(c.p), "free");
    ok(A.free(d.p), "free");
  }
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("capture-free-async: refused as the driver does, the capture kept; the block kept\n");
  return 0;
}

// Captures and the program's other threads (which keep the default global mode): during a
// global capture their cuMemAlloc and their cuMemFree of a live block are refused and
// invalidate it; during a thread-local capture they allocate and free as usual and the
// capture ends with a graph, while the capturing thread's own cuMemAlloc is refused.
int mode_capture_other_threads(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-other-threads");
  if (D == nullptr) return kExitSkip;
  constexpr int kCaptureModeThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
  void* s = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  Tagged b{nullptr, 4096, 41};
  ok(A.alloc(&b.p, b.n), "alloc");
  if (!write_tag(b)) fail("write tag", 0);
  void* cached = nullptr;
  ok(A.alloc(&cached, 4096), "alloc");
  ok(A.free(cached), "free");
  ok(D->begin_capture(s, kCaptureModeGlobal), "cuStreamBeginCapture_v2 (global)");
  int other_alloc = -1, other_free = -1;
  std::thread([&] {
    void* p = nullptr;
    other_alloc = A.alloc(&p, 4096);
    other_free = A.free(b.p);
  }).join();
  std::printf("capture-other-threads: global capture: another thread's cuMemAlloc -> %d, "
              "cuMemFree -> %d\n", other_alloc, other_free);
  expect(other_alloc, kCaptureUnsupported, "another thread's cuMemAlloc in a global capture");
  expect(other_free, kCaptureUnsupported, "another thread's cuMemFree in a global capture");
  expect_invalidated(D, s, "cuStreamEndCapture after another thread's calls");
  std::vector<unsigned char> buf;
  if (std::string why = check_tag(b, buf); !why.empty()) fail(("capture-other-threads: " + why).c_str(), 0);

  ok(D->begin_capture(s, kCaptureModeThreadLocal), "cuStreamBeginCapture_v2 (thread-local)");
  ok(A.memset_async(b.p, 3, b.n, s), "captured memsetAsync");
  int rc[3] = {-1, -1, -1};
  std::thread([&] {
    void* p = nullptr;
    rc[0] = A.alloc(&p, 4096);
    if (rc[0] == 0) rc[1] = A.memset(p, 9, 4096);
    if (rc[0] == 0) rc[2] = A.free(p);
  }).join();
  std::printf("capture-other-threads: thread-local capture: another thread's alloc, memset, "
              "free -> %d %d %d\n", rc[0], rc[1], rc[2]);
  for (int r : rc) expect(r, 0, "another thread's calls in a thread-local capture");
  void* p = nullptr;
  expect(A.alloc(&p, 4096), kCaptureUnsupported, "the capturing thread's cuMemAlloc (thread-local)");
  expect_invalidated(D, s, "cuStreamEndCapture after the capturing thread's cuMemAlloc");
  ok(D->begin_capture(s, kCaptureModeThreadLocal), "cuStreamBeginCapture_v2 (thread-local)");
  std::thread([&] {
    void* q = nullptr;
    rc[0] = A.alloc(&q, 8192);
    if (rc[0] == 0) rc[1] = A.free(q);
  }).join();
  expect(rc[0] | rc[1], 0, "another thread's alloc and free in a thread-local capture");
  void* graph = nullptr;
  ok(D->end_capture(s, &graph), "cuStreamEndCapture (thread-local, others allocated)");
  if (graph == nullptr) fail("no graph", 0);
  ok(D->graph_destroy(graph), "cuGraphDestroy");
  if (std::string why = check_tag(b, buf); !why.empty()) fail(("capture-other-threads: " + why).c_str(), 0);
  ok(A.free(b.p), "free");
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("capture-other-threads: as the driver answers\n");
  return 0;
}

// A relaxed capture on a blocking stream (a program's own stream, not PyTorch's
// non-blocking side stream): the legacy stream may not be used meanwhile, so nothing done
// for the program's cuMemAlloc / cuMemFree may touch it. Inside the capture the capturing
// thread allocates and frees and another thread allocates and frees (no synchronous
// copies: those use the legacy stream); the capture ends with a graph whose launch writes
// the block allocated in it.
int mode_capture_blocking(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-blocking");
  if (D == nullptr) return kExitSkip;
  constexpr size_t kN = 8192;
  void* s = nullptr;
  ok(A.stream_create(&s, false), "stream create (blocking)");
  void* warm = nullptr;
  ok(A.alloc(&warm, kN), "alloc");
  ok(A.memset_async(warm, 1, kN, s), "memsetAsync");
  ok(A.stream_sync(s), "stream sync");
  ok(A.free(warm), "free");
  ok(D->begin_capture(s, kCaptureModeRelaxed), "cuStreamBeginCapture_v2 (relaxed, blocking stream)");
  void *a = nullptr, *b = nullptr;
  ok(A.alloc(&a, kN), "alloc in the capture");
  ok(A.free(a), "free in the capture");
  ok(A.alloc(&b, kN), "alloc in the capture");
  ok(A.memset_async(b, 0x42, kN, s), "captured memsetAsync");
  int rc[4] = {-1, -1, -1, -1};
  std::thread([&] {
    int mode = kCaptureModeRelaxed;
    rc[0] = D->exchange_capture_mode(&mode);
    void* p = nullptr;
    rc[1] = A.alloc(&p, 3 * kN);
    if (rc[1] == 0) rc[2] = A.free(p);
    rc[3] = D->exchange_capture_mode(&mode);
  }).join();
  std::printf("capture-blocking: another thread's alloc / free -> %d %d\n", rc[1], rc[2]);
  for (int r : rc) expect(r, 0, "another thread's relaxed alloc and free");
  void* graph = nullptr;
  ok(D->end_capture(s, &graph), "cuStreamEndCapture (blocking stream)");
  void* exec = nullptr;
  ok(D->instantiate(&exec, graph), "cuGraphInstantiateWithFlags");
  ok(A.memset(b, 0, kN), "memset");
  ok(D->launch(exec, s), "cuGraphLaunch");
  ok(A.stream_sync(s), "stream sync");
  std::vector<unsigned char> buf(kN);
  ok(A.dtoh(buf.data(), b, kN), "dtoh");
  for (unsigned char c : buf)
    if (c != 0x42) fail("capture-blocking: the graph's memset is missing", c);
  ok(D->exec_destroy(exec), "cuGraphExecDestroy");
  ok(D->graph_destroy(graph), "cuGraphDestroy");
  ok(A.free(b), "free");
  ok(A.stream_destroy(s), "stream destroy");
  std::printf("capture-blocking: captured, launched and checked\n");
  return 0;
}

// A block freed inside a capture that then fails: its slow memset (on another stream) was
// queued before the capture; the capture is invalidated (a cuStreamSynchronize of the
// capturing stream) and ends with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED; the allocations
// right after must not see that memset land in them. A relaxed capture, so the free
// itself is allowed.
int mode_capture_invalidated_free(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-invalidated-free");
  if (D == nullptr) return kExitSkip;
  constexpr size_t kN = 64 * 1024;
  void *s = nullptr, *side = nullptr, *x = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  ok(A.stream_create(&side, true), "stream create (non-blocking)");
  ok(A.alloc(&x, kN), "alloc X");
  ok(A.memset(x, 0, kN), "memset X");
  const bool slowed = set_stand_in_delay(kHazardDelayUs);
  ok(A.memset_async(x, 0xAA, kN, side), "slow memsetAsync X on the side stream");
  ok(D->begin_capture(s, kCaptureModeRelaxed), "cuStreamBeginCapture_v2 (relaxed)");
  ok(A.free(x), "free X in the capture");
  expect(A.stream_sync(s), kCaptureUnsupported, "cuStreamSynchronize of the capturing stream");
  expect_invalidated(D, s, "cuStreamEndCapture of the invalidated capture");
  void* y[4] = {};
  for (void*& p : y) {
    ok(A.alloc(&p, kN), "alloc after the capture");
    ok(A.memset(p, 0x55, kN), "memset");
  }
  ok(A.stream_sync(side), "side stream sync");
  if (slowed) set_stand_in_delay(0);
  std::vector<unsigned char> buf(kN);
  size_t late = 0;
  for (void* p : y) {
    ok(A.dtoh(buf.data(), p, kN), "dtoh");
    for (unsigned char c : buf) late += c != 0x55;
    ok(A.free(p), "free");
  }
  ok(A.stream_destroy(s), "stream destroy");
  ok(A.stream_destroy(side), "stream destroy");
  if (late != 0) {
    std::printf("capture-invalidated-free: CORRUPTED (%zu bytes hold the freed block's late write)\n", late);
    return kExitCorrupted;
  }
  std::printf("capture-invalidated-free: CLEAN\n");
  return 0;
}

// train: a training loop as the planner sees one. Weights are allocated once and written;
// each step allocates activations of several sizes, a workspace and a temporary, writes
// data derived from the step and the weights, reads it back into a checksum, and frees it
// all in an order that is not the reverse of allocation. The weights are read back and
// checked after every step (a replay that moved or overwrote them would show).
// The number of steps is LUMA_TEST_STEPS (default 20), not an argument: a plan's
// fingerprint compares the arguments, and a plan captured over 5 steps must serve 50.
// LUMA_TEST_DIVERGE_AT=K: step K asks for 4 KiB more in its first activation (a program
// that leaves its plan). LUMA_TEST_ADDR_LOG=FILE: every allocation's address, in order.
// LUMA_TEST_DATA=0: allocations and frees only, no data written or checked (to time the
// allocator, not the stand-in's copies).
// Prints one line per step (its checksum), then the run's checksum, a hash of every
// address handed out and the time per step.
int mode_train(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const char* steps_env = std::getenv("LUMA_TEST_STEPS");
  const size_t steps = steps_env != nullptr ? parse(steps_env, "LUMA_TEST_STEPS") : 20;
  const char* diverge_env = std::getenv("LUMA_TEST_DIVERGE_AT");
  const size_t diverge_at =
      diverge_env != nullptr ? parse(diverge_env, "LUMA_TEST_DIVERGE_AT") : SIZE_MAX;
  const char* data_env = std::getenv("LUMA_TEST_DATA");
  const bool data = data_env == nullptr || std::strcmp(data_env, "0") != 0;
  FILE* addr_log = nullptr;
  if (const char* f = std::getenv("LUMA_TEST_ADDR_LOG")) {
    addr_log = std::fopen(f, "w");
    if (addr_log == nullptr) fail("cannot open LUMA_TEST_ADDR_LOG", 0);
  }
  uint64_t addr_hash = 1469598103934665603ull;  // FNV-1a over the addresses
  auto alloc = [&](size_t n) {
    void* p = nullptr;
    ok(A.alloc(&p, n), "alloc");
    const auto a = reinterpret_cast<uint64_t>(p);
    for (int i = 0; i < 8; ++i) addr_hash = (addr_hash ^ ((a >> (8 * i)) & 0xff)) * 1099511628211ull;
    if (addr_log != nullptr) std::fprintf(addr_log, "%" PRIu64 "\n", a);
    return p;
  };
  // Sizes as a model's layers give them: odd byte counts, small and large pools.
  static const size_t kWeights[] = {3 * kMiB + 1000, 200000, 5000};
  static const size_t kActs[] = {1000, 70000, kMiB + 12345, 3 * kMiB};
  constexpr size_t kWorkspace = 8 * kMiB;
  constexpr size_t kTemp = 40000;
  std::vector<Tagged> weights;
  std::vector<unsigned char> buf;
  for (size_t i = 0; i < sizeof kWeights / sizeof kWeights[0]; ++i) {
    Tagged w{alloc(kWeights[i]), kWeights[i], 1000 + i};
    if (data && !write_tag(w)) fail("write weights", 0);
    weights.push_back(w);
  }
  uint64_t total = 0;
  std::vector<unsigned char> host;
  const auto start = std::chrono::steady_clock::now();
  for (size_t step = 0; step < steps; ++step) {
    void* act[4] = {};
    for (size_t i = 0; i < 4; ++i)
      act[i] = alloc(kActs[i] + (step == diverge_at && i == 0 ? 4096 : 0));
    void* workspace = alloc(kWorkspace);
    void* temp = alloc(kTemp);
    if (data) ok(A.memset(temp, static_cast<int>(step & 0xff), kTemp), "memset temp");
    ok(A.free(temp), "free temp");
    void* temp2 = alloc(kTemp / 2);  // reuses what temp left, in a caching allocator
    if (data) ok(A.memset(workspace, 0x5a, kWorkspace), "memset workspace");
    uint64_t sum = 0;
    for (size_t i = 0; i < 4 && data; ++i) {
      const size_t n = kActs[i];
      host.resize(n);
      for (size_t j = 0; j < n; ++j)
        host[j] = static_cast<unsigned char>((j * 7 + step * 13 + i) ^ weights[i % 3].id);
      ok(A.htod(act[i], host.data(), n), "htod activation");
    }
    for (size_t i = 0; i < 4 && data; ++i) {
      host.resize(kActs[i]);
      ok(A.dtoh(host.data(), act[i], kActs[i]), "dtoh activation");
      for (size_t j = 0; j < kActs[i]; j += 61) sum = sum * 31 + host[j];
    }
    ok(A.free(act[2]), "free");
    ok(A.free(act[0]), "free");
    ok(A.free(workspace), "free");
    ok(A.free(temp2), "free");
    ok(A.free(act[3]), "free");
    ok(A.free(act[1]), "free");
    for (const Tagged& w : weights) {
      if (!data) break;
      std::string bad = check_tag(w, buf);
      if (!bad.empty()) {
        std::fprintf(stderr, "%s: weights %" PRIu64 " after step %zu: %s\n", g_prog, w.id, step,
                     bad.c_str());
        std::_Exit(kExitWrong);
      }
    }
    total = total * 1000003 + sum;
    if (data) std::printf("train: step %zu checksum %016" PRIx64 "\n", step, sum);
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  for (const Tagged& w : weights) ok(A.free(w.p), "free weights");
  if (addr_log != nullptr) std::fclose(addr_log);
  std::printf("train: %zu steps, checksum %016" PRIx64 ", addresses %016" PRIx64
              ", %lld ns/step\n",
              steps, total, addr_hash, steps > 0 ? static_cast<long long>(ns) / static_cast<long long>(steps) : 0LL);
  return 0;
}

// train-streams: a training loop whose work runs on two non-blocking streams, as a program
// that overlaps two pipelines does (the multi-stream loop of scripts/bench-replay). Two
// weights; each step, per stream: an activation, a workspace and a temporary, the
// temporary freed while its stream's work may still be queued (so a cache or a plan must
// wait for that work before reusing it: luma's fences), then an output; the work is
// memsetAsync on the stream, both streams are synchronized, one byte of each buffer is
// read back into the checksum, and everything is freed interleaved across the streams.
// LUMA_TEST_STEPS (default 20) and LUMA_TEST_DATA=0 (no work, allocations only), as train.
int mode_train_streams(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const char* steps_env = std::getenv("LUMA_TEST_STEPS");
  const size_t steps = steps_env != nullptr ? parse(steps_env, "LUMA_TEST_STEPS") : 20;
  const char* data_env = std::getenv("LUMA_TEST_DATA");
  const bool data = data_env == nullptr || std::strcmp(data_env, "0") != 0;
  uint64_t addr_hash = 1469598103934665603ull;  // FNV-1a over the addresses
  auto alloc = [&](size_t n) {
    void* p = nullptr;
    ok(A.alloc(&p, n), "alloc");
    const auto a = reinterpret_cast<uint64_t>(p);
    for (int i = 0; i < 8; ++i) addr_hash = (addr_hash ^ ((a >> (8 * i)) & 0xff)) * 1099511628211ull;
    return p;
  };
  void* stream[2] = {};
  for (void*& s : stream) ok(A.stream_create(&s, true), "stream create (non-blocking)");
  void* weights[2] = {alloc(4 * kMiB + 100), alloc(100000)};
  constexpr size_t kAct = 2 * kMiB, kWorkspace = 4 * kMiB, kTemp = 30000, kOut = 64 * 1024;
  uint64_t total = 0;
  unsigned char byte = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t step = 0; step < steps; ++step) {
    void* act[2] = {};
    void* ws[2] = {};
    void* out[2] = {};
    for (int i = 0; i < 2; ++i) {
      act[i] = alloc(kAct + 1000 * static_cast<size_t>(i));
      ws[i] = alloc(kWorkspace);
      void* temp = alloc(kTemp);
      const int v = static_cast<int>((step * 2 + static_cast<size_t>(i)) & 0xff);
      if (data) {
        ok(A.memset_async(temp, v, kTemp, stream[i]), "memsetAsync temp");
        ok(A.memset_async(act[i], v, kAct, stream[i]), "memsetAsync activation");
        ok(A.memset_async(ws[i], v ^ 0x5a, kWorkspace, stream[i]), "memsetAsync workspace");
      }
      ok(A.free(temp), "free temp");  // its stream may still be writing it
      out[i] = alloc(kOut);
      if (data) ok(A.memset_async(out[i], v ^ 0x33, kOut, stream[i]), "memsetAsync output");
    }
    uint64_t sum = 0;
    for (int i = 0; i < 2 && data; ++i) {
      ok(A.stream_sync(stream[i]), "stream sync");
      for (void* p : {act[i], ws[i], out[i]}) {
        ok(A.dtoh(&byte, p, 1), "dtoh");
        sum = sum * 31 + byte;
      }
    }
    for (void* p : {act[1], ws[0], out[1], act[0], out[0], ws[1]}) ok(A.free(p), "free");
    total = total * 1000003 + sum;
    if (data) std::printf("train-streams: step %zu checksum %016" PRIx64 "\n", step, sum);
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  for (void* w : weights) ok(A.free(w), "free weights");
  for (void* s : stream) ok(A.stream_destroy(s), "stream destroy");
  std::printf("train-streams: %zu steps, checksum %016" PRIx64 ", addresses %016" PRIx64
              ", %lld ns/step\n",
              steps, total, addr_hash, steps > 0 ? static_cast<long long>(ns) / static_cast<long long>(steps) : 0LL);
  return 0;
}

struct Mode {
  const char* name;
  const char* args;
  int (*run)(int argc, char** argv);
};

const Mode kModes[] = {
    {"loop", "N SIZE", mode_loop},
    {"loop-mixed", "N", mode_loop_mixed},
    {"stress", "THREADS N", mode_stress},
    {"loop-contexts", "N K SIZE", mode_loop_contexts},
    {"hazard", "", mode_hazard},
    {"stream-order", "[ROUNDS [second-stream]]", mode_stream_order},
    {"hazard-streams", "STREAMS", mode_hazard_streams},
    {"oom", "[CHUNK]", mode_oom},
    {"limit", "[CHUNK]", mode_limit},
    {"hold", "CHUNK K READY_FD HOLD_FD", mode_hold},
    {"group-share", "CHUNK K", mode_group_share},
    {"exec-after-alloc", "CHUNK PROGRAM [ARGS]", mode_exec_after_alloc},
    {"invalid-free", "", mode_invalid_free},
    {"two-devices", "", mode_two_devices},
    {"meminfo", "", mode_meminfo},
    {"exit-main", "", mode_exit_main},
    {"exit-thread", "", mode_exit_thread},
    {"atexit", "", mode_atexit},
    {"exit-while-busy", "", mode_exit_while_busy},
    {"fork", "", mode_fork},
    {"fork-before-serving", "", mode_fork_before_serving},
    {"fork-exec", "", mode_fork_exec},
    {"threads-first", "[THREADS]", mode_threads_first},
    {"async", "[ROUNDS]", mode_async},
    {"host-managed", "[ROUNDS]", mode_host_managed},
    {"pool-vmm", "[ROUNDS]", mode_pool_vmm},
    {"reset", "", mode_reset},
    {"contexts", "", mode_contexts},
    {"many-contexts", "N", mode_many_contexts},
    {"address-range", "", mode_address_range},
    {"free-async-cached", "", mode_free_async_cached},
    {"ipc-ranges", "[N]", mode_ipc_ranges},
    {"ipc-ranges-peer", "(stdin: HANDLE OFFSET LENGTH ID lines)", mode_ipc_ranges_peer},
    {"ipc-simple", "SIZE", mode_ipc_simple},
    {"ipc-simple-peer", "(stdin: HANDLE LENGTH ID)", mode_ipc_simple_peer},
    {"graph-pattern", "[LAUNCHES]", mode_graph_pattern},
    {"capture-global", "", mode_capture_global},
    {"capture-free-async", "", mode_capture_free_async},
    {"capture-other-threads", "", mode_capture_other_threads},
    {"capture-invalidated-free", "", mode_capture_invalidated_free},
    {"capture-blocking", "", mode_capture_blocking},
    {"train", "(LUMA_TEST_STEPS, LUMA_TEST_DIVERGE_AT, LUMA_TEST_ADDR_LOG)", mode_train},
    {"train-streams", "(LUMA_TEST_STEPS, LUMA_TEST_DATA)", mode_train_streams},
};

int usage() {
  std::fprintf(stderr, "usage: %s MODE [ARGS]  (%s API)\n", g_prog, A.name);
  for (const Mode& m : kModes) std::fprintf(stderr, "  %s %s\n", m.name, m.args);
  return kExitUsage;
}

}  // namespace
}  // namespace luma::programs

int main(int argc, char** argv) {
  using namespace luma::programs;
  g_prog = argc > 0 ? argv[0] : "prog";
  if (const char* slash = std::strrchr(g_prog, '/')) g_prog = slash + 1;
  if (argc < 2) return usage();
  for (const Mode& m : kModes) {
    if (std::strcmp(argv[1], m.name) == 0) {
      int rc = m.run(argc - 2, argv + 2);
      if (rc == kExitUsage) return usage();
      return rc;
    }
  }
  std::fprintf(stderr, "%s: unknown mode '%s'\n", g_prog, argv[1]);
  return usage();
}
