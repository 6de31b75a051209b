// fake_host_memory.cpp - page-locked host memory of the stand-in driver (a TEST DOUBLE),
// beyond the allocation itself (fake_driver.cpp): the cost of pinning, the host counters,
// cuMemHostGetFlags. README.md names the source of each behaviour.
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "fake_state.h"

#define LUMA_FAKE_API __attribute__((visibility("default")))
#include "fake_control.h"
#include "fake_driver_api.h"

namespace luma::fake {
namespace {

struct HostCounters {
  std::atomic<uint64_t> alloc_calls{0}, free_calls{0}, live{0}, live_bytes{0};
};
HostCounters g_counters;

// LUMA_FAKE_HOST_ALLOC_US, read once (a plain number of microseconds).
std::atomic<uint64_t>& alloc_cost_us() {
  static std::atomic<uint64_t> us{[] {
    const char* v = std::getenv("LUMA_FAKE_HOST_ALLOC_US");
    if (v == nullptr || *v == '\0') return uint64_t{0};
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    return *end == '\0' && *v != '-' ? static_cast<uint64_t>(n) : uint64_t{0};
  }()};
  return us;
}

// Sleeps us microseconds, whole (nanosleep resumes after a signal).
void pause_us(uint64_t us) {
  timespec left{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  while (nanosleep(&left, &left) != 0) {
  }
}

}  // namespace

void pinned_allocated(size_t size) {
  if (uint64_t us = alloc_cost_us().load()) pause_us(us);
  ++g_counters.alloc_calls;
  ++g_counters.live;
  g_counters.live_bytes += size;
}

void pinned_freed(size_t size) {
  ++g_counters.free_calls;
  --g_counters.live;
  g_counters.live_bytes -= size;
}

}  // namespace luma::fake

using namespace luma::fake;

extern "C" {

// The flags the block was allocated with (cuMemAllocHost_v2: 0). Any address inside a
// page-locked allocation is accepted; anything else is CUDA_ERROR_INVALID_VALUE.
CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (CUresult r = ready()) return r;
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  std::lock_guard lock(st.mem_m);
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = st.allocations.upper_bound(addr);
  if (it == st.allocations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (it->second.kind != MemKind::kHost || addr >= it->first + (it->second.size == 0 ? 1 : it->second.size))
    return CUDA_ERROR_INVALID_VALUE;
  *pFlags = it->second.flags;
  return CUDA_SUCCESS;
}

void luma_fake_get_host_counters(struct luma_fake_host_counters* out) {
  if (out == nullptr) return;
  out->alloc_calls = g_counters.alloc_calls.load();
  out->free_calls = g_counters.free_calls.load();
  out->live_allocations = g_counters.live.load();
  out->live_bytes = g_counters.live_bytes.load();
}

void luma_fake_set_host_alloc_us(uint64_t us) { alloc_cost_us() = us; }

}  // extern "C"

namespace luma::fake {
void reset_host_memory() {
  g_counters.alloc_calls = 0;
  g_counters.free_calls = 0;
}
}  // namespace luma::fake

extern "C" {

}  // extern "C"
