// modes_basic.cpp - the workload's modes of plain allocation and free, as most programs
// use them: loops of pairs, many threads, bad frees, two devices, cudaMemGetInfo, and
// the first CUDA call made by many threads at once.
#include <atomic>
#include <barrier>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

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

}  // namespace

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

}  // namespace luma::programs
