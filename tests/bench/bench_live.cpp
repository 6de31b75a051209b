// bench_live.cpp - what publishing the live statistics costs an alloc+free pair
// (docs/live-record.md), in one run, at 10^2 and 10^4 live blocks of the caching allocator
// (over the address-only device of bench_allocator):
//   BM_Pair_NoWriter   - no live writer, no event sink: the allocator as before
//                        LUMA_LIVE_DIR (and with LUMA_LIVE_DIR=off);
//   BM_Pair_LiveWriter - what libluma.so does: the slot's writer set with
//                        CachingAllocator::set_live_writer (one sequence-locked write of
//                        six figures at the end of each call), into a record laid out in
//                        plain memory as in the shared mapping;
//   BM_Pair_EmptySink  - an event sink whose on_event does nothing: what any call through
//                        the sink costs (three per pair: alloc, free_requested,
//                        free_completed) ...
//   BM_Pair_LiveSink   - ... and the per-event writer behind such a sink, the design the
//                        hook replaced.
// The cost per pair is LiveWriter - NoWriter. Built, never run by meson test:
//   build/tests/bench/bench_live --benchmark_min_time=0.3 --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true   (one line)
#include <benchmark/benchmark.h>

#include <memory>

#include "address_only_device.h"
#include "allocator/caching_allocator.h"
#include "bench_pairs.h"
#include "live/live_writer.h"

namespace {

using luma::bench::AddressOnlyDevice;
namespace live = luma::core::live;

class EmptySink final : public luma::core::EventSink {
 public:
  void on_event(const luma::core::Event& e) noexcept override { benchmark::DoNotOptimize(e.kind); }
};

// The writer behind an event sink, passing events on to no next sink (no trace).
class LiveSink final : public luma::core::EventSink {
 public:
  void on_event(const luma::core::Event& e) noexcept override {
    writer.on_event(e.kind, e.size);
    if (next_ != nullptr) next_->on_event(e);
  }
  live::SlotWriter writer;

 private:
  luma::core::EventSink* next_ = nullptr;
};

void pairs(benchmark::State& state, luma::core::EventSink* sink, live::SlotWriter* writer = nullptr) {
  AddressOnlyDevice dev;
  luma::core::CachingAllocator a(dev, 0);
  a.set_event_sink(sink);
  a.set_live_writer(writer);
  luma::bench::run_pairs(
      state, [&](std::size_t n) { return a.allocate(n).ptr; }, [&](void* p) { a.free(p); });
}

// A record in plain memory, 64-byte aligned like a page of the shared mapping.
struct Record {
  Record() {
    live::init_record(base, live::RecordIdentity{});
    live::publish_record(base);
  }
  std::unique_ptr<unsigned char[]> bytes = std::make_unique<unsigned char[]>(live::kRecordBytes + 64);
  void* base = bytes.get() + (64 - reinterpret_cast<std::uintptr_t>(bytes.get()) % 64) % 64;
};

void BM_Pair_NoWriter(benchmark::State& state) { pairs(state, nullptr); }

void BM_Pair_LiveWriter(benchmark::State& state) {
  Record record;
  live::SlotWriter writer;
  writer.bind(record.base, 0, 0, std::nullopt, false);
  pairs(state, nullptr, &writer);
}

void BM_Pair_EmptySink(benchmark::State& state) {
  EmptySink sink;
  pairs(state, &sink);
}

void BM_Pair_LiveSink(benchmark::State& state) {
  Record record;
  LiveSink sink;
  sink.writer.bind(record.base, 0, 0, std::nullopt, false);
  pairs(state, &sink);
}

void counts(benchmark::internal::Benchmark* b) { b->Arg(100)->Arg(10'000); }

BENCHMARK(BM_Pair_NoWriter)->Apply(counts);
BENCHMARK(BM_Pair_LiveWriter)->Apply(counts);
BENCHMARK(BM_Pair_EmptySink)->Apply(counts);
BENCHMARK(BM_Pair_LiveSink)->Apply(counts);

}  // namespace

BENCHMARK_MAIN();
