// bench_replay.cpp - plan replay against the caching allocator, in core, on host memory
// (built with the benchmarks, never run by meson test): the time one training-like step
// spends in the allocator, the real allocations (device reservations) and the peak bytes
// reserved. The step: 64 allocations of mixed sizes (256 B .. 8 MiB) in a forward pass kept
// until the backward pass frees them in reverse, temporaries freed at once, a gradient kept
// into the next step; three weights allocated once. The plan is made the way `luma plan
// --periodic` makes it: the events of two captured steps, the period search, the cyclic
// plan. Memory is never touched, so the figures are the allocators' own cost.
//   build-replay/tests/replay/bench_replay --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "replay/context_allocator.h"
#include "host_device.h"
#include "planner/periodic.h"

namespace luma::core {
namespace {

constexpr int kForward = 64;

std::size_t step_size(int i) {
  static const std::size_t sizes[] = {256, 4096, 65536, 1 << 20, 3000, 8 << 20, 512, 200000};
  return sizes[static_cast<std::size_t>(i) % 8] + static_cast<std::size_t>(i) * 256;
}

// One step on `a`; `grad` carries the gradient from the previous step.
void step(ContextAllocator& a, void*& grad) {
  void* fwd[kForward];
  for (int i = 0; i < kForward; ++i) {
    fwd[i] = a.allocate(step_size(i)).ptr;
    if (i % 4 == 3) a.free(a.allocate(step_size(i + 1) / 2 + 256).ptr);  // a temporary
  }
  if (grad != nullptr) a.free(grad);
  grad = a.allocate(3 << 20).ptr;
  for (int i = kForward - 1; i >= 0; --i) a.free(fwd[i]);
}

void warmup(ContextAllocator& a, std::vector<void*>& weights) {
  for (std::size_t w : {std::size_t{64} << 20, std::size_t{16} << 20, std::size_t{1} << 20})
    weights.push_back(a.allocate(w).ptr);
}

class Recorder final : public EventSink {
 public:
  void on_event(const Event& e) noexcept override {
    if (e.kind == EventKind::alloc) {
      live[e.address] = lifetimes.size();
      Lifetime l;
      l.id = std::to_string(lifetimes.size());
      l.lower = time;
      l.upper = ~0ull;
      l.size = e.size;
      l.alignment = 256;
      lifetimes.push_back(l);
      requested.push_back(e.requested);
    } else if (e.kind == EventKind::free_requested) {
      lifetimes[live[e.address]].upper = time;
    }
    ++time;
  }
  std::uint64_t time = 0;
  std::map<std::uint64_t, std::size_t> live;
  std::vector<Lifetime> lifetimes;
  std::vector<std::uint64_t> requested;
};

// The periodic plan of two captured steps.
PlanFile make_plan() {
  HostDevice dev(std::size_t{8} << 30);
  Recorder rec;
  {
    ContextAllocator a(dev, 0);
    a.set_event_sink(&rec);
    std::vector<void*> weights;
    warmup(a, weights);
    void* grad = nullptr;
    for (int s = 0; s < 2; ++s) step(a, grad);
    a.set_event_sink(nullptr);
  }
  for (Lifetime& l : rec.lifetimes)
    if (l.upper == ~0ull) l.upper = rec.time;
  const AllocationSequence seq = allocation_sequence(rec.lifetimes, rec.requested);
  const PeriodSearch found = find_period(seq);
  if (!found.found) return {};
  SearchOptions search;
  search.max_iterations = 2000;
  const PeriodicPlan pp = plan_periodic(rec.lifetimes, seq, *found.found, Strategy::best, search);
  PlanFile file;
  DevicePlanFile d;
  d.arena = pp.report.chosen.arena;
  d.periodic = PeriodicLayout{pp.warmup, pp.period, pp.detected_warmup, pp.captured_iterations, pp.boundary_bytes};
  for (std::size_t k = 0; k < pp.slots.size(); ++k)
    d.allocations.push_back({pp.slots[k].id, pp.slot_key[k], pp.slots[k].size, pp.report.chosen.offsets[k], 0, 0});
  file.devices.push_back(d);
  return file;
}

void BM_Step(benchmark::State& state, bool replay) {
  static const PlanFile plan = make_plan();
  if (replay && plan.devices.empty()) {
    state.SkipWithError("no period found");
    return;
  }
  HostDevice dev(std::size_t{8} << 30);
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::batched);
  dev.set_idle(true);  // streams idle: fences complete at once (free_sync:event, GPU caught up)
  ContextAllocator a(dev, 0, {}, replay ? &plan : nullptr);
  std::vector<void*> weights;
  warmup(a, weights);
  void* grad = nullptr;
  for (auto _ : state) step(a, grad);
  const ReplayStats rs = a.replay_stats();
  const DeviceStats ds = a.stats();
  state.counters["real_allocs"] = static_cast<double>(ds.num_device_alloc);
  state.counters["peak_reserved_MiB"] = static_cast<double>(ds.reserved_bytes.all.peak) / (1 << 20);
  state.counters["allocs_per_step"] = kForward + kForward / 4 + 1;
  if (replay) state.counters["diverged"] = static_cast<double>(rs.divergences);
}

BENCHMARK_CAPTURE(BM_Step, caching, false);
BENCHMARK_CAPTURE(BM_Step, replay, true);

// For instruction counts that do not depend on the machine's load:
//   valgrind --tool=callgrind --toggle-collect='*run_steps*' bench_replay --steps caching 1000
[[gnu::noinline]] void run_steps(ContextAllocator& a, void*& grad, int n) {
  for (int i = 0; i < n; ++i) step(a, grad);
}

int steps_main(const std::string& mode, int n) {
  const PlanFile plan = make_plan();
  HostDevice dev(std::size_t{8} << 30);
  dev.set_fences(true);
  dev.set_fence_mode(FenceMode::batched);
  dev.set_idle(true);
  ContextAllocator a(dev, 0, {}, mode == "replay" ? &plan : nullptr);
  std::vector<void*> weights;
  warmup(a, weights);
  void* grad = nullptr;
  run_steps(a, grad, n);
  const DeviceStats ds = a.stats();
  std::printf("%s: %d steps, real allocations %llu, peak reserved %llu bytes, diverged %llu\n", mode.c_str(), n,
              static_cast<unsigned long long>(ds.num_device_alloc),
              static_cast<unsigned long long>(ds.reserved_bytes.all.peak),
              static_cast<unsigned long long>(a.replay_stats().divergences));
  return 0;
}

}  // namespace
}  // namespace luma::core

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--steps") return luma::core::steps_main(argv[2], std::atoi(argv[3]));
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
