// rel_stress.cpp - load test of luma through the driver API: THREADS threads (device =
// thread % devices) each make N random allocations of mixed sizes and free every block
// again (up to 32 live per thread, frees interleaved at random). Every block is tagged
// when allocated and its tag checked before it is freed, so any overlap between two live
// blocks, or a block handed out twice, is caught. One block in COPY_EVERY is also written
// and read back through the driver (cuMemsetD8 + cuMemcpyDtoH), and about one free in
// sixteen happens on another thread (often with another device current) through a shared
// hand-off list. Prints one summary line; exit 0 only when no error was seen.
// Usage: rel_stress THREADS N [COPY_EVERY]
#include <atomic>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "rel_common.h"

namespace luma::reliability {
namespace {

const char* g_prog = "rel_stress";
CUcontext g_ctx[kMaxDevices] = {};

struct Block {
  CUdeviceptr p = 0;
  std::size_t n = 0;
  std::uint64_t id = 0;
};

// Blocks handed to whichever thread frees next (frees from other threads and devices).
std::mutex g_handoff_m;
std::vector<Block> g_handoff;
constexpr std::size_t kHandoffMax = 256;

std::atomic<std::uint64_t> g_errors{0}, g_allocs{0}, g_frees{0}, g_foreign_frees{0},
    g_driver_checks{0};

void error(const std::string& what) {
  if (g_errors.fetch_add(1) < 20) std::fprintf(stderr, "%s: %s\n", g_prog, what.c_str());
}

// Mostly small, some medium, a few large (past the small pool and the oversize limit).
std::size_t random_size(std::mt19937_64& rng) {
  std::uint64_t k = rng() % 100;
  if (k < 60) return 1 + rng() % 4096;
  if (k < 90) return 4096 + rng() % (256 * 1024);
  if (k < 99) return 256 * 1024 + rng() % (4 << 20);
  return (4 << 20) + rng() % (12 << 20);
}

bool driver_check(const Block& b, std::vector<unsigned char>& buf) {
  const std::size_t n = b.n < 4096 ? b.n : 4096;
  const unsigned char v = static_cast<unsigned char>(b.id * 7 + 3);
  buf.assign(n, 0);
  if (CUresult r = cuMemsetD8_v2(b.p, v, n)) {
    error("cuMemsetD8 returned " + std::to_string(r));
    return false;
  }
  if (CUresult r = cuMemcpyDtoH_v2(buf.data(), b.p, n)) {
    error("cuMemcpyDtoH returned " + std::to_string(r));
    return false;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (buf[i] != v) {
      error("driver copy of block " + std::to_string(b.id) + " differs at byte " +
            std::to_string(i));
      return false;
    }
  }
  write_tag(as_ptr(b.p), b.n, b.id);  // the memset overwrote the tag
  ++g_driver_checks;
  return true;
}

void release(const Block& b, bool foreign) {
  std::string why = check_tag(as_ptr(b.p), b.n, b.id);
  if (!why.empty()) error("block " + std::to_string(b.id) + " (" + std::to_string(b.n) +
                          " bytes): " + why);
  if (CUresult r = cuMemFree_v2(b.p)) error("cuMemFree returned " + std::to_string(r));
  ++g_frees;
  if (foreign) ++g_foreign_frees;
}

void worker(std::size_t t, std::uint64_t n, std::uint64_t copy_every, int devices) {
  std::mt19937_64 rng(0x5eed + t);
  if (cuCtxSetCurrent(g_ctx[t % static_cast<std::size_t>(devices)]) != CUDA_SUCCESS) {
    error("cuCtxSetCurrent failed");
    return;
  }
  std::vector<Block> live;
  std::vector<unsigned char> buf;
  constexpr std::size_t kMaxLive = 32;
  // N counts this thread's allocations (each block is freed too, by this thread or another).
  std::uint64_t made = 0;
  for (std::uint64_t i = 0; made < n; ++i) {
    const std::uint64_t dice = rng() % 16;
    if (dice == 0) {  // free one handed over by another thread
      Block b;
      {
        std::lock_guard lock(g_handoff_m);
        if (!g_handoff.empty()) {
          b = g_handoff.back();
          g_handoff.pop_back();
        }
      }
      if (b.p != 0) {
        release(b, true);
        continue;
      }
    }
    if (live.size() < kMaxLive && (live.empty() || dice < 9)) {
      Block b;
      b.n = random_size(rng);
      b.id = (static_cast<std::uint64_t>(t) << 40) | i;
      if (CUresult r = cuMemAlloc_v2(&b.p, b.n)) {
        error("cuMemAlloc(" + std::to_string(b.n) + ") returned " + std::to_string(r));
        continue;
      }
      ++g_allocs;
      ++made;
      if (b.p % kGranule != 0) error("misaligned block");
      write_tag(as_ptr(b.p), b.n, b.id);
      if (copy_every != 0 && b.id % copy_every == 0) driver_check(b, buf);
      live.push_back(b);
    } else {
      const std::size_t k = rng() % live.size();
      const Block b = live[k];
      live[k] = live.back();
      live.pop_back();
      if (dice == 15) {  // hand it to another thread
        std::lock_guard lock(g_handoff_m);
        if (g_handoff.size() < kHandoffMax) {
          // Check now too: the tag must still hold when it is handed over.
          std::string why = check_tag(as_ptr(b.p), b.n, b.id);
          if (!why.empty()) error("block " + std::to_string(b.id) + ": " + why);
          g_handoff.push_back(b);
          continue;
        }
      }
      release(b, false);
    }
  }
  for (const Block& b : live) release(b, false);
}

}  // namespace
}  // namespace luma::reliability

int main(int argc, char** argv) {
  using namespace luma::reliability;
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s THREADS N [COPY_EVERY]\n", g_prog);
    return kExitUsage;
  }
  const std::uint64_t threads = parse_u64(g_prog, argv[1], "THREADS");
  const std::uint64_t n = parse_u64(g_prog, argv[2], "N");
  const std::uint64_t copy_every = argc == 4 ? parse_u64(g_prog, argv[3], "COPY_EVERY") : 64;
  if (threads == 0 || threads > 256) return kExitUsage;
  const int devices = bring_up(g_prog, g_ctx);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) pool.emplace_back(worker, t, n, copy_every, devices);
  for (auto& th : pool) th.join();
  for (const Block& b : g_handoff) release(b, true);  // what nobody picked up
  g_handoff.clear();
  std::printf("rel_stress: %llu threads x %llu allocations: %llu allocations, %llu frees "
              "(%llu on another thread), %llu driver copies checked, %llu errors\n",
              static_cast<unsigned long long>(threads), static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(g_allocs.load()),
              static_cast<unsigned long long>(g_frees.load()),
              static_cast<unsigned long long>(g_foreign_frees.load()),
              static_cast<unsigned long long>(g_driver_checks.load()),
              static_cast<unsigned long long>(g_errors.load()));
  if (g_allocs.load() != g_frees.load()) {
    std::fprintf(stderr, "%s: %llu allocations but %llu frees\n", g_prog,
                 static_cast<unsigned long long>(g_allocs.load()),
                 static_cast<unsigned long long>(g_frees.load()));
    return kExitWrong;
  }
  return g_errors.load() == 0 ? kExitOk : kExitWrong;
}
