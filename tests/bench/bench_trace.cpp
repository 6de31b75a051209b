// bench_trace.cpp - the trace writer's cost per recorded event (one thread, 8 threads, with
// call-site stacks) and the reader's speed; bytes per event are reported as a counter.
// Run: build/tests/bench/bench_trace [--benchmark_filter=...]; the trace goes to
// $LUMA_BENCH_DIR (default /tmp) - put it on the file system traces will really use.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trace/trace_reader.h"
#include "trace/trace_writer.h"

namespace {

using namespace luma::core;

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
BENCHMARK(BM_TraceWrite)->Threads(1)->Threads(8)->UseRealTime();

void BM_TraceWriteWithStacks(benchmark::State& state) {
  open_writer(state, "stacks", 8);
  write_events(state, true);
  close_writer(state, state.iterations() * static_cast<std::uint64_t>(state.threads()));
}
BENCHMARK(BM_TraceWriteWithStacks)->Threads(1)->Threads(8)->UseRealTime();

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
