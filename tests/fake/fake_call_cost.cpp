// fake_call_cost.cpp - see fake_call_cost.h. A spin, not a sleep: the real calls keep the
// calling thread busy (a driver lock, a write to or read of host-mapped memory), and a
// sleep of a microsecond costs far more than a microsecond on Linux.
#include "fake_call_cost.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace luma::fake {
namespace {

constexpr std::uint64_t kCostNs[] = {
#define LUMA_FAKE_COST_NS(name, driver_name, ns, per_stream_ns) ns,
    LUMA_FAKE_CALL_COSTS(LUMA_FAKE_COST_NS)
#undef LUMA_FAKE_COST_NS
};
constexpr std::uint64_t kPerStreamNs[] = {
#define LUMA_FAKE_COST_PER_STREAM(name, driver_name, ns, per_stream_ns) per_stream_ns,
    LUMA_FAKE_CALL_COSTS(LUMA_FAKE_COST_PER_STREAM)
#undef LUMA_FAKE_COST_PER_STREAM
};
constexpr const char* kNames[] = {
#define LUMA_FAKE_COST_NAME(name, driver_name, ns, per_stream_ns) driver_name,
    LUMA_FAKE_CALL_COSTS(LUMA_FAKE_COST_NAME)
#undef LUMA_FAKE_COST_NAME
};
std::atomic<std::uint64_t> g_calls[kCostedCallCount];

// LUMA_FAKE_CALL_COST as a percentage of the table; 0 when unset or not understood (with
// one line on stderr naming it).
std::uint64_t read_percent() {
  const char* v = std::getenv("LUMA_FAKE_CALL_COST");
  if (v == nullptr || *v == '\0') return 0;
  if (std::strcmp(v, "realistic") == 0) return 100;
  char* end = nullptr;
  unsigned long long p = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || *v == '-' || p > 100000) {
    std::fprintf(stderr,
                 "libcuda.so.1 (stand-in): ignoring LUMA_FAKE_CALL_COST=%s (not \"realistic\" "
                 "or a percentage 0..100000), calls cost nothing\n",
                 v);
    return 0;
  }
  return p;
}

}  // namespace

static std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint64_t costed_calls(CostedCall call) noexcept {
  return g_calls[static_cast<int>(call)].load(std::memory_order_relaxed);
}

const char* costed_call_name(CostedCall call) noexcept { return kNames[static_cast<int>(call)]; }

void reset_costed_calls() noexcept {
  for (auto& c : g_calls) c.store(0, std::memory_order_relaxed);
}

CallCost::CallCost(CostedCall call, std::uint64_t streams) noexcept {
  const int i = static_cast<int>(call);
  g_calls[i].fetch_add(1, std::memory_order_relaxed);
  static const std::uint64_t percent = read_percent();
  if (percent == 0) return;
  const std::uint64_t ns = kCostNs[i] + kPerStreamNs[i] * streams;
  until_ns_ = now_ns() + static_cast<std::int64_t>(ns * percent / 100);
}

CallCost::~CallCost() {
  if (until_ns_ == 0) return;
  while (now_ns() < until_ns_) {
  }
}

}  // namespace luma::fake
