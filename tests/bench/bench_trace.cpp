// bench_trace.cpp - the cost per recorded event: the trace writer alone (one thread, 8
// threads, with call-site stacks), and libluma.so's recording path as the allocator calls
// it (one virtual call into TraceEventSink: exit gate, call context, thread id, TSC clock,
// writer); plus the reader's speed. Bytes per event are reported as a counter.
// Run: build/tests/bench/bench_trace [--benchmark_filter=...]; the trace goes to
// $LUMA_BENCH_DIR (default /tmp) - put it on the file system traces will really use.
// "CPU" is the benchmark threads' own CPU time; the kernel's work to grow the file (page
// allocation, done by the writer's helper thread) is not in it: docs/trace-format.md.
#include <benchmark/benchmark.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "observe/call_context.h"
#include "device/event_clock.h"
#include "observe/stack_capture.h"
#include "trace/trace_reader.h"
#include "trace/trace_writer.h"
#include "observe/trace_event_sink.h"

namespace {

using namespace luma::core;

// With --benchmark_repetitions=N: the fastest repetition, besides mean and median. On a
// shared machine most repetitions are slowed by other processes (run-queue waits, caches
// they flush); with short repetitions (--benchmark_min_time=0.002) the fastest ones ran
// alone, which is what the cost of recording is on a quiet machine. docs/trace-format.md.
double fastest(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

std::string bench_path(const char* name) {
  const char* dir = std::getenv("LUMA_BENCH_DIR");
  return std::string(dir ? dir : "/tmp") + "/luma-bench-" + name + ".trace";
}

TraceHeader bench_header(std::uint32_t stack_depth) {
  TraceHeader h;
  h.luma_version = LUMA_VERSION;
  h.host = "bench";
  h.stack_depth = stack_depth;
  h.devices = {{0, 80ull << 30, "bench"}};
  return h;
}

// One shared writer per benchmark run (all threads of a multi-threaded run share it, as
// the allocators of one process do).
std::unique_ptr<TraceWriter> g_writer;
std::string g_path;

void open_writer(const benchmark::State& state, const char* name, std::uint32_t depth) {
  if (state.thread_index() != 0) return;
  g_path = bench_path(name);
  std::remove(g_path.c_str());
  g_writer = TraceWriter::open(g_path, bench_header(depth), nullptr);
}

void close_writer(benchmark::State& state, std::uint64_t events) {
  if (state.thread_index() != 0) return;
  g_writer->close();
  g_writer.reset();
  TraceReader r(g_path);
  state.counters["bytes_per_event"] =
      double(r.file_bytes() - 4096) / double(std::max<std::uint64_t>(events, 1));
  std::remove(g_path.c_str());
}

void write_events(benchmark::State& state, bool with_stack) {
  const std::uint64_t t = static_cast<std::uint64_t>(state.thread_index());
  const std::uint64_t frames[16] = {0x401000, 0x402000, 0x403000, 0x404000, 0x405000,
                                    0x406000, 0x407000, 0x408000, 0x409000, 0x40a000,
                                    0x40b000, 0x40c000, 0x40d000, 0x40e000, 0x40f000};
  std::uint64_t i = 0;
  for (auto _ : state) {
    const bool alloc = (i & 1) == 0;
    const Event e{alloc ? EventKind::alloc : EventKind::free_requested, 0,
                  0x7f0000000000ull + ((i & 0xFFFF) << 9), 512 * (1 + (i & 7)),
                  alloc ? 512 * (1 + (i & 7)) - 17 : 0};
    std::span<const std::uint64_t> stack;
    if (with_stack && alloc) stack = std::span<const std::uint64_t>(frames + (i >> 1) % 8, 8);
    g_writer->write(e, 100 + t, i & 3, trace::EntryPoint::cudaMalloc, 1'000'000 + i, stack);
    ++i;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(i));
}

void BM_TraceWrite(benchmark::State& state) {
  open_writer(state, "write", 0);
  write_events(state, false);
  close_writer(state, state.iterations() * static_cast<std::uint64_t>(state.threads()));
}
BENCHMARK(BM_TraceWrite)->Threads(1)->Threads(8)->UseRealTime()->ComputeStatistics("min", fastest);

void BM_TraceWriteWithStacks(benchmark::State& state) {
  open_writer(state, "stacks", 8);
  write_events(state, true);
  close_writer(state, state.iterations() * static_cast<std::uint64_t>(state.threads()));
}
BENCHMARK(BM_TraceWriteWithStacks)
    ->Threads(1)
    ->Threads(8)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);

// libluma.so's path: the allocator's virtual call into a TraceEventSink, inside a hook's
// CallScope. Each thread has its own sink, as each device's allocator has (the threads
// then emit concurrently, like several devices; threads sharing one device are
// serialized by its lock - bench_shim under LUMA_TRACE measures that case end to end).
luma::shim::EventClock g_clock;
luma::shim::TraceGate g_gate;

void BM_SinkWrite(benchmark::State& state) {
  if (state.thread_index() == 0) {
    g_clock.start();
    g_gate.membarrier =
        ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }
  open_writer(state, "sink", 0);
  // Threads start the loop together, after thread 0's setup (Google Benchmark's barrier).
  std::unique_ptr<luma::shim::TraceEventSink> own;
  EventSink* sink = nullptr;
  std::uint64_t i = 0;
  luma::shim::CallScope scope(trace::EntryPoint::cuMemAlloc);
  for (auto _ : state) {
    if (sink == nullptr) [[unlikely]] {
      own = std::make_unique<luma::shim::TraceEventSink>(*g_writer, g_clock, g_gate);
      sink = own.get();
    }
    const bool alloc = (i & 1) == 0;
    const Event e{alloc ? EventKind::alloc : EventKind::free_requested, 0,
                  0x7f0000000000ull + ((i & 0xFFFF) << 9), 512 * (1 + (i & 7)),
                  alloc ? 512 * (1 + (i & 7)) - 17 : 0};
    benchmark::DoNotOptimize(sink);
    sink->on_event(e);
    ++i;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(i));
  state.counters["tsc_clock"] =
      benchmark::Counter(g_clock.uses_tsc() ? 1 : 0, benchmark::Counter::kAvgThreads);
  close_writer(state, state.iterations() * static_cast<std::uint64_t>(state.threads()));
}
BENCHMARK(BM_SinkWrite)->Threads(1)->Threads(8)->UseRealTime()->ComputeStatistics("min", fastest);

// The same two paths timed in bursts of kBurst events (one benchmark iteration each):
// counters give ns per event of the fastest burst, the 10th percentile and the median.
// On a shared machine the fastest bursts are those no other process interrupted - what
// recording costs on a quiet machine - however loaded the machine is; the median says
// how much the load took. (Crossing into a new chunk is in some bursts, at most a few.)
constexpr int kBurst = 4096;

template <class OneEvent>
void time_bursts(benchmark::State& state, OneEvent&& one_event) {
  std::vector<double> per_event;
  std::uint64_t i = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < kBurst; ++b, ++i) one_event(i);
    const std::chrono::duration<double, std::nano> dt = std::chrono::steady_clock::now() - t0;
    per_event.push_back(dt.count() / kBurst);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(i));
  if (per_event.empty()) return;
  std::sort(per_event.begin(), per_event.end());
  auto at = [&](double q) { return per_event[static_cast<std::size_t>(q * (per_event.size() - 1))]; };
  using C = benchmark::Counter;
  state.counters["min_ns_per_event"] = C(per_event.front(), C::kAvgThreads);
  state.counters["p10_ns_per_event"] = C(at(0.1), C::kAvgThreads);
  state.counters["median_ns_per_event"] = C(at(0.5), C::kAvgThreads);
}

Event bench_event(std::uint64_t i) {
  const bool alloc = (i & 1) == 0;
  return {alloc ? EventKind::alloc : EventKind::free_requested, 0,
          0x7f0000000000ull + ((i & 0xFFFF) << 9), 512 * (1 + (i & 7)),
          alloc ? 512 * (1 + (i & 7)) - 17 : 0};
}

void BM_TraceWriteBursts(benchmark::State& state) {
  open_writer(state, "write-bursts", 0);
  const std::uint64_t t = static_cast<std::uint64_t>(state.thread_index());
  time_bursts(state, [&](std::uint64_t i) {
    g_writer->write(bench_event(i), 100 + t, i & 3, trace::EntryPoint::cudaMalloc,
                    1'000'000 + i);
  });
  close_writer(state, static_cast<std::uint64_t>(state.iterations()) * kBurst *
                          static_cast<std::uint64_t>(state.threads()));
}
BENCHMARK(BM_TraceWriteBursts)->Threads(1)->Threads(8)->UseRealTime();

void BM_SinkWriteBursts(benchmark::State& state) {
  if (state.thread_index() == 0) {
    g_clock.start();
    g_gate.membarrier =
        ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }
  open_writer(state, "sink-bursts", 0);
  std::unique_ptr<luma::shim::TraceEventSink> own;
  EventSink* sink = nullptr;
  luma::shim::CallScope scope(trace::EntryPoint::cuMemAlloc);
  time_bursts(state, [&](std::uint64_t i) {
    if (sink == nullptr) [[unlikely]] {
      own = std::make_unique<luma::shim::TraceEventSink>(*g_writer, g_clock, g_gate);
      sink = own.get();
    }
    benchmark::DoNotOptimize(sink);
    sink->on_event(bench_event(i));
  });
  close_writer(state, static_cast<std::uint64_t>(state.iterations()) * kBurst *
                          static_cast<std::uint64_t>(state.threads()));
}
BENCHMARK(BM_SinkWriteBursts)->Threads(1)->Threads(8)->UseRealTime();

// LUMA_TRACE_STACKS=N: what the shim's capture costs per allocation (glibc's backtrace()
// unwinding N frames + 1), from 64 frames deep - a framework's stacks are that deep, so
// every one of the N frames exists. (In libluma.so about 3 frames of its own come on
// top; bench_shim under LUMA_TRACE_STACKS measures that end to end, on a shallow stack.)
luma::shim::StackCapture g_capture;

[[gnu::noinline]] void capture_at_depth(int depth, benchmark::State& state) {
  if (depth > 0) {
    capture_at_depth(depth - 1, state);
    benchmark::ClobberMemory();  // not a tail call: each level keeps its frame
    return;
  }
  auto& c = luma::shim::call_context();
  for (auto _ : state) {
    g_capture.capture(c);
    benchmark::DoNotOptimize(c.stack[0]);
  }
  state.counters["frames"] = c.depth;
}

void BM_StackCapture(benchmark::State& state) {
  g_capture.configure(static_cast<unsigned>(state.range(0)), 0, 0);
  capture_at_depth(64, state);
}
BENCHMARK(BM_StackCapture)->Arg(8)->Arg(32)->ComputeStatistics("min", fastest);

// Reading: 10^7 events front to back.
void BM_TraceRead(benchmark::State& state) {
  const std::string path = bench_path("read");
  const std::uint64_t n = static_cast<std::uint64_t>(state.range(0));
  {
    auto w = TraceWriter::open(path, bench_header(0), nullptr);
    for (std::uint64_t i = 0; i < n; ++i)
      w->write({i & 1 ? EventKind::free_requested : EventKind::alloc, 0,
                0x7f0000000000ull + ((i & 0xFFFF) << 9), 512, i & 1 ? 0u : 500u},
               1, 0, trace::EntryPoint::cudaMalloc, 1000 + i);
  }
  for (auto _ : state) {
    TraceReader r(path);
    std::uint64_t bytes = 0;
    r.read([&](const TraceEvent& e) { bytes += e.size; });
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
  std::remove(path.c_str());
}
BENCHMARK(BM_TraceRead)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
