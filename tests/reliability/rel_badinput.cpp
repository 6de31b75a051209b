// rel_badinput.cpp - bad calls a host program may make, through the driver API: invalid
// pointers, double frees (also racing on several threads), frees from other threads and
// with other devices current, absurd sizes. Each must get the real driver's error code
// (CUDA_ERROR_INVALID_VALUE = 1 for a bad free, CUDA_ERROR_OUT_OF_MEMORY = 2 for a size no
// device holds), never a crash, and must leave every live block of the program intact.
// Prints one line per check; exit 0 only when all held.
#include <atomic>
#include <barrier>
#include <thread>
#include <vector>

#include "rel_common.h"

namespace luma::reliability {
namespace {

const char* g_prog = "rel_badinput";
CUcontext g_ctx[kMaxDevices] = {};
int g_checks = 0;

void expect_code(CUresult got, CUresult want, const std::string& what) {
  if (got != want)
    die(g_prog, what + " returned " + std::to_string(got) + ", expected " + std::to_string(want));
  ++g_checks;
}

CUdeviceptr must_alloc(std::size_t n) {
  CUdeviceptr p = 0;
  expect_code(cuMemAlloc_v2(&p, n), CUDA_SUCCESS, "alloc(" + std::to_string(n) + ")");
  return p;
}

}  // namespace
}  // namespace luma::reliability

int main() {
  using namespace luma::reliability;
  const int devices = bring_up(g_prog, g_ctx);

  // A block that must survive everything below untouched.
  const CUdeviceptr keep = must_alloc(100000);
  write_tag(as_ptr(keep), 100000, 42);

  // Invalid pointers.
  const CUdeviceptr p = must_alloc(1 << 20);
  int on_stack = 0;
  expect_code(cuMemFree_v2(p + 256), CUDA_ERROR_INVALID_VALUE, "free(interior pointer)");
  expect_code(cuMemFree_v2(p + 1), CUDA_ERROR_INVALID_VALUE, "free(unaligned interior pointer)");
  expect_code(cuMemFree_v2(reinterpret_cast<CUdeviceptr>(&on_stack)), CUDA_ERROR_INVALID_VALUE,
              "free(host stack address)");
  expect_code(cuMemFree_v2(1), CUDA_ERROR_INVALID_VALUE, "free(0x1)");
  expect_code(cuMemFree_v2(~0ull), CUDA_ERROR_INVALID_VALUE, "free(0xffff...)");
  expect_code(cuMemFree_v2(~0ull - 255), CUDA_ERROR_INVALID_VALUE, "free(top of the address space)");
  expect_code(cuMemFree_v2(0), CUDA_SUCCESS, "free(0)");
  CUdeviceptr none = 0;
  expect_code(cuMemAlloc_v2(nullptr, 64), CUDA_ERROR_INVALID_VALUE, "alloc(null out-pointer)");
  expect_code(cuMemAlloc_v2(&none, 0), CUDA_ERROR_INVALID_VALUE, "alloc(0 bytes)");

  // Double frees.
  expect_code(cuMemFree_v2(p), CUDA_SUCCESS, "free");
  expect_code(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE, "second free of the same pointer");
  expect_code(cuMemFree_v2(p + 256), CUDA_ERROR_INVALID_VALUE, "free inside a freed block");

  // Absurd sizes: no device holds them, none may wrap around to a small block.
  for (std::size_t n : {SIZE_MAX, SIZE_MAX - 255, SIZE_MAX / 2 + 1, std::size_t{1} << 48,
                        (std::size_t{1} << 30) + 1}) {
    CUdeviceptr q = 0;
    expect_code(cuMemAlloc_v2(&q, n), CUDA_ERROR_OUT_OF_MEMORY, "alloc(" + std::to_string(n) + ")");
  }
  CUdeviceptr q = 0;
  std::size_t pitch = 0;
  CUresult rp = cuMemAllocPitch_v2(&q, &pitch, std::size_t{1} << 40, std::size_t{1} << 40, 4);
  if (rp != CUDA_ERROR_OUT_OF_MEMORY && rp != CUDA_ERROR_INVALID_VALUE)
    die(g_prog, "alloc pitch 2^40 x 2^40 returned " + std::to_string(rp));
  rp = cuMemAllocPitch_v2(&q, &pitch, SIZE_MAX, 2, 4);
  if (rp != CUDA_ERROR_OUT_OF_MEMORY && rp != CUDA_ERROR_INVALID_VALUE)
    die(g_prog, "alloc pitch SIZE_MAX x 2 returned " + std::to_string(rp));
  g_checks += 2;

  // Racing double frees: of 8 threads freeing the same block at once exactly one succeeds.
  constexpr int kThreads = 8, kRounds = 300;
  int bad_rounds = 0;
  for (int round = 0; round < kRounds; ++round) {
    const CUdeviceptr b = must_alloc(512 + 512 * static_cast<std::size_t>(round % 7));
    std::barrier start(kThreads);
    std::atomic<int> ok{0}, invalid{0}, other{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        cuCtxSetCurrent(g_ctx[t % devices]);  // some with another device current
        start.arrive_and_wait();
        CUresult r = cuMemFree_v2(b);
        (r == CUDA_SUCCESS ? ok : r == CUDA_ERROR_INVALID_VALUE ? invalid : other) += 1;
      });
    }
    for (auto& t : ts) t.join();
    if (ok != 1 || invalid != kThreads - 1 || other != 0) ++bad_rounds;
  }
  if (bad_rounds != 0)
    die(g_prog, std::to_string(bad_rounds) + " rounds of racing double frees did not give "
                "exactly one success and 7 x error 1");
  ++g_checks;

  // Frees from another thread with each other device current.
  for (int d = 0; d < devices; ++d) {
    cuCtxSetCurrent(g_ctx[d]);
    const CUdeviceptr b = must_alloc(3 << 20);
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::thread([&] {
      cuCtxSetCurrent(g_ctx[(d + 1) % devices]);
      r = cuMemFree_v2(b);
    }).join();
    expect_code(r, CUDA_SUCCESS, "free from another thread with another device current");
  }
  cuCtxSetCurrent(g_ctx[0]);

  std::string why = check_tag(as_ptr(keep), 100000, 42);
  if (!why.empty()) die(g_prog, "the program's live block was disturbed: " + why);
  expect_code(cuMemFree_v2(keep), CUDA_SUCCESS, "free of the kept block");
  std::printf("rel_badinput: %d checks held (invalid, interior, double and racing frees, absurd "
              "sizes, frees across threads and devices)\n",
              g_checks);
  return kExitOk;
}
