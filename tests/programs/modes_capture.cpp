// modes_capture.cpp - the workload's modes about stream capture and CUDA graphs (driver
// API): PyTorch's graph pattern, and allocations and frees inside captures of each mode,
// from other threads, on a blocking stream, in a capture that gets invalidated, and in a
// capture into the program's own graph.
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

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

constexpr int kCaptureUnsupported = 900;  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
constexpr int kCaptureInvalidated = 901;  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED

// Ends the capture on s, which must have been invalidated: no graph.
void expect_invalidated(const DriverCalls* D, void* s, const char* what) {
  void* graph = reinterpret_cast<void*>(1);
  expect(D->end_capture(s, &graph), kCaptureInvalidated, what);
  if (graph != nullptr) fail("an invalidated capture gave a graph", 0);
}

}  // namespace

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

// cuStreamBeginCaptureToGraph (CUDA 12.3): a relaxed capture into a graph the program made,
// with a free and an allocation inside it, as PyTorch's graph pattern does. The freed block's
// slow memset, queued on another stream before the capture, must not land in the block
// allocated in the capture; the capture must end valid, into the same graph, which then
// replays the memset captured on the new block. X and Z fill a cache's 2 MiB segment of
// small blocks, so that Y's allocation finds only X, freed and pending: a cache then asks
// about X's fence during the capture.
int mode_capture_to_graph(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-to-graph");
  if (D == nullptr) return kExitSkip;
  constexpr size_t kN = 1 << 20;
  void *s = nullptr, *side = nullptr, *x = nullptr, *y = nullptr, *z = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  ok(A.stream_create(&side, true), "stream create (non-blocking)");
  ok(A.alloc(&x, kN), "alloc X");
  ok(A.alloc(&z, kN), "alloc Z");
  ok(A.memset(x, 0, kN), "memset X");
  void* graph = nullptr;
  ok(D->graph_create(&graph), "cuGraphCreate");
  const bool slowed = set_stand_in_delay(kHazardDelayUs);
  ok(A.memset_async(x, 0xAA, kN, side), "slow memsetAsync X on the side stream");
  ok(D->begin_capture_to_graph(s, graph, kCaptureModeRelaxed), "cuStreamBeginCaptureToGraph (relaxed)");
  ok(A.free(x), "free X in the capture");  // its memset may still be queued
  ok(A.alloc(&y, kN), "alloc Y in the capture");
  ok(A.memset(y, 0x55, kN), "memset Y");
  ok(A.memset_async(y, 0x11, kN, s), "captured memsetAsync Y");
  void* ended = nullptr;
  const int end = D->end_capture(s, &ended);
  std::printf("capture-to-graph: cuStreamEndCapture -> %d\n", end);
  expect(end, 0, "cuStreamEndCapture of a capture into the program's graph");
  if (ended != graph) fail("the capture ended with another graph than the program's", 0);
  ok(A.stream_sync(side), "side stream sync");
  ok(A.stream_sync(s), "stream sync");
  if (slowed) set_stand_in_delay(0);
  std::vector<unsigned char> buf(kN);
  auto count_not = [&](unsigned char want) {
    ok(A.dtoh(buf.data(), y, kN), "dtoh Y");
    size_t n = 0;
    for (unsigned char c : buf) n += c != want;
    return n;
  };
  if (size_t late = count_not(0x55); late != 0) {
    std::printf("capture-to-graph: CORRUPTED (%zu bytes of Y, allocated in the capture, hold "
                "the freed block's late write)\n", late);
    return kExitCorrupted;
  }
  void* exec = nullptr;
  ok(D->instantiate(&exec, graph), "cuGraphInstantiateWithFlags");
  ok(D->launch(exec, s), "cuGraphLaunch");
  ok(A.stream_sync(s), "stream sync");
  if (size_t wrong = count_not(0x11); wrong != 0) {
    std::printf("capture-to-graph: WRONG (%zu bytes of Y are not what the graph wrote)\n", wrong);
    return kExitWrong;
  }
  ok(D->exec_destroy(exec), "cuGraphExecDestroy");
  ok(D->graph_destroy(graph), "cuGraphDestroy");
  ok(A.free(y), "free");
  ok(A.free(z), "free");
  ok(A.stream_destroy(s), "stream destroy");
  ok(A.stream_destroy(side), "stream destroy");
  std::printf("capture-to-graph: the capture into the program's graph ended valid, no late "
              "write in its block; the graph replayed\n");
  return 0;
}

}  // namespace luma::programs

namespace luma::programs {
namespace {

// The other thread of capture-race: in relaxed mode (as a data loader, pin-memory or
// communication thread beside torch.cuda.graph is), it allocates and frees device blocks
// with work still queued on them (so frees are fenced and allocations wait for those
// fences), pinned host blocks and stream-ordered blocks, until `stop`. Errors other than
// running out of memory count as failures.
void race_churn(const std::atomic<bool>& stop, std::atomic<uint64_t>& ops,
                std::atomic<int>& failures) {
  const DriverCalls* D = driver_calls("capture-race");
  int mode = kCaptureModeRelaxed;
  if (D->exchange_capture_mode(&mode) != 0) ++failures;
  void* st = nullptr;
  if (A.stream_create(&st, true) != 0) {
    ++failures;
    return;
  }
  constexpr size_t kBig = 2u << 20;
  std::vector<void*> live;
  auto check = [&](int r, const char* what) {
    if (r == 0 || r == A.oom_code) return r == 0;
    std::fprintf(stderr, "%s: capture-race: the other thread's %s returned %d\n", g_prog, what, r);
    ++failures;
    return false;
  };
  for (uint64_t i = 0; !stop.load() && failures.load() == 0; ++i) {
    void* p = nullptr;
    if (check(A.alloc(&p, 4096), "cuMemAlloc (4 KiB)")) {
      check(A.memset_async(p, 1, 4096, st), "memsetAsync");
      check(A.free(p), "cuMemFree (4 KiB)");
    }
    // Large blocks, each freed with its memset still queued: under a memory limit the next
    // one waits for an earlier free's fence.
    if (i % 4 == 0 && check(A.alloc(&p, kBig), "cuMemAlloc (2 MiB)")) {
      check(A.memset_async(p, 2, kBig, st), "memsetAsync");
      live.push_back(p);
    }
    if (live.size() > 3 || (!live.empty() && i % 2 == 1)) {
      check(A.free(live.front()), "cuMemFree (2 MiB)");
      live.erase(live.begin());
    }
    void* h = nullptr;
    if (check(D->host_alloc(&h, 64 * 1024), "cuMemAllocHost")) check(D->host_free(h), "cuMemFreeHost");
    void* q = nullptr;
    if (check(A.alloc_async(&q, 64 * 1024, st), "cuMemAllocAsync"))
      check(A.free_async(q, st), "cuMemFreeAsync");
    ++ops;
    // Paced as a loader thread is: frees made during a capture wait for its end (luma can
    // fence nothing in a capturing context), so an unpaced loop only measures memory.
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (void* p : live) check(A.free(p), "cuMemFree (2 MiB)");
  check(A.stream_sync(st), "stream sync");
  check(A.stream_destroy(st), "stream destroy");
}

}  // namespace

// A capture beside another thread's allocations, ROUNDS times: the capturing thread begins a
// capture of MODE (global, thread-local, relaxed, or to-graph: relaxed, into a graph of the
// program's own) on a non-blocking stream, queues a memset into it and ends it, while the
// other thread (race_churn) allocates and frees. Counts the captures that ended invalidated
// (901): nothing the other thread does is forbidden by these captures, so with the driver
// alone there are none. With LUMA_FAKE_CAPTURE_HOLD_US the stand-in holds the capturing
// thread inside begin and end, the window where luma may not yet know of the capture.
int mode_capture_race(int argc, char** argv) {
  if (argc != 2) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-race");
  if (D == nullptr) return kExitSkip;
  const size_t rounds = parse(argv[0], "ROUNDS");
  const std::string mode_name = argv[1];
  int mode = 0;
  const bool to_graph = mode_name == "to-graph";
  if (mode_name == "global") mode = kCaptureModeGlobal;
  else if (mode_name == "thread-local") mode = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
  else if (mode_name == "relaxed" || to_graph) mode = kCaptureModeRelaxed;
  else return kExitUsage;
  void* s = nullptr;
  void* b = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  ok(A.alloc(&b, 4096), "alloc");
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  std::atomic<int> failures{0};
  std::thread other([&] { race_churn(stop, ops, failures); });
  while (ops.load() == 0 && failures.load() == 0) std::this_thread::yield();
  size_t invalidated = 0;
  for (size_t k = 0; k < rounds && failures.load() == 0; ++k) {
    void* graph = nullptr;
    if (to_graph) {
      ok(D->graph_create(&graph), "cuGraphCreate");
      ok(D->begin_capture_to_graph(s, graph, mode), "cuStreamBeginCaptureToGraph");
    } else {
      ok(D->begin_capture(s, mode), "cuStreamBeginCapture_v2");
    }
    const int queued = A.memset_async(b, static_cast<int>(k & 0xFF), 4096, s);
    const uint64_t seen = ops.load();
    for (int i = 0; i < 100 && ops.load() < seen + 2 && failures.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    void* ended = nullptr;
    const int r = D->end_capture(s, &ended);
    if (r == kCaptureInvalidated || queued == kCaptureInvalidated) {
      ++invalidated;
    } else if (r != 0 || queued != 0) {
      std::fprintf(stderr, "%s: capture-race: memsetAsync -> %d, cuStreamEndCapture -> %d\n",
                   g_prog, queued, r);
      ++failures;
    }
    if (ended != nullptr) ok(D->graph_destroy(ended), "cuGraphDestroy");
    else if (graph != nullptr) ok(D->graph_destroy(graph), "cuGraphDestroy");    // Between captures, as a training loop's steps are: the frees made during the capture
    // can be fenced and reused now.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  other.join();
  ok(A.free(b), "free");
  ok(A.stream_destroy(s), "stream destroy");
  if (failures.load() != 0) fail("capture-race: the other thread's calls", failures.load());
  std::printf("capture-race: %s: %zu of %zu captures invalidated\n", mode_name.c_str(),
              invalidated, rounds);
  return invalidated == 0 ? 0 : kExitWrong;
}

// A capture's end refused: another thread's cuStreamEndCapture of a global capture gets
// CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD and the capture goes on. That thread (relaxed) then
// allocates and frees with work queued, and a pinned block; the capturing thread's own end
// gives a graph.
int mode_capture_end_refused(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-end-refused");
  if (D == nullptr) return kExitSkip;
  constexpr int kWrongThread = 908;  // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
  void* s = nullptr;
  void* b = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  ok(A.alloc(&b, 4096), "alloc");
  ok(D->begin_capture(s, kCaptureModeGlobal), "cuStreamBeginCapture_v2 (global)");
  ok(A.memset_async(b, 7, 4096, s), "captured memsetAsync");
  int rc[5] = {-1, -1, -1, -1, -1};
  std::thread([&] {
    void* graph = nullptr;
    rc[0] = D->end_capture(s, &graph);
    int mode = kCaptureModeRelaxed;
    D->exchange_capture_mode(&mode);
    void* st = nullptr;
    rc[1] = A.stream_create(&st, true);
    for (int i = 0; i < 4 && rc[1] == 0; ++i) {
      void* p = nullptr;
      rc[2] = A.alloc(&p, 4096);
      if (rc[2] != 0) break;
      rc[3] = A.memset_async(p, 1, 4096, st);
      rc[4] = A.free(p);
    }
    void* h = nullptr;  // a pinned block: its free is fenced in every context
    if (rc[4] == 0) rc[4] = D->host_alloc(&h, 4096);
    if (rc[4] == 0) rc[4] = D->host_free(h);
    if (st != nullptr) A.stream_destroy(st);
  }).join();
  std::printf("capture-end-refused: another thread's cuStreamEndCapture -> %d; its alloc, "
              "memsetAsync, free (and pinned alloc, free) -> %d %d %d\n", rc[0], rc[2], rc[3], rc[4]);
  expect(rc[0], kWrongThread, "another thread's cuStreamEndCapture of a global capture");
  for (int k = 1; k < 5; ++k) expect(rc[k], 0, "the other thread's calls in the capture");
  void* graph = nullptr;
  const int end = D->end_capture(s, &graph);
  std::printf("capture-end-refused: the capturing thread's cuStreamEndCapture -> %d\n", end);
  expect(end, 0, "the capturing thread's cuStreamEndCapture");
  if (graph == nullptr) fail("no graph", 0);
  ok(D->graph_destroy(graph), "cuGraphDestroy");
  ok(A.free(b), "free");
  ok(A.stream_destroy(s), "stream destroy");
  return 0;
}

// A capture begun while another thread's free is inside luma's capture-refusal probe. The
// main thread's global capture ends and the stand-in holds it inside cuStreamEndCapture
// once it has ended (LUMA_FAKE_CAPTURE_HOLD_US), so luma still counts the capture as
// underway. A second thread (global mode) frees a block: luma, seeing a capture that
// forbids that thread's unsafe calls, asks the driver for one byte (served: the capture is
// over) and gives it back, and the stand-in holds it inside cuMemAlloc_v2 meanwhile. A
// third thread begins a global capture then: the probe's cuMemFree must not land in it.
// Without luma the free is the program's and lands before that capture begins.
int mode_capture_probe_race(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("capture-probe-race");
  if (D == nullptr) return kExitSkip;
  using namespace std::chrono_literals;
  void* s = nullptr;
  void* s2 = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  ok(A.stream_create(&s, true), "stream create (non-blocking)");
  ok(A.stream_create(&s2, true), "second stream create (non-blocking)");
  ok(A.alloc(&b, 4096), "alloc (freed beside the captures)");
  ok(A.alloc(&c, 4096), "alloc (captured)");
  ok(D->begin_capture(s, kCaptureModeGlobal), "cuStreamBeginCapture_v2 (global)");
  ok(A.memset_async(c, 7, 4096, s), "captured memsetAsync");
  std::atomic<int> phase{0};
  int free_rc = -1, begin_rc = -1, captured_rc = -1, end2_rc = -1;
  std::thread freer([&] {
    while (phase.load() < 1) std::this_thread::yield();
    std::this_thread::sleep_for(5ms);  // the main thread's capture has ended in the driver
    const bool held = set_stand_in_alloc_hold(20000);
    phase = 2;
    free_rc = A.free(b);
    if (held) set_stand_in_alloc_hold(0);
  });
  std::thread capturer([&] {
    while (phase.load() < 2) std::this_thread::yield();
    std::this_thread::sleep_for(5ms);  // the freer is inside luma's probe, if luma probes
    begin_rc = D->begin_capture(s2, kCaptureModeGlobal);
    if (begin_rc != 0) return;
    captured_rc = A.memset_async(c, 9, 4096, s2);
    void* g = nullptr;
    end2_rc = D->end_capture(s2, &g);
    if (g != nullptr) D->graph_destroy(g);
  });
  phase = 1;
  void* graph = nullptr;
  const int end = D->end_capture(s, &graph);
  freer.join();
  capturer.join();
  std::printf("capture-probe-race: end %d; the other thread's free %d; the third thread's begin %d, "
              "captured memsetAsync %d, end %d\n", end, free_rc, begin_rc, captured_rc, end2_rc);
  expect(end, 0, "the main thread's cuStreamEndCapture");
  expect(free_rc, 0, "the second thread's free");
  expect(begin_rc, 0, "the third thread's cuStreamBeginCapture_v2");
  expect(captured_rc, 0, "the third thread's captured memsetAsync");
  expect(end2_rc, 0, "the third thread's cuStreamEndCapture (its capture not invalidated)");
  if (graph != nullptr) ok(D->graph_destroy(graph), "cuGraphDestroy");
  ok(A.free(c), "free");
  ok(A.stream_destroy(s2), "stream destroy");
  ok(A.stream_destroy(s), "stream destroy");
  return 0;
}

}  // namespace luma::programs
