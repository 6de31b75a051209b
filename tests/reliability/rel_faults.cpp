// rel_faults.cpp - luma under injected driver faults (the stand-in's knobs, fake_control.h):
//   fail-every N   every Nth driver allocation fails
//   capacity       the device fills up; memory comes back after frees
//   events N       every Nth event/stream call fails (fences must fall back to a sync)
//   lost           the device disappears, then comes back
//   lost-code      strict: an allocation that needs the lost device gets its error (46)
// Each mode checks the codes the program sees, that every block it got is usable and
// never overlaps another (tags), that allocations succeed again once the fault is gone,
// and ends with squeeze_and_count(): all freed, the device's capacity set to zero so
// luma's out-of-memory path hands its whole cache back, then the driver must hold no
// allocation at all (nothing leaked). Runs with or without luma.
// Usage: rel_faults MODE [N]
#include <random>
#include <thread>
#include <vector>

#include "rel_common.h"

namespace luma::reliability {
namespace {

const char* g_prog = "rel_faults";
CUcontext g_ctx[kMaxDevices] = {};
int g_devices = 0;
constexpr std::uint64_t kCapacity = 1ull << 30;  // the stand-in's default

struct Block {
  CUdeviceptr p = 0;
  std::size_t n = 0;
  std::uint64_t id = 0;
};

std::uint64_t g_next_id = 1;

void expect(bool ok, const std::string& what) {
  if (!ok) die(g_prog, what);
}

// Allocates n bytes; on success tags the block and appends it.
CUresult alloc(std::vector<Block>& live, std::size_t n) {
  Block b{0, n, g_next_id++};
  CUresult r = cuMemAlloc_v2(&b.p, n);
  if (r == CUDA_SUCCESS) {
    write_tag(as_ptr(b.p), b.n, b.id);
    live.push_back(b);
  }
  return r;
}

void free_all(std::vector<Block>& live) {
  for (const Block& b : live) {
    std::string why = check_tag(as_ptr(b.p), b.n, b.id);
    expect(why.empty(), "block " + std::to_string(b.id) + ": " + why);
    CUresult r = cuMemFree_v2(b.p);
    expect(r == CUDA_SUCCESS, "cuMemFree returned " + std::to_string(r));
  }
  live.clear();
}

// With nothing live, squeezes every device to zero capacity and asks for more than any
// cached block (so luma must go to the driver, be refused, release its cache and retry),
// then returns the allocations the driver still holds.
std::uint64_t squeeze_and_count() {
  std::uint64_t held = 0;
  luma_fake_set_fail_every(0);
  luma_fake_set_capacity(0);
  for (int d = 0; d < g_devices; ++d) {
    expect(cuCtxSetCurrent(g_ctx[d]) == CUDA_SUCCESS, "cuCtxSetCurrent");
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, std::size_t{1} << 40);
    expect(r == CUDA_ERROR_OUT_OF_MEMORY,
           "alloc at zero capacity returned " + std::to_string(r) + ", expected 2");
    luma_fake_counters c{};
    expect(luma_fake_get_counters(d, &c) == 0, "counters");
    held += c.live_allocations;
  }
  luma_fake_set_capacity(kCapacity);
  expect(cuCtxSetCurrent(g_ctx[0]) == CUDA_SUCCESS, "cuCtxSetCurrent");
  return held;
}

void expect_no_leak() {
  std::uint64_t held = squeeze_and_count();
  expect(held == 0, std::to_string(held) + " driver allocations leaked after free + empty");
  // Memory is back: allocations succeed again.
  std::vector<Block> live;
  for (std::size_t n : {std::size_t{512}, std::size_t{1} << 20, std::size_t{64} << 20}) {
    CUresult r = alloc(live, n);
    expect(r == CUDA_SUCCESS, "alloc after the squeeze returned " + std::to_string(r));
  }
  free_all(live);
}

std::size_t random_size(std::mt19937_64& rng) {
  std::uint64_t k = rng() % 10;
  if (k < 6) return 1 + rng() % 8192;
  if (k < 9) return 8192 + rng() % (1 << 20);
  return (1 << 20) + rng() % (32 << 20);
}

int mode_fail_every(std::uint64_t every) {
  std::mt19937_64 rng(11);
  std::vector<Block> live;
  std::uint64_t failed = 0, ok = 0;
  luma_fake_set_fail_every(every);
  for (int i = 0; i < 20000; ++i) {
    if (!live.empty() && (live.size() > 40 || rng() % 2 == 0)) {
      std::size_t k = rng() % live.size();
      std::swap(live[k], live.back());
      std::vector<Block> one{live.back()};
      live.pop_back();
      free_all(one);
      continue;
    }
    CUresult r = alloc(live, random_size(rng));
    expect(r == CUDA_SUCCESS || r == CUDA_ERROR_OUT_OF_MEMORY,
           "alloc under injected failures returned " + std::to_string(r));
    (r == CUDA_SUCCESS ? ok : failed) += 1;
  }
  luma_fake_set_fail_every(0);
  for (int i = 0; i < 200; ++i)
    expect(alloc(live, random_size(rng)) == CUDA_SUCCESS, "alloc after injection stopped");
  free_all(live);
  expect_no_leak();
  luma_fake_counters c{};
  luma_fake_get_counters(0, &c);
  std::printf("fail-every %llu: %llu allocations served, %llu refused with 2; the driver refused "
              "%llu; no leak\n",
              static_cast<unsigned long long>(every), static_cast<unsigned long long>(ok),
              static_cast<unsigned long long>(failed),
              static_cast<unsigned long long>(c.failed_allocs));
  return kExitOk;
}

int mode_capacity() {
  constexpr std::size_t kCap = 64u << 20, kChunk = 1u << 20;
  luma_fake_set_capacity(kCap);
  std::vector<Block> live;
  CUresult last = CUDA_SUCCESS;
  while (live.size() < 1000 && (last = alloc(live, kChunk)) == CUDA_SUCCESS) {
  }
  expect(last == CUDA_ERROR_OUT_OF_MEMORY, "alloc past capacity returned " + std::to_string(last));
  const std::size_t fitted = live.size();
  expect(fitted > 0 && fitted <= kCap / kChunk, "fitted " + std::to_string(fitted) + " chunks");
  // Free every other block: the memory comes back and is reused.
  std::vector<Block> keep, drop;
  for (std::size_t i = 0; i < live.size(); ++i) (i % 2 ? drop : keep).push_back(live[i]);
  free_all(drop);
  live = keep;
  std::size_t again = 0;
  while (alloc(live, kChunk) == CUDA_SUCCESS) ++again;
  expect(again >= fitted / 2, "after freeing " + std::to_string(fitted - fitted / 2) +
                                  " chunks only " + std::to_string(again) + " fitted again");
  free_all(live);
  // One block of most of the device: luma must hand its cached 1 MiB segments back first.
  CUresult r = alloc(live, kCap - (4u << 20));
  expect(r == CUDA_SUCCESS, "one large block after freeing everything returned " + std::to_string(r));
  free_all(live);
  luma_fake_set_capacity(kCapacity);
  expect_no_leak();
  std::printf("capacity: %zu chunks of 1 MiB fitted in 64 MiB, out of memory = 2, %zu fitted "
              "again after freeing half, 60 MiB block after freeing all; no leak\n",
              fitted, again);
  return kExitOk;
}

// A non-blocking stream's slow write to X, then free X and reuse: under any fence failure
// luma must still never hand X out while the write is pending.
int mode_events(std::uint64_t every) {
  constexpr std::size_t kN = 1u << 20;
  luma_fake_set_delay_us(20000);
  luma_fake_set_fail_events(every);
  int corrupted = 0, rounds = 0;
  for (; rounds < 24; ++rounds) {
    // The program's own stream is made with injection paused: only luma's fences fail.
    CUstream s = nullptr;
    luma_fake_set_fail_events(0);
    CUresult r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    luma_fake_set_fail_events(every);
    expect(r == CUDA_SUCCESS, "cuStreamCreate returned " + std::to_string(r));
    CUdeviceptr x = 0, y = 0;
    expect(cuMemAlloc_v2(&x, kN) == CUDA_SUCCESS, "alloc X");
    expect(cuMemsetD8_v2(x, 0, kN) == CUDA_SUCCESS, "memset X");
    expect(cuMemsetD8Async(x, 0xAA, kN, s) == CUDA_SUCCESS, "memsetAsync X");
    r = cuMemFree_v2(x);
    expect(r == CUDA_SUCCESS, "free X under event failures returned " + std::to_string(r));
    expect(cuMemAlloc_v2(&y, kN) == CUDA_SUCCESS, "alloc Y");
    expect(cuMemsetD8_v2(y, 0x55, kN) == CUDA_SUCCESS, "memset Y");
    expect(cuStreamSynchronize(s) == CUDA_SUCCESS, "stream sync");
    std::vector<unsigned char> buf(kN);
    expect(cuMemcpyDtoH_v2(buf.data(), y, kN) == CUDA_SUCCESS, "dtoh Y");
    for (unsigned char c : buf) {
      if (c != 0x55) {
        ++corrupted;
        break;
      }
    }
    expect(cuMemFree_v2(y) == CUDA_SUCCESS, "free Y");
    expect(cuStreamDestroy_v2(s) == CUDA_SUCCESS, "stream destroy");
  }
  luma_fake_set_delay_us(0);
  expect(corrupted == 0, std::to_string(corrupted) + " of " + std::to_string(rounds) +
                             " rounds saw the freed block's late write: CORRUPTED");
  // Plain churn under event failures: every call the program makes still succeeds.
  std::vector<Block> live;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 5000; ++i) {
    CUresult r = alloc(live, random_size(rng));
    expect(r == CUDA_SUCCESS, "alloc under event failures returned " + std::to_string(r));
    if (live.size() > 8) free_all(live);
  }
  free_all(live);
  const std::uint64_t injected = luma_fake_injected_event_failures();
  luma_fake_set_fail_events(0);
  expect_no_leak();
  std::printf("events %llu: %d hazard rounds CLEAN, 5000 allocations ok, %llu event/stream calls "
              "failed by injection; no leak\n",
              static_cast<unsigned long long>(every), rounds,
              static_cast<unsigned long long>(injected));
  return kExitOk;
}

int mode_lost(bool strict) {
  std::vector<Block> live;
  expect(alloc(live, 4096) == CUDA_SUCCESS, "alloc");
  expect(alloc(live, 3u << 20) == CUDA_SUCCESS, "alloc");
  luma_fake_lose_device();
  CUdeviceptr p = 0;
  // Larger than anything cached: needs the (lost) device.
  CUresult r = cuMemAlloc_v2(&p, 256u << 20);
  if (strict) {
    expect(r == 46, "alloc needing the lost device returned " + std::to_string(r) +
                        ", expected the driver's 46 (CUDA_ERROR_DEVICE_UNAVAILABLE)");
  } else {
    expect(r != CUDA_SUCCESS, "alloc needing the lost device succeeded");
  }
  // Frees and copies of blocks on a lost device: any answer, but no crash and no hang.
  const Block gone = live.back();
  CUresult rf = cuMemFree_v2(gone.p);
  live.pop_back();
  CUresult rm = cuMemsetD8_v2(live.back().p, 1, 16);
  expect(rm == 46, "memset on the lost device returned " + std::to_string(rm));
  luma_fake_restore_device();
  // A free the lost device refused is made again (the bare driver kept the memory).
  if (rf != CUDA_SUCCESS) {
    CUresult again = cuMemFree_v2(gone.p);
    expect(again == CUDA_SUCCESS, "free once the device is back returned " + std::to_string(again));
  }
  std::vector<Block> after;
  expect(alloc(after, 1u << 20) == CUDA_SUCCESS, "alloc once the device is back");
  free_all(after);
  free_all(live);
  expect_no_leak();
  std::printf("lost: alloc needing the lost device -> %d, free of a live block -> %d, memset -> "
              "%d; allocations succeed once it is back; no leak\n",
              r, rf, rm);
  return kExitOk;
}

}  // namespace
}  // namespace luma::reliability

int main(int argc, char** argv) {
  using namespace luma::reliability;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s fail-every N | capacity | events N | lost | lost-code\n",
                 g_prog);
    return kExitUsage;
  }
  g_devices = bring_up(g_prog, g_ctx);
  const std::string mode = argv[1];
  auto arg = [&] { return argc > 2 ? parse_u64(g_prog, argv[2], "N") : 0; };
  if (mode == "fail-every") return mode_fail_every(arg() ? arg() : 7);
  if (mode == "capacity") return mode_capacity();
  if (mode == "events") return mode_events(arg() ? arg() : 3);
  if (mode == "lost") return mode_lost(false);
  if (mode == "lost-code") return mode_lost(true);
  std::fprintf(stderr, "%s: unknown mode '%s'\n", g_prog, mode.c_str());
  return kExitUsage;
}
