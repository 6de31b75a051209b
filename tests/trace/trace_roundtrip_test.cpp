// trace_roundtrip_test.cpp - what the writer writes, the reader reads back: every event
// kind in its narrow and wide form, interned threads and streams past the id space,
// call-site stacks, many threads at once, the 24-bytes-per-event bound, and a file system
// that fills up under the writer.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include "trace/trace_reader.h"
#include "trace/trace_test_util.h"
#include "trace/trace_writer.h"

namespace luma::core {
namespace {

using testing::temp_path;
using testing::test_header;
using trace::EntryPoint;

struct Written {
  Event e;
  std::uint64_t thread, stream;
  EntryPoint entry;
  std::uint64_t time;
  std::vector<std::uint64_t> stack;
};

void expect_same(const Written& w, const TraceEvent& r, std::uint64_t base,
                 TraceReader& reader) {
  EXPECT_EQ(r.kind, w.e.kind);
  EXPECT_EQ(r.device, w.e.device);
  EXPECT_EQ(r.address, w.e.address);
  EXPECT_EQ(r.size, w.e.size);
  EXPECT_EQ(r.requested, w.e.requested);
  EXPECT_EQ(r.thread, w.thread);
  EXPECT_EQ(r.stream, w.stream);
  EXPECT_EQ(r.entry, w.entry);
  EXPECT_EQ(r.time_ns, w.time > base ? w.time - base : 0);
  EXPECT_EQ(reader.stack(r.stack), w.stack);
}

std::vector<Written> every_kind() {
  std::vector<Written> v;
  const EventKind kinds[] = {EventKind::alloc,           EventKind::free_requested,
                             EventKind::free_completed,  EventKind::segment_reserve,
                             EventKind::segment_release, EventKind::oom,
                             EventKind::empty_cache};
  std::uint64_t t = 5000;
  for (EventKind k : kinds) {
    // Narrow: aligned address and size, small slack.
    v.push_back({{k, 1, 0x7f0000001000ull, 4096, k == EventKind::alloc ? 4000u : 0u}, 77, 0,
                 EntryPoint::cudaMalloc, t += 10, {}});
    // Wide: an odd address, a huge size, slack too big, a device past 63, a time past 2^48.
    v.push_back({{k, 70, 0x7f0000001001ull, (1ull << 41) + 7, 3}, ~0ull, 0x55aa,
                 EntryPoint::cuMemAllocAsync, (1ull << 50), {}});
  }
  v.push_back({{EventKind::oom, 0, 0, 0, 1ull << 40}, 78, 1, EntryPoint::cudaMallocAsync, 900, {}});
  v.push_back({{EventKind::alloc, 0, 1ull << 60, 256, 1}, 78, 2, EntryPoint::internal, 0, {}});
  return v;
}

TEST(TraceRoundTrip, EveryEventKindNarrowAndWide) {
  const std::string path = temp_path("kinds");
  auto writes = every_kind();
  {
    std::string err;
    auto w = TraceWriter::open(path, test_header(), &err);
    ASSERT_NE(w, nullptr) << err;
    for (const auto& x : writes) w->write(x.e, x.thread, x.stream, x.entry, x.time);
    EXPECT_TRUE(w->close());
    EXPECT_EQ(w->dropped(), 0u);
  }
  TraceReader r(path);
  EXPECT_TRUE(r.closed_cleanly());
  EXPECT_EQ(r.header().host, "testhost");
  EXPECT_EQ(r.header().pid, 4242u);
  EXPECT_EQ(r.header().command_line, (std::vector<std::string>{"./app", "--flag", "x y"}));
  ASSERT_EQ(r.header().devices.size(), 2u);
  EXPECT_EQ(r.header().devices[1].name, "Stand-in 1");
  EXPECT_EQ(r.header().settings, "alignment:256,min_split:256");
  auto events = read_all_events(r);
  ASSERT_EQ(events.size(), writes.size());
  for (std::size_t i = 0; i < writes.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(events[i].index, i);
    if (i > 0) {
      EXPECT_GT(events[i].seq, events[i - 1].seq);
    }
    expect_same(writes[i], events[i], test_header().clock_base_ns, r);
  }
  std::remove(path.c_str());
}

TEST(TraceRoundTrip, ManyThreadsAndStreamsBeyondTheIdSpace) {
  const std::string path = temp_path("ids");
  std::vector<Written> writes;
  for (std::uint64_t i = 0; i < 6000; ++i)
    writes.push_back({{EventKind::alloc, 0, (i + 1) << 12, 512, 500}, 1000 + i % 5000, i * 16,
                      EntryPoint::cudaMallocAsync, 2000 + i, {}});
  {
    auto w = TraceWriter::open(path, test_header(), nullptr);
    ASSERT_NE(w, nullptr);
    for (const auto& x : writes) w->write(x.e, x.thread, x.stream, x.entry, x.time);
  }  // the destructor closes
  TraceReader r(path);
  auto events = read_all_events(r);
  ASSERT_EQ(events.size(), writes.size());
  for (std::size_t i = 0; i < writes.size(); ++i) expect_same(writes[i], events[i], 1000, r);
  std::remove(path.c_str());
}

TEST(TraceRoundTrip, CallSiteStacksAreInternedAndCut) {
  const std::string path = temp_path("stacks");
  const std::vector<std::uint64_t> a = {0x401000, 0x402000, 0x403000};
  const std::vector<std::uint64_t> b = {0x401000, 0x405000, 0x406000, 0x407000, 0x408000};
  {
    auto w = TraceWriter::open(path, test_header(4), nullptr);
    ASSERT_NE(w, nullptr);
    for (int i = 0; i < 10; ++i) {
      Event e{EventKind::alloc, 0, std::uint64_t(i + 1) << 20, 1024, 1000};
      w->write(e, 1, 0, EntryPoint::cudaMalloc, 2000, i % 2 ? a : b);
      Event f{EventKind::free_requested, 0, e.address, 1024, 0};
      w->write(f, 1, 0, EntryPoint::cudaFree, 2001);
    }
  }
  TraceReader r(path);
  EXPECT_EQ(r.header().stack_depth, 4u);
  EXPECT_FALSE(r.header().mappings.empty());
  auto events = read_all_events(r);
  ASSERT_EQ(events.size(), 20u);
  EXPECT_EQ(r.stack_count(), 2u);  // two distinct stacks, each defined once
  const std::vector<std::uint64_t> b_cut(b.begin(), b.begin() + 4);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(r.stack(events[2 * i].stack), i % 2 ? a : b_cut);
    EXPECT_EQ(events[2 * i + 1].stack, 0u);
  }
  std::remove(path.c_str());
}

TEST(TraceRoundTrip, EightThreadsKeepEachThreadsOrderAndLoseNothing) {
  const std::string path = temp_path("threads");
  constexpr int kThreads = 8;
  constexpr std::uint64_t kPerThread = 40000;  // crosses a chunk boundary (2^18 slots)
  {
    auto w = TraceWriter::open(path, test_header(), nullptr);
    ASSERT_NE(w, nullptr);
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreads; ++t)
      pool.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < kPerThread; ++i) {
          Event e{EventKind::alloc, t % 2, (i + 1) << 8, 256, 256};
          w->write(e, 100 + t, 7, EntryPoint::cudaMalloc, 1000 + i);
        }
      });
    for (auto& th : pool) th.join();
  }
  TraceReader r(path);
  std::map<std::uint64_t, std::uint64_t> next;  // thread -> next expected i
  std::uint64_t count = 0;
  r.read([&](const TraceEvent& e) {
    ASSERT_EQ(e.address >> 8, next[e.thread] + 1) << "thread " << e.thread;
    ++next[e.thread];
    ++count;
  });
  EXPECT_EQ(count, kThreads * kPerThread);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[100 + t], kPerThread);
  std::remove(path.c_str());
}

// The format's bound (docs/trace-format.md, "Bytes"): at most 24 bytes per event on disk for
// a typical workload (allocs and frees of assorted sizes, a few segments, a few threads and
// streams).
TEST(TraceRoundTrip, TypicalWorkloadTakesAtMost24BytesPerEvent) {
  const std::string path = temp_path("bytes");
  std::uint64_t events = 0;
  {
    auto w = TraceWriter::open(path, test_header(), nullptr);
    ASSERT_NE(w, nullptr);
    std::uint64_t seed = 1;
    for (int i = 0; i < 100000; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const std::uint64_t req = (seed >> 40) % (8 << 20) + 1;
      const std::uint64_t size = (req + 511) / 512 * 512;
      const std::uint64_t addr = 0x7f1200000000ull + ((seed >> 20) % 100000) * 512;
      const std::uint64_t thread = 500 + (seed >> 60) % 4, stream = (seed >> 58) % 3;
      if (i % 500 == 0) {
        w->write({EventKind::segment_reserve, 0, addr, 20 << 20, 0}, thread, stream,
                 EntryPoint::cudaMalloc, 1000 + i);
        ++events;
      }
      w->write({EventKind::alloc, 0, addr, size, req}, thread, stream, EntryPoint::cudaMalloc,
               1000 + i);
      w->write({EventKind::free_requested, 0, addr, size, 0}, thread, stream,
               EntryPoint::cudaFree, 1000 + i);
      events += 2;
    }
  }
  TraceReader r(path);
  const auto sum = r.read({});
  EXPECT_EQ(sum.events, events);
  // Every event is one 24-byte slot; besides them the file holds the 4 KiB header and one
  // definition slot per distinct thread (4) and stream (3), nothing else.
  EXPECT_EQ(sum.slots, events + 7);
  EXPECT_EQ(r.file_bytes(), 4096 + sum.slots * 24);
  const double per_event = double(r.file_bytes()) / double(events);
  std::printf("bytes per event: 24 per event record, %.4f with header and definitions "
              "(%llu bytes, %llu events)\n",
              per_event, static_cast<unsigned long long>(r.file_bytes()),
              static_cast<unsigned long long>(events));
  EXPECT_LE(double(r.file_bytes() - 4096) / double(events), 24.001);
  std::remove(path.c_str());
}

// In a child with a mount namespace of its own (so nothing outside sees it), on a 16 MiB
// tmpfs: 3 million events (72 MB) fill it. The writer must drop what does not fit - the
// program must not die of SIGBUS at a store into a page the file system cannot back - and
// leave a trace that reads up to the last event it stored. Needs CAP_SYS_ADMIN (CI runs as
// root); skipped without.
TEST(TraceRoundTrip, AFullFileSystemDropsEventsAndNeverKillsTheProgram) {
  constexpr std::uint64_t kEvents = 3'000'000;
  constexpr int kCannotMount = 77;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    const std::string dir = temp_path("full-fs");
    ::mkdir(dir.c_str(), 0700);
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=16m") != 0)
      std::_Exit(kCannotMount);
    const std::string path = dir + "/t.trace";
    std::uint64_t out[4] = {0, 0, 0, 0};  // dropped, events read, closed cleanly, read ok
    {
      auto w = TraceWriter::open(path, test_header(), nullptr);
      if (!w) std::_Exit(3);
      for (std::uint64_t i = 0; i < kEvents; ++i)
        w->write({i & 1 ? EventKind::free_requested : EventKind::alloc, 0,
                  0x7f0000000000ull + ((i & 0xFFFF) << 9), 512, i & 1 ? 0u : 500u},
                 1, 0, EntryPoint::cudaMalloc, 2000 + i);
      out[0] = w->dropped();
      w->close();
    }
    try {
      TraceReader r(path);
      out[2] = r.closed_cleanly();
      out[1] = r.read(nullptr).events;
      out[3] = 1;
    } catch (const TraceError&) {
    }
    if (::write(fds[1], out, sizeof out) != sizeof out) std::_Exit(4);
    std::_Exit(0);
  }
  ::close(fds[1]);
  std::uint64_t got[4] = {};
  const ssize_t n = ::read(fds[0], got, sizeof got);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::rmdir(temp_path("full-fs").c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == kCannotMount)
    GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace (needs CAP_SYS_ADMIN)";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the writer's process died: status " << status
      << (WIFSIGNALED(status) ? " (signal " + std::to_string(WTERMSIG(status)) + ")" : "");
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof got));
  const std::uint64_t dropped = got[0], events = got[1];
  EXPECT_GT(dropped, 0u) << "72 MB fitted into 16 MiB?";
  EXPECT_EQ(got[3], 1u) << "the trace does not read";
  EXPECT_EQ(got[2], 0u) << "a trace with dropped events must stay unfinished";
  EXPECT_GT(events, 100'000u);
  EXPECT_EQ(events + dropped, kEvents);  // each event one slot: stored or dropped
}

TEST(TraceRoundTrip, WriterReportsAnUnwritablePath) {
  std::string err;
  auto w = TraceWriter::open("/nonexistent-dir/x.trace", test_header(), &err);
  EXPECT_EQ(w, nullptr);
  EXPECT_NE(err.find("/nonexistent-dir/x.trace"), std::string::npos) << err;
}

}  // namespace
}  // namespace luma::core
