// crash_writer.cpp - the recording program of the SIGKILL test: writes events through a
// TraceWriter until it is killed, and after every `publish_every` events of a thread
// writes {thread, events completed} (two u64) to stdout, so the test knows what must be in
// the trace however the kill lands. Events are a pure function of (thread, i), so the test
// can check their content; some are wide and some carry call sites, so that kills land in
// multi-slot records too.
//   crash_writer PATH PUBLISH_EVERY THREADS
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "trace/crash_events.h"
#include "trace/trace_test_util.h"
#include "trace/trace_writer.h"

int main(int argc, char** argv) {
  using namespace luma::core;
  if (argc != 4) {
    std::fprintf(stderr, "usage: crash_writer PATH PUBLISH_EVERY THREADS\n");
    return 2;
  }
  const std::uint64_t every = std::strtoull(argv[2], nullptr, 10);
  const int threads = std::atoi(argv[3]);
  std::string err;
  auto w = TraceWriter::open(argv[1], testing::test_header(testing::kCrashStackDepth), &err);
  if (!w) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 1;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::uint64_t i = 0;; ++i) {
        const auto c = testing::crash_event(static_cast<std::uint64_t>(t), i);
        w->write(c.event, c.thread, c.stream, c.entry, c.time, c.stack);
        if ((i + 1) % every == 0) {
          const std::uint64_t msg[2] = {static_cast<std::uint64_t>(t), i + 1};
          if (::write(1, msg, sizeof msg) != sizeof msg) std::_Exit(3);
        }
      }
    });
  for (auto& th : pool) th.join();
}
