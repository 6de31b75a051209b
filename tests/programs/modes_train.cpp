// modes_train.cpp - the workload's training loops, as the planner sees a program: train
// (one stream) and train-streams (two non-blocking streams); the samples recorded and
// replayed by the plan tests and benchmarks.
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {

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

}  // namespace luma::programs
