// trace_event_sink_test.cpp - libluma.so's recording path without the driver: the
// TraceEventSink the shim attaches to each allocator (context of the hook, thread id, TSC
// clock, exit gate) and the StackCapture of LUMA_TRACE_STACKS, writing real traces that
// the reader checks.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "observe/call_context.h"
#include "device/event_clock.h"
#include "observe/stack_capture.h"
#include "trace/trace_reader.h"
#include "trace/trace_test_util.h"
#include "trace/trace_writer.h"
#include "observe/trace_event_sink.h"

namespace luma::core {
namespace {

using shim::CallScope;
using shim::EventClock;
using shim::TraceEventSink;
using shim::TraceGate;
using trace::EntryPoint;

struct Recording {
  std::string path;
  EventClock clock;
  TraceGate gate;
  std::unique_ptr<TraceWriter> writer;
  std::uint64_t base = 0;

  explicit Recording(const std::string& name, std::uint32_t stack_depth = 0)
      : path(testing::temp_path(name)) {
    clock.start();
    TraceHeader h = testing::test_header(stack_depth);
    base = clock.now();
    h.clock_base_ns = base;
    writer = TraceWriter::open(path, h, nullptr);
  }
  ~Recording() { std::remove(path.c_str()); }
  std::vector<TraceEvent> events() {
    writer->close();
    TraceReader r(path);
    return read_all_events(r);
  }
};

Event alloc_event(std::uint64_t addr) { return {EventKind::alloc, 0, addr, 4096, 4000}; }
Event free_event(std::uint64_t addr) { return {EventKind::free_requested, 0, addr, 4096, 0}; }

TEST(TraceEventSink, RecordsTheHooksEntryStreamThreadAndTime) {
  Recording rec("sink-context");
  ASSERT_TRUE(rec.writer);
  TraceEventSink sink(*rec.writer, rec.clock, rec.gate);
  EventSink& as_allocator_sees_it = sink;
  const std::uint64_t before = shim::monotonic_ns();
  {
    CallScope scope(EntryPoint::cuMemAllocAsync, 0x5eed);
    as_allocator_sees_it.on_event(alloc_event(0x7f0000000000));
  }
  {
    CallScope scope(EntryPoint::cuMemFree);
    as_allocator_sees_it.on_event(free_event(0x7f0000000000));
  }
  as_allocator_sees_it.on_event({EventKind::free_completed, 0, 0x7f0000000000, 4096, 0});
  const std::uint64_t after = shim::monotonic_ns();
  EXPECT_FALSE(sink.busy());

  const auto ev = rec.events();
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].entry, EntryPoint::cuMemAllocAsync);
  EXPECT_EQ(ev[0].stream, 0x5eedu);
  EXPECT_EQ(ev[0].requested, 4000u);
  EXPECT_EQ(ev[1].entry, EntryPoint::cuMemFree);
  EXPECT_EQ(ev[1].stream, 0u);
  EXPECT_EQ(ev[2].entry, EntryPoint::internal);  // outside any hook
  const auto tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  for (const auto& e : ev) {
    EXPECT_EQ(e.thread, tid);
    // The TSC estimate of CLOCK_MONOTONIC: within a millisecond of the real clock.
    EXPECT_GE(rec.base + e.time_ns + 1'000'000, before);
    EXPECT_LE(rec.base + e.time_ns, after + 1'000'000);
  }
  EXPECT_LE(ev[0].time_ns, ev[1].time_ns);
  EXPECT_LE(ev[1].time_ns, ev[2].time_ns);
}

TEST(TraceEventSink, AttachesTheCapturedStackToAllocsOnly) {
  Recording rec("sink-stack", 4);
  ASSERT_TRUE(rec.writer);
  TraceEventSink sink(*rec.writer, rec.clock, rec.gate);
  {
    CallScope scope(EntryPoint::cuMemAlloc);
    auto& c = shim::call_context();
    c.stack[0] = 0x401000;
    c.stack[1] = 0x402000;
    c.depth = 2;
    sink.on_event(alloc_event(0x7f0000000000));
    sink.on_event({EventKind::segment_reserve, 0, 0x7f0000200000, 2 << 20, 0});
  }
  sink.on_event(free_event(0x7f0000000000));  // the scope ended: no stack any more

  rec.writer->close();
  TraceReader closed(rec.path);
  const auto ev = read_all_events(closed);
  ASSERT_EQ(ev.size(), 3u);
  ASSERT_NE(ev[0].stack, 0u);
  EXPECT_EQ(closed.stack(ev[0].stack), (std::vector<std::uint64_t>{0x401000, 0x402000}));
  EXPECT_EQ(ev[1].stack, 0u);
  EXPECT_EQ(ev[2].stack, 0u);
}

TEST(TraceEventSink, RecordsNothingOnceTheGateIsClosed) {
  Recording rec("sink-gate");
  TraceEventSink sink(*rec.writer, rec.clock, rec.gate);
  sink.on_event(alloc_event(0x7f0000000000));
  rec.gate.stopping.store(true);
  sink.on_event(free_event(0x7f0000000000));
  sink.on_event(alloc_event(0x7f0000001000));
  EXPECT_FALSE(sink.busy());
  const auto ev = rec.events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, EventKind::alloc);
}

TEST(TraceEventSink, EightDevicesAtOnceLoseNothingAndKeepEachOrder) {
  Recording rec("sink-threads");
  constexpr int kThreads = 8;
  constexpr std::uint64_t kEach = 20000;
  std::vector<std::uint64_t> tids(kThreads);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      tids[t] = static_cast<std::uint64_t>(::syscall(SYS_gettid));
      TraceEventSink sink(*rec.writer, rec.clock, rec.gate);  // one allocator per device
      CallScope scope(EntryPoint::cuMemAlloc);
      for (std::uint64_t i = 0; i < kEach; ++i) {
        const std::uint64_t addr = (std::uint64_t{1} << 40) * (t + 1) + (i << 12);
        sink.on_event({EventKind::alloc, t, addr, 4096, 4096});
      }
    });
  for (auto& th : pool) th.join();
  const auto ev = rec.events();
  ASSERT_EQ(ev.size(), kThreads * kEach);
  std::map<int, std::uint64_t> next;
  for (const auto& e : ev) {
    ASSERT_EQ(e.thread, tids[static_cast<std::size_t>(e.device)]);
    const std::uint64_t i = (e.address - (std::uint64_t{1} << 40) * (e.device + 1)) >> 12;
    ASSERT_EQ(i, next[e.device]++) << "device " << e.device;  // each device in its order
  }
}

// StackCapture: libluma.so's own frames are found by address; here a function placed in
// a section of its own plays the hook.
extern "C" const char __start_luma_test_own[];
extern "C" const char __stop_luma_test_own[];

shim::StackCapture g_capture;
const void* g_return_address = nullptr;

[[gnu::noinline, gnu::section("luma_test_own")]] void own_hook() {
  g_return_address = __builtin_return_address(0);
  g_capture.capture(shim::call_context());
  asm volatile("");
}

[[gnu::noinline]] void program_frame(int depth) {
  if (depth > 0) {
    program_frame(depth - 1);
    asm volatile("");
    return;
  }
  own_hook();
  asm volatile("");
}

TEST(StackCapture, SkipsItsOwnFramesAndKeepsTheDepthAskedFor) {
  g_capture.configure(6, reinterpret_cast<std::uintptr_t>(__start_luma_test_own),
                      reinterpret_cast<std::uintptr_t>(__stop_luma_test_own));
  std::vector<std::vector<std::uint64_t>> stacks;
  for (int k = 0; k < 4; ++k) {  // the first capture asks for more frames than the rest
    program_frame(20);
    const auto& c = shim::call_context();
    ASSERT_EQ(c.depth, 6u);
    EXPECT_EQ(c.stack[0], reinterpret_cast<std::uintptr_t>(g_return_address));
    stacks.emplace_back(c.stack, c.stack + c.depth);
  }
  for (const auto& s : stacks) EXPECT_EQ(s, stacks[0]);
  g_capture.configure(0, 0, 0);
  program_frame(3);
  EXPECT_EQ(shim::call_context().depth, 0u);
}

}  // namespace
}  // namespace luma::core
