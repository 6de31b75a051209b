// modes_lifetimes.cpp - the workload's modes about things that live and end many times
// (contexts, streams, captures, threads): luma's own records, read through its exported
// luma_footprint() before and after, must not grow with how many lived. And a context
// destroyed while another thread is inside luma: its entry is not freed under that thread.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

// luma's records now, as its JSON object; "null" without luma.
std::string footprint() {
  using Fn = size_t (*)(char*, size_t);
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "luma_footprint"));
  if (fn == nullptr) return "null";
  char buf[1024];
  if (fn(buf, sizeof buf) == 0) return "null";
  return buf;
}

void one_context() {
  void* ctx = nullptr;
  ok(A.ctx_create(&ctx), "context create");
  for (int pair = 0; pair < 2; ++pair) {
    void* p = nullptr;
    ok(A.alloc(&p, 8192), "alloc in a created context");
    ok(A.free(p), "free in a created context");
  }
  ok(A.ctx_destroy(ctx), "context destroy");
}

void one_stream() {
  void* stream = nullptr;
  ok(A.stream_create(&stream, true), "stream create");
  void* p = nullptr;
  ok(A.alloc(&p, 4096), "alloc");
  ok(A.memset_async(p, 1, 4096, stream), "memset on the stream");
  ok(A.free(p), "free");
  ok(A.stream_destroy(stream), "stream destroy");
}

void one_capture(void* stream) {
  const DriverCalls* D = A.driver;
  ok(D->begin_capture(stream, 2 /* relaxed */), "begin capture");
  void* graph = nullptr;
  ok(D->end_capture(stream, &graph), "end capture");
  ok(D->graph_destroy(graph), "graph destroy");
}

void one_thread() {
  int failures = 0;
  std::thread t([&] {
    void* p = nullptr;
    if (A.set_device(0) != 0 || A.alloc(&p, 4096) != 0 || A.free(p) != 0) ++failures;
  });
  t.join();
  if (failures != 0) fail("alloc/free on a new thread", 1);
}

}  // namespace

// KIND N: N lifetimes of KIND (contexts: created, two 8 KiB pairs, destroyed; streams:
// non-blocking, a memset on it, destroyed; captures: begun and ended on one stream, the
// graph destroyed; threads: started, one pair, ended), after one of each as a warm-up.
// Prints one JSON line: {"kind", "n", "start", "end"} with luma's footprint before and after.
int mode_lifetimes(int argc, char** argv) {
  if (argc != 2) return kExitUsage;
  const std::string kind = argv[0];
  const uint64_t n = parse(argv[1], "N");
  void* first = nullptr;
  ok(A.alloc(&first, 4096), "first alloc");  // luma serves from here on
  void* stream = nullptr;
  auto once = [&] {
    if (kind == "contexts") one_context();
    else if (kind == "streams") one_stream();
    else if (kind == "captures") one_capture(stream);
    else one_thread();
  };
  if (kind == "contexts" && A.ctx_create == nullptr) {
    std::printf("lifetimes: the %s API makes no contexts of its own: skipped\n", A.name);
    return kExitSkip;
  }
  if (kind == "captures") {
    if (A.driver == nullptr) {
      std::printf("lifetimes: the %s API has no capture calls here: skipped\n", A.name);
      return kExitSkip;
    }
    ok(A.stream_create(&stream, true), "stream create");
  }
  if (kind != "contexts" && kind != "streams" && kind != "captures" && kind != "threads") return kExitUsage;
  once();
  const std::string start = footprint();
  for (uint64_t i = 0; i < n; ++i) once();
  const std::string end = footprint();
  if (stream != nullptr) ok(A.stream_destroy(stream), "stream destroy");
  ok(A.free(first), "free");
  std::printf("{\"kind\": \"%s\", \"n\": %llu, \"start\": %s, \"end\": %s}\n", kind.c_str(),
              static_cast<unsigned long long>(n), start.c_str(), end.c_str());
  return 0;
}

// A context destroyed while another thread is inside luma (held in cuMemAllocHost_v2 by
// the stand-in for 300 ms; a pinned host allocation waits for no capture or context end,
// unlike a device allocation): the destroyed context's entry must wait for that thread (it
// could have loaded it); once the thread has left, the next context's end frees both.
// Prints {"during": footprint while held, "after": footprint after the next context's end}.
int mode_grace_period(int argc, char**) {
  if (argc != 0) return kExitUsage;
  if (A.ctx_create == nullptr || A.driver == nullptr) {
    std::printf("grace-period: the %s API makes no contexts of its own: skipped\n", A.name);
    return kExitSkip;
  }
  void* primary_block = nullptr;
  ok(A.alloc(&primary_block, 4096), "alloc in the primary context");
  void* ctx = nullptr;
  ok(A.ctx_create(&ctx), "context create");
  void* p = nullptr;
  ok(A.alloc(&p, 8192), "alloc in a created context");
  ok(A.free(p), "free in a created context");
  if (!set_stand_in_host_alloc_us(300000)) {
    std::printf("grace-period: the stand-in cannot hold a host allocation open: skipped\n");
    return kExitSkip;
  }
  std::atomic<int> inside{0};
  int failures = 0;
  std::thread held([&] {
    void* h = nullptr;
    if (A.set_device(0) != 0) ++failures;
    inside = 1;
    if (A.driver->host_alloc(&h, 4096) != 0 || A.driver->host_free(h) != 0) ++failures;
  });
  while (inside.load() == 0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // well inside the hold
  ok(A.ctx_destroy(ctx), "context destroy while another thread is inside luma");
  const std::string during = footprint();
  held.join();
  set_stand_in_host_alloc_us(0);
  if (failures != 0) fail("the held thread's host alloc/free", 1);
  ok(A.set_device(0), "primary context current");
  void* next = nullptr;
  ok(A.ctx_create(&next), "next context create");
  ok(A.alloc(&p, 8192), "alloc in the next context");
  ok(A.free(p), "free in the next context");
  ok(A.ctx_destroy(next), "next context destroy");
  const std::string after = footprint();
  ok(A.set_device(0), "primary context current");
  ok(A.free(primary_block), "free in the primary context");
  std::printf("{\"during\": %s, \"after\": %s}\n", during.c_str(), after.c_str());
  return 0;
}

// THREADS threads allocate and free in the primary context (each free asks every context's
// ranges) while the main thread makes, uses and destroys ROUNDS contexts of its own: the
// race between a free scanning the table and a context's entry being freed. Run under the
// sanitizers (a read of a freed entry is an error there). Prints the footprint at the end.
int mode_destroy_while_freeing(int argc, char** argv) {
  if (argc != 2) return kExitUsage;
  const uint64_t rounds = parse(argv[0], "ROUNDS"), threads = parse(argv[1], "THREADS");
  if (A.ctx_create == nullptr) {
    std::printf("destroy-while-freeing: the %s API makes no contexts of its own: skipped\n", A.name);
    return kExitSkip;
  }
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (uint64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      if (A.set_device(0) != 0) {
        ++failures;
        return;
      }
      while (!stop.load(std::memory_order_relaxed)) {
        void* p = nullptr;
        if (A.alloc(&p, 4096 + t * 512) != 0 || A.free(p) != 0) ++failures;
      }
    });
  for (uint64_t r = 0; r < rounds; ++r) one_context();
  stop = true;
  for (std::thread& t : pool) t.join();
  if (failures.load() != 0) fail("a worker's alloc/free", 1);
  std::printf("{\"rounds\": %llu, \"end\": %s}\n", static_cast<unsigned long long>(rounds),
              footprint().c_str());
  return 0;
}

}  // namespace luma::programs
