// modes_contexts.cpp - the workload's modes about contexts and their memory: contexts
// the program makes and destroys (driver API), the primary context destroyed and back,
// the device reset that takes the device's memory, and a context destroyed while another
// thread works in its own.
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

// A context destroyed while another thread works in a context of its own: the main thread
// makes a context, queues memsets on blocks there and frees them (cached by luma, fenced),
// and destroys it, ROUNDS times; the stand-in holds each destruction open for 20 ms
// (luma_fake_set_ctx_destroy_hold_us). A second thread meanwhile allocates and frees pinned
// host blocks (whose fences luma records in every context it serves) and device blocks, in
// the primary context. `primary`: the main thread works in the primary context and resets
// it (cuDevicePrimaryCtxReset_v2) instead, and the second thread in a context it made.
// Neither thread names the other's context, so the stand-in must count no call that named a
// context being destroyed or destroyed (cuCtxDestroy's rule, tests/fake): a call luma
// decided on before the destruction began, landing in it, shows there.
int mode_context_destroy_race(int argc, char** argv) {
  if (argc != 1 && argc != 2) return kExitUsage;
  const uint64_t rounds = parse(argv[0], "ROUNDS");
  const bool primary = argc == 2 && std::string(argv[1]) == "primary";
  if (argc == 2 && !primary) return kExitUsage;
  const DriverCalls* D = driver_calls("context-destroy-race");
  if (D == nullptr) return kExitSkip;
  const bool held = set_stand_in_ctx_destroy_hold(20000);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> pairs{0};
  std::atomic<int> failures{0};
  std::thread other([&] {
    void* own = nullptr;
    if (primary && A.ctx_create(&own) != 0) ++failures;
    while (!stop.load()) {
      void* h = nullptr;
      void* d = nullptr;
      if (D->host_alloc(&h, 64 * 1024) != 0 || D->host_free(h) != 0) ++failures;
      if (A.alloc(&d, 4096) != 0 || A.memset_async(d, 3, 4096, nullptr) != 0 || A.free(d) != 0)
        ++failures;
      ++pairs;
    }
    if (own != nullptr && A.ctx_destroy(own) != 0) ++failures;
  });
  for (uint64_t round = 0; round < rounds; ++round) {
    void* ctx = nullptr;
    if (!primary) ok(A.ctx_create(&ctx), "context create");
    for (size_t size : {size_t{4096}, 3 * kMiB}) {
      void* p = nullptr;
      ok(A.alloc(&p, size), "alloc in the context to be destroyed");
      ok(A.memset_async(p, 5, size, nullptr), "memsetAsync in the context to be destroyed");
      ok(A.free(p), "free in the context to be destroyed");
    }
    void* h = nullptr;  // a pinned block of this context, freed into luma's cache
    ok(D->host_alloc(&h, 64 * 1024), "pinned alloc in the context to be destroyed");
    ok(D->host_free(h), "pinned free in the context to be destroyed");
    // The other thread is inside a few pinned pairs by now.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (primary) ok(A.device_reset(), "primary context reset");
    else ok(A.ctx_destroy(ctx), "context destroy");
  }
  stop = true;
  other.join();
  if (held) set_stand_in_ctx_destroy_hold(0);
  const long long uses = stand_in_destroyed_context_uses();
  std::printf("context-destroy-race: %llu %s beside %llu pairs of the other thread (%d failed); "
              "calls that named a context being destroyed or destroyed: %lld\n",
              static_cast<unsigned long long>(rounds),
              primary ? "primary context resets" : "contexts destroyed",
              static_cast<unsigned long long>(pairs.load()), failures.load(), uses);
  if (failures.load() != 0) fail("context-destroy-race: the other thread's calls", failures.load());
  return uses > 0 ? kExitWrong : 0;
}

}  // namespace luma::programs
