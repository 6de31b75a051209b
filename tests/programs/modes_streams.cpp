// modes_streams.cpp - the workload's modes about streams: a block freed while a stream
// still writes it (hazard, hazard-streams: luma's fences), reuse in one stream's order
// (stream-order), and stream-ordered allocation and free (async, free-async-cached).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {

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

// The end of stream-ordered reuse: a block X written by a slow memsetAsync is freed while
// the one thread uses only its default streams (so it is reusable at once), then the
// order ends - WHAT is `thread` (a second thread makes the context current and takes the
// block for a memsetAsync on its own per-thread stream, which is not ordered with the
// first thread's) or `stream` (the thread makes a non-blocking stream and takes the block
// for a memsetAsync there). The block must hold the second write: the first must have run
// before it. Prints whether the block came back.
int mode_stream_order_ends(int argc, char** argv) {
  if (argc != 1) return kExitUsage;
  const bool by_thread = std::strcmp(argv[0], "thread") == 0;
  if (!by_thread && std::strcmp(argv[0], "stream") != 0) return kExitUsage;
  void* const per_thread = reinterpret_cast<void*>(0x2);  // CU_STREAM_PER_THREAD
  const size_t n = kMiB;
  void* x = nullptr;
  void* y = nullptr;
  ok(A.alloc(&x, n), "alloc X");
  ok(A.memset(x, 0, n), "memset X");
  const bool slowed = set_stand_in_delay(kHazardDelayUs);
  ok(A.memset_async(x, 0xAA, n, by_thread ? per_thread : nullptr), "slow memsetAsync X");
  // Let the stream take the slow write before the delay is lifted for the second one.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (slowed) set_stand_in_delay(0);
  ok(A.free(x), "free X");
  void* other = nullptr;
  if (by_thread) {
    int rc[3] = {-1, -1, -1};
    std::thread([&] {
      rc[0] = A.alloc(&y, n);  // the thread's first call: the context becomes current on it
      if (rc[0] == 0) rc[1] = A.memset_async(y, 0x55, n, per_thread);
      if (rc[1] == 0) rc[2] = A.stream_sync(per_thread);
    }).join();
    for (int r : rc) expect(r, 0, "the second thread's alloc, memsetAsync, sync");
  } else {
    ok(A.stream_create(&other, true), "stream create (non-blocking)");
    ok(A.alloc(&y, n), "alloc Y");
    ok(A.memset_async(y, 0x55, n, other), "memsetAsync Y on the new stream");
    ok(A.stream_sync(other), "stream sync");
  }
  std::vector<unsigned char> buf(n);
  ok(A.dtoh(buf.data(), y, n), "dtoh Y");  // after every write (the legacy stream)
  size_t late = 0;
  for (unsigned char c : buf) late += c != 0x55;
  std::printf("stream-order-ends: %s: the freed block %s\n", argv[0],
              x == y ? "came back" : "did not come back");
  if (late != 0) {
    std::printf("stream-order-ends: CORRUPTED (%zu bytes of Y hold the freed block's late write)\n", late);
    return kExitCorrupted;
  }
  ok(A.free(y), "free Y");
  if (other != nullptr) ok(A.stream_destroy(other), "stream destroy");
  return 0;
}

// Two threads in the legacy order, as PyTorch's main thread and its autograd thread: ROUNDS
// rounds in which the main thread writes a block X with a slow memsetAsync on its
// per-thread stream, and the second thread (which made the context current) frees X, takes
// a block Y of its size and writes it with a memsetAsync on ITS per-thread stream - not
// ordered with the main thread's, only through the legacy stream. Y must hold the second
// write. X is large enough to be a segment of its own, so Y is X (reused) or new memory.
// With `nonblocking` the main thread first makes a non-blocking stream (used for nothing).
// Prints how many rounds got the freed block back.
int mode_stream_order_threads(int argc, char** argv) {
  if (argc < 1 || argc > 2) return kExitUsage;
  const size_t rounds = parse(argv[0], "ROUNDS");
  const bool nonblocking = argc == 2 && std::strcmp(argv[1], "nonblocking") == 0;
  if (argc == 2 && !nonblocking) return kExitUsage;
  void* const per_thread = reinterpret_cast<void*>(0x2);  // CU_STREAM_PER_THREAD
  // A block of its own segment (beyond the large segments' size): Y can only be X again,
  // or new memory.
  const size_t n = 64 * kMiB;
  void* other = nullptr;
  if (nonblocking) ok(A.stream_create(&other, true), "stream create (non-blocking)");
  void* warm = nullptr;  // the second thread is known before the rounds begin
  std::thread([&] { ok(A.alloc(&warm, 4096), "the second thread's first alloc"); }).join();
  ok(A.free(warm), "free");
  std::vector<unsigned char> buf(n);
  size_t same = 0;
  for (size_t r = 0; r < rounds; ++r) {
    void* x = nullptr;
    void* y = nullptr;
    ok(A.alloc(&x, n), "alloc X");
    const bool slowed = set_stand_in_delay(kHazardDelayUs);
    ok(A.memset_async(x, 0xAA, n, per_thread), "slow memsetAsync X on the main thread's stream");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the stream takes the slow write
    if (slowed) set_stand_in_delay(0);
    int rc[4] = {-1, -1, -1, -1};
    const int value = static_cast<int>(0x40 | (r & 0x3F));
    std::thread([&] {
      rc[0] = A.free(x);
      if (rc[0] == 0) rc[1] = A.alloc(&y, n);
      if (rc[1] == 0) rc[2] = A.memset_async(y, value, n, per_thread);
      if (rc[2] == 0) rc[3] = A.stream_sync(per_thread);
    }).join();
    for (int c : rc) expect(c, 0, "the second thread's free, alloc, memsetAsync, sync");
    ok(A.dtoh(buf.data(), y, n), "dtoh Y");  // the legacy stream: after every write
    size_t late = 0;
    for (unsigned char c : buf) late += c != static_cast<unsigned char>(value);
    if (late != 0) {
      std::printf("stream-order-threads: CORRUPTED (round %zu: %zu bytes of Y hold the freed "
                  "block's late write)\n", r, late);
      return kExitCorrupted;
    }
    same += x == y ? 1 : 0;
    ok(A.free(y), "free Y");
  }
  if (other != nullptr) ok(A.stream_destroy(other), "stream destroy");
  std::printf("stream-order-threads: %zu of %zu rounds got the freed block back; data right\n", same, rounds);
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

}  // namespace luma::programs
