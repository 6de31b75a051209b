// trace_crash_test.cpp - crash safety: crash_writer is killed with SIGKILL at random
// moments (some early, during the header or the first chunk's mapping; some late, across
// chunk boundaries); every trace it leaves must read without error and hold, for each
// thread, exactly its first k events for some k no smaller than the count the program had
// published before it died, each with the content it wrote.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>

#include "trace/crash_events.h"
#include "trace/trace_reader.h"
#include "trace/trace_test_util.h"

namespace luma::core {
namespace {

const char* writer_program() {
  const char* p = std::getenv("LUMA_CRASH_WRITER");
  return p ? p : "./crash_writer";
}

struct KillRun {
  std::map<std::uint64_t, std::uint64_t> published;  // thread -> events completed
};

// Starts the writer, lets it run for `run_for`, kills it, and collects what it published
// (including what is still in the pipe: those events were completed too).
KillRun run_and_kill(const std::string& path, int every, int threads,
                 std::chrono::microseconds run_for) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    const std::string e = std::to_string(every), n = std::to_string(threads);
    ::execl(writer_program(), writer_program(), path.c_str(), e.c_str(), n.c_str(),
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(fds[1]);
  KillRun run;
  std::uint64_t msg[2];
  std::size_t have = 0;
  auto drain = [&](int timeout_ms) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    ssize_t n = ::read(fds[0], reinterpret_cast<char*>(msg) + have, sizeof msg - have);
    if (n <= 0) return false;
    have += static_cast<std::size_t>(n);
    if (have == sizeof msg) {
      auto& c = run.published[msg[0]];
      c = std::max(c, msg[1]);
      have = 0;
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + run_for;
  while (std::chrono::steady_clock::now() < deadline) drain(0);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  while (drain(0)) {
  }
  ::close(fds[0]);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the writer ended by itself, status " << status;
  return run;
}

void check_trace(const std::string& path, const KillRun& run, int threads) {
  TraceReader r(path);  // throws on any damage: the test fails with the offset
  EXPECT_FALSE(r.closed_cleanly());
  std::map<std::uint64_t, std::uint64_t> next;
  r.read([&](const TraceEvent& e) {
    const std::uint64_t t = e.thread - 1000;
    ASSERT_LT(t, static_cast<std::uint64_t>(threads));
    const std::uint64_t i = next[t]++;
    const auto want = testing::crash_event(t, i);
    ASSERT_EQ(e.kind, want.event.kind) << "thread " << t << " event " << i;
    ASSERT_EQ(e.address, want.event.address);
    ASSERT_EQ(e.size, want.event.size);
    ASSERT_EQ(e.requested, want.event.requested);
    ASSERT_EQ(e.stream, want.stream);
    ASSERT_EQ(e.time_ns, want.time - testing::test_header().clock_base_ns);
    const auto& stack = r.stack(e.stack);
    ASSERT_TRUE(std::equal(stack.begin(), stack.end(), want.stack.begin(), want.stack.end()));
  });
  for (const auto& [t, count] : run.published)
    EXPECT_GE(next[t], count) << "thread " << t << ": published " << count
                              << " completed events, the trace holds " << next[t];
}

TEST(TraceCrash, SigkillAtRandomMomentsLosesNoCompletedEvent) {
  std::mt19937 rng(2024);
  const std::string path = testing::temp_path("crash.trace");
  std::uint64_t most = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Early kills (0-2 ms) land in start-up and the first chunk; publishing in batches
    // lets later runs cross chunk boundaries (2^18 slots) within 40 ms.
    std::remove(path.c_str());  // O_TRUNC of a large previous trace would eat the time
    const bool batched = trial % 3 == 2;
    const int every = batched ? 4096 : 1;
    const int threads = trial % 2 ? 3 : 1;
    const auto run_for = std::chrono::microseconds(
        trial < 10 ? rng() % 2000 : 1000 + rng() % (batched ? 40000 : 15000));
    const KillRun run = run_and_kill(path, every, threads, run_for);
    for (const auto& [t, c] : run.published) most = std::max(most, c);
    try {
      check_trace(path, run, threads);
    } catch (const TraceError& e) {
      // Killed before the header was complete: no event can have been completed.
      EXPECT_TRUE(run.published.empty()) << e.what();
    }
  }
  std::printf("most events published by one thread before a kill: %llu\n",
              static_cast<unsigned long long>(most));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace luma::core
