// trace_e2e_test.cpp - LUMA_TRACE and `luma run` end to end: programs of each kind on the
// stand-in device, recorded under libluma.so, then `luma stats`, every `luma export` format
// and `luma plan` on what they wrote; a recording program SIGKILLed at random points; the
// name patterns; fork; call-site stacks named by `luma stats`; a trace that cannot be
// opened. Traces are also read here with core's TraceReader, to count events exactly.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <regex>
#include <string>
#include <vector>

#include "subprocess.h"
#include "trace/trace_reader.h"

namespace luma::integration {
namespace {

using nlohmann::json;

struct Paths {
  std::string lib = setting("LUMA_IT_LIB");
  std::string fake_dir = setting("LUMA_IT_FAKE_DIR");
  std::string luma = setting("LUMA_IT_LUMA");
  std::string trace_prog = setting("LUMA_IT_TRACE_PROG");
  std::string python = setting("LUMA_IT_PYTHON");
  std::string check_memviz = setting("LUMA_IT_CHECK_MEMVIZ");
  std::string check_oom_snapshot = setting("LUMA_IT_CHECK_OOM_SNAPSHOT");
  std::string prog(const std::string& flavour) const {
    return setting(("LUMA_IT_PROG_" + flavour).c_str());
  }
};

const Paths& paths() {
  static const Paths p;
  return p;
}

std::string describe(const Result& r) {
  return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.signal) +
         "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

// The size trace_prog gives pair i (keep in step with trace_prog.cpp).
std::uint64_t size_of(std::uint64_t i) { return 256 * (1 + i % 37) + (i % 3) * 1000; }

Env recording_env(const std::string& trace, const Env& extra = {}) {
  Env e = clean_env({{"LD_PRELOAD", paths().lib},
                     {"LD_LIBRARY_PATH", paths().fake_dir},
                     {"LUMA_STATS", "off"},
                     {"LUMA_TRACE", trace}});
  for (const auto& [k, v] : extra) e[k] = v;
  return e;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    closedir(d);
  }
  return names;
}

struct Counts {
  std::uint64_t allocs = 0, frees = 0, reserves = 0;
  std::vector<std::uint64_t> requested;  // of each alloc, in order
  bool closed = false;
};

Counts count_events(const std::string& path) {
  core::TraceReader reader(path);
  Counts c;
  c.closed = reader.closed_cleanly();
  reader.read([&](const core::TraceEvent& e) {
    if (e.kind == core::EventKind::alloc) {
      ++c.allocs;
      c.requested.push_back(e.requested);
    } else if (e.kind == core::EventKind::free_requested) {
      ++c.frees;
    } else if (e.kind == core::EventKind::segment_reserve) {
      ++c.reserves;
    }
  });
  return c;
}

#define NEED(x)                                          \
  do {                                                   \
    if ((x).empty()) GTEST_SKIP() << #x " not provided"; \
  } while (0)

// ---- luma run -> trace -> stats -> exports -> plan -----------------------------------

std::string trace_from_run_output(const std::string& err) {
  std::smatch m;
  static const std::regex written(R"(written to (\S+)\n)");
  return std::regex_search(err, m, written) ? m[1].str() : "";
}

class RunFlavour : public ::testing::TestWithParam<const char*> {};

TEST_P(RunFlavour, StatsExportsAndPlanAgreeWithTheProgramAndTheDevice) {
  NEED(paths().luma);
  NEED(paths().prog(GetParam()));
  const std::string dir = temp_dir();
  Env env = clean_env({{"LD_LIBRARY_PATH", paths().fake_dir},
                       {"LUMA_STATS_FILE", dir + "/stats.json"},
                       {"LUMA_FAKE_COUNTERS", dir + "/counters.json"}});
  Result r = run({paths().luma, "run", "--trace", dir + "/run.%e.%p.trace", "--stats", "json",
                  "--", paths().prog(GetParam()), "loop", "2000", "4096"},
                 env);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::string trace = trace_from_run_output(r.err);
  ASSERT_FALSE(trace.empty()) << describe(r);
  EXPECT_EQ(trace.rfind(dir + "/run.prog_" + std::string(GetParam()) + ".", 0), 0u) << trace;
  EXPECT_NE(r.err.find("luma stats " + trace), std::string::npos) << r.err;

  const json stats = json::parse(read_file(dir + "/stats.json"));
  const json counters = json::parse(read_file(dir + "/counters.json"));
  const Counts c = count_events(trace);
  EXPECT_TRUE(c.closed);
  EXPECT_EQ(c.allocs, 2000u);
  EXPECT_EQ(c.frees, 2000u);
  EXPECT_EQ(c.reserves, counters["devices"][0]["mem_alloc_calls"].get<std::uint64_t>());

  Result s = run({paths().luma, "stats", "--json", trace}, clean_env());
  ASSERT_EQ(s.exit_code, 0) << describe(s);
  const json js = json::parse(s.out);
  const json& d0 = js["runs"][0]["devices"][0];
  EXPECT_EQ(d0["allocations"], 2000);
  EXPECT_EQ(d0["frees"], 2000);
  EXPECT_EQ(d0["segment_reserves"], counters["devices"][0]["mem_alloc_calls"]);
  EXPECT_EQ(d0["segment_reserves"], stats["devices"][0]["cuda_malloc_calls"]);
  EXPECT_EQ(d0["peak_allocated_bytes"], 4096);
  EXPECT_EQ(d0["cache_absorbed"], 2000 - d0["segment_reserves"].get<int>());

  // memviz: Python's pickle loads it and the schema holds.
  ASSERT_EQ(run({paths().luma, "export", trace, "--format", "memviz", "-o", dir + "/m.pickle"},
                clean_env()).exit_code, 0);
  if (!paths().python.empty() && !paths().check_memviz.empty()) {
    Result py = run({paths().python, paths().check_memviz, dir + "/m.pickle"}, clean_env());
    EXPECT_EQ(py.exit_code, 0) << describe(py);
  }
  // chrome: JSON with counter tracks.
  ASSERT_EQ(run({paths().luma, "export", trace, "--format", "chrome", "-o", dir + "/c.json"},
                clean_env()).exit_code, 0);
  const json chrome = json::parse(read_file(dir + "/c.json"), nullptr, false);
  ASSERT_FALSE(chrome.is_discarded());
  // rmm: the header and one row per alloc and per free.
  ASSERT_EQ(run({paths().luma, "export", trace, "--format", "rmm", "-o", dir + "/r.csv"},
                clean_env()).exit_code, 0);
  const std::string rmm = read_file(dir + "/r.csv");
  EXPECT_EQ(rmm.rfind("Thread,Time,Action,Pointer,Size,Stream\n", 0), 0u);
  EXPECT_EQ(count(rmm, ",allocate,"), 2000);
  EXPECT_EQ(count(rmm, ",free,"), 2000);
  // csv lifetimes: 2000 rows that luma plan accepts.
  ASSERT_EQ(run({paths().luma, "export", trace, "--format", "csv", "-o", dir + "/l.csv"},
                clean_env()).exit_code, 0);
  EXPECT_EQ(count(read_file(dir + "/l.csv"), "\n"), 2001);
  for (const std::string& input : {dir + "/l.csv", dir + "/r.csv", trace}) {
    Result p = run({paths().luma, "plan", input, "--time-limit", "0.2"}, clean_env());
    ASSERT_EQ(p.exit_code, 0) << input << "\n" << describe(p);
    // One buffer live at a time: every plan fits in one 4 KiB block.
    EXPECT_NE(p.out.find("device 0: 2000 buffers, lower bound 4096 B"), std::string::npos)
        << input << "\n" << p.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, RunFlavour, ::testing::Values("static", "shared", "driver"));

TEST(LumaRun, ReturnsTheProgramsStatusAndSaysWhenNoTraceWasWritten) {
  NEED(paths().luma);
  NEED(paths().prog("nocuda"));
  const std::string dir = temp_dir();
  Result r = run({paths().luma, "run", "--trace", dir + "/t.%p", "--", paths().prog("nocuda")},
                 clean_env());
  EXPECT_EQ(r.exit_code, 7) << describe(r);
  EXPECT_NE(r.err.find("wrote no trace"), std::string::npos) << r.err;
  EXPECT_TRUE(files_in(dir).empty());
  Result k = run({paths().luma, "run", "--", "sh", "-c", "kill -TERM $$"}, clean_env());
  EXPECT_EQ(k.exit_code, 128 + SIGTERM) << describe(k);
  Result missing = run({paths().luma, "run", "--", dir + "/no-such-program"}, clean_env());
  EXPECT_EQ(missing.exit_code, 127) << describe(missing);
  EXPECT_EQ(run({paths().luma, "run"}, clean_env()).exit_code, 2);
  EXPECT_EQ(run({paths().luma, "run", "--stats", "yaml", "--", "true"}, clean_env()).exit_code,
            2);
  Result help = run({paths().luma, "run", "--help"}, clean_env());
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--trace"), std::string::npos);
}

// Regression: `luma run --bogus -- echo a b c` printed "a b c --bogus --" and `luma run echo
// -n hi` printed "hi -n": unknown options and the "--" landed in the program's arguments.
// Every argument from the program on is the program's, untouched; an unknown option of
// luma run is an error naming it, and nothing runs.
TEST(LumaRun, ArgumentsFromTheProgramOnAreThePrograms) {
  NEED(paths().luma);
  const Env env = clean_env();
  Result n = run({paths().luma, "run", "--trace", "off", "echo", "-n", "hi"}, env);
  EXPECT_EQ(n.exit_code, 0) << describe(n);
  EXPECT_EQ(n.out, "hi");
  Result dashes = run({paths().luma, "run", "--trace", "off", "--", "echo", "a", "--", "--trace",
                       "b", "--bogus"},
                      env);
  EXPECT_EQ(dashes.exit_code, 0) << describe(dashes);
  EXPECT_EQ(dashes.out, "a -- --trace b --bogus\n");
  Result plain = run({paths().luma, "run", "--trace=off", "echo", "x", "--stats", "json"}, env);
  EXPECT_EQ(plain.out, "x --stats json\n") << describe(plain);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--bogus", "--", "echo", "a", "b", "c"},
        std::vector<std::string>{"--bogus", "echo", "a"}, std::vector<std::string>{"-x", "echo"}}) {
    std::vector<std::string> argv = {paths().luma, "run", "--trace", "off"};
    argv.insert(argv.end(), bad.begin(), bad.end());
    Result r = run(argv, env);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(r.out, "") << "the program ran: " << describe(r);
    EXPECT_NE(r.err.find("unknown option '" + bad[0] + "'"), std::string::npos) << r.err;
  }
}

// argv run with dir as its working directory (through a shell's cd and exec).
Result run_in(const std::string& dir, const std::vector<std::string>& argv, const Env& env) {
  std::string line = "cd '" + dir + "' && exec";
  for (const std::string& a : argv) line += " '" + a + "'";
  return run({"/bin/sh", "-c", line}, env);
}

// A launcher (here a shell) whose child allocates: the child's trace, named by its own pid,
// is found and named; --trace 1 means the default name and --trace off no trace at all.
TEST(LumaRun, FindsTheTracesOfTheProcessesALauncherStartedAndKnowsTheSwitchValues) {
  NEED(paths().luma);
  NEED(paths().prog("shared"));
  const std::string dir = temp_dir();
  Env env = clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}, {"LUMA_STATS", "off"}});
  Result r = run({paths().luma, "run", "--trace", dir + "/l.%p.trace", "--", "/bin/sh", "-c",
                  paths().prog("shared") + " loop 3 4096; true"},
                 env);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  ASSERT_EQ(files_in(dir).size(), 1u) << describe(r);
  EXPECT_NE(r.err.find("written to " + dir + "/l."), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("wrote no trace"), std::string::npos) << r.err;
  // Regression: the message gave the child's trace the launcher's pid and executable. It
  // names the child's own (from the trace's header), and says the launcher recorded none.
  const std::string child_pid = files_in(dir)[0].substr(2, files_in(dir)[0].size() - 8);
  EXPECT_NE(r.err.find("trace of " + paths().prog("shared") + " (pid " + child_pid +
                       ", started by pid "),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("trace of /bin/sh"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/bin/sh (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("recorded no allocation itself"), std::string::npos) << r.err;

  const std::string dir1 = temp_dir();
  Result one = run_in(
      dir1, {paths().luma, "run", "--trace", "1", "--", paths().prog("shared"), "loop", "3", "4096"}, env);
  ASSERT_EQ(one.exit_code, 0) << describe(one);
  ASSERT_EQ(files_in(dir1).size(), 1u) << describe(one);
  EXPECT_EQ(files_in(dir1)[0].rfind("luma.prog_shared.", 0), 0u) << files_in(dir1)[0];
  EXPECT_NE(one.err.find("written to luma.prog_shared."), std::string::npos) << one.err;

  const std::string dir0 = temp_dir();
  Result off = run_in(
      dir0, {paths().luma, "run", "--trace", "off", "--", paths().prog("shared"), "loop", "3", "4096"}, env);
  ASSERT_EQ(off.exit_code, 0) << describe(off);
  EXPECT_TRUE(files_in(dir0).empty());
  EXPECT_EQ(off.err.find("trace"), std::string::npos) << off.err;
}

// ---- crash safety under the shim -----------------------------------------------------

// Starts argv with env, its stdout on a pipe.
pid_t spawn_with_pipe(const std::vector<std::string>& argv, const Env& env, int* out_fd) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const auto& s : env_strings) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    e.push_back(nullptr);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  close(fds[1]);
  *out_fd = fds[0];
  return pid;
}

TEST(TraceUnderTheShim, SigkillAtRandomPointsLosesNoCompletedEvent) {
  NEED(paths().trace_prog);
  std::mt19937 rng(20240611);  // fixed: the same kill points every run
  std::uniform_int_distribution<int> lines_before_kill(0, 3000);
  const int kRounds = 30;
  for (int round = 0; round < kRounds; ++round) {
    const std::string dir = temp_dir();
    const std::string trace = dir + "/k.trace";
    int fd = -1;
    const pid_t pid = spawn_with_pipe({paths().trace_prog, "pairs", "1000000"},
                                      recording_env(trace), &fd);
    ASSERT_GT(pid, 0);
    // Kill after `want` completed pairs (round 0: at once, during start-up).
    const int want = round == 0 ? 0 : lines_before_kill(rng);
    int seen = 0;
    std::string pending;
    char buf[4096];
    while (seen < want) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      pending.append(buf, static_cast<std::size_t>(n));
      std::size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        if (pending.rfind("pair ", 0) == 0) ++seen;
        pending.erase(0, nl + 1);
      }
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd);
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round << ": the program ended by itself";
    if (seen == 0 && files_in(dir).empty()) continue;  // killed before its first alloc
    // Killed between the file's creation and its header (during the first alloc): empty,
    // nothing recorded - and nothing had completed.
    if (seen == 0 && read_file(trace).empty()) continue;
    Counts c;
    ASSERT_NO_THROW(c = count_events(trace)) << "round " << round;
    EXPECT_FALSE(c.closed);
    EXPECT_GE(c.allocs, static_cast<std::uint64_t>(seen)) << "round " << round;
    EXPECT_GE(c.frees, static_cast<std::uint64_t>(seen)) << "round " << round;
    for (int i = 0; i < seen && i < static_cast<int>(c.requested.size()); ++i)
      ASSERT_EQ(c.requested[static_cast<std::size_t>(i)], size_of(static_cast<std::uint64_t>(i)))
          << "round " << round << " pair " << i;
    // luma stats reads it too (exit 0, the unfinished state reported).
    if (!paths().luma.empty()) {
      Result s = run({paths().luma, "stats", "--json", trace}, clean_env());
      EXPECT_EQ(s.exit_code, 0) << describe(s);
    }
  }
}

// ---- names, fork, threads, stacks, bad path ------------------------------------------

TEST(TraceUnderTheShim, NamePatternsExpandPidHostRankAndExecutable) {
  NEED(paths().trace_prog);
  const std::string dir = temp_dir();
  Result r = run({paths().trace_prog, "pairs", "3"},
                 recording_env(dir + "/x.%e.%p.r%r.%h.%%", {{"RANK", "5"}}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::vector<std::string> names = files_in(dir);
  ASSERT_EQ(names.size(), 1u);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(names[0], m, std::regex(R"(x\.trace_prog\.(\d+)\.r5\.(.+)\.%)")))
      << names[0];
  EXPECT_EQ(m[2].str(), host);
  core::TraceReader reader(dir + "/" + names[0]);
  EXPECT_EQ(std::to_string(reader.header().pid), m[1].str());
  EXPECT_EQ(reader.header().command_line,
            (std::vector<std::string>{paths().trace_prog, "pairs", "3"}));
  EXPECT_FALSE(reader.header().devices.empty());
  EXPECT_NE(reader.header().settings.find("free_sync:"), std::string::npos);

  // LUMA_TRACE=1: the default name in the working directory.
  const std::string dir2 = temp_dir();
  Result d = run({"/bin/sh", "-c", "cd \"$0\" && exec \"$1\" pairs 2", dir2, paths().trace_prog},
                 recording_env("1"));
  ASSERT_EQ(d.exit_code, 0) << describe(d);
  names = files_in(dir2);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_TRUE(std::regex_match(names[0], std::regex(R"(luma\.trace_prog\.\d+\.trace)")))
      << names[0];
}

TEST(TraceUnderTheShim, ForkedChildNeverWritesOrClosesTheParentsTrace) {
  NEED(paths().trace_prog);
  const std::string dir = temp_dir();
  Result r = run({paths().trace_prog, "fork"}, recording_env(dir + "/f.trace"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("child done"), std::string::npos);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"f.trace"});
  const Counts c = count_events(dir + "/f.trace");
  EXPECT_TRUE(c.closed);
  EXPECT_EQ(c.allocs, 11u);  // the parent's 1 + 10; the child's call was the driver's
  EXPECT_EQ(c.frees, 11u);
}

TEST(TraceUnderTheShim, AnExecdChildWithTheSameNameWritesItsOwnFile) {
  NEED(paths().prog("driver"));
  const std::string dir = temp_dir();
  Result r = run({paths().prog("driver"), "fork-exec"}, recording_env(dir + "/same.trace"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::vector<std::string> names = files_in(dir);
  ASSERT_EQ(names.size(), 2u) << r.err;
  for (const std::string& n : names) {
    const Counts c = count_events(dir + "/" + n);
    EXPECT_TRUE(c.closed) << n;
    if (n != "same.trace") {
      EXPECT_EQ(c.allocs, 100u) << n;  // the child's loop 100 4096
    }
  }
  EXPECT_NE(r.err.find("being written by another process"), std::string::npos) << r.err;
}

TEST(TraceUnderTheShim, ManyThreadsAndExitGiveAClosedCompleteTrace) {
  NEED(paths().trace_prog);
  const std::string dir = temp_dir();
  Result r = run({paths().trace_prog, "threads", "8", "2000"}, recording_env(dir + "/t.trace"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Counts c = count_events(dir + "/t.trace");
  EXPECT_TRUE(c.closed);
  EXPECT_EQ(c.allocs, 16000u);
  EXPECT_EQ(c.frees, 16000u);
  // A worker calling exit() while others allocate: the trace still reads.
  NEED(paths().prog("driver"));
  Result e = run({paths().prog("driver"), "exit-thread"}, recording_env(dir + "/e.trace"));
  ASSERT_EQ(e.exit_code, 0) << describe(e);
  EXPECT_NO_THROW(count_events(dir + "/e.trace"));
}

TEST(TraceUnderTheShim, StacksAreRecordedAndNamedByLumaStats) {
  NEED(paths().trace_prog);
  NEED(paths().luma);
  const std::string dir = temp_dir();
  Result r = run({paths().trace_prog, "stacks", "5"},
                 recording_env(dir + "/s.trace", {{"LUMA_TRACE_STACKS", "8"}}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  core::TraceReader reader(dir + "/s.trace");
  EXPECT_EQ(reader.header().stack_depth, 8u);
  EXPECT_FALSE(reader.header().mappings.empty());
  std::uint64_t with_stack = 0;
  reader.read([&](const core::TraceEvent& e) {
    if (e.kind == core::EventKind::alloc && e.stack != 0) ++with_stack;
  });
  EXPECT_EQ(with_stack, 5u);
  EXPECT_EQ(reader.stack_count(), 1u);  // the same call site each time
  Result s = run({paths().luma, "stats", dir + "/s.trace"}, clean_env());
  ASSERT_EQ(s.exit_code, 0) << describe(s);
  EXPECT_NE(s.out.find("luma_trace_test_allocating_function"), std::string::npos) << s.out;
}

TEST(TraceUnderTheShim, ATraceThatCannotBeOpenedLogsOneLineAndTheProgramRunsOn) {
  NEED(paths().trace_prog);
  Result r = run({paths().trace_prog, "pairs", "10"},
                 recording_env("/nonexistent-luma-dir/x.trace"));
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count(r.out, "pair "), 10);
  EXPECT_EQ(count(r.err, "\n"), 1) << r.err;
  EXPECT_NE(r.err.find("LUMA_TRACE"), std::string::npos) << r.err;
}

// ---- calls luma forwards to the driver --------------------------------------------------

// A program luma serves nothing for - it allocates only from the driver's pools and with
// the virtual memory calls - still gets a trace (opened by its first forwarded call):
// every forwarded call with its entry point, bytes and address or handle, and `luma stats`
// lists them under their paths.
TEST(ForwardedTrace, AProgramThatOnlyForwardsGetsATraceOfItsCalls) {
  NEED(paths().luma);
  NEED(paths().prog("driver"));
  const std::string dir = temp_dir();
  const std::string trace = dir + "/f.trace";
  Result r = run({paths().prog("driver"), "pool-vmm", "3"}, recording_env(trace));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  core::TraceReader reader(trace);
  EXPECT_TRUE(reader.closed_cleanly());
  EXPECT_EQ(reader.header().format_version, 2u);
  std::map<std::string, int> calls;
  std::uint64_t pool_bytes = 0, created = 0, released = 0, mapped = 0;
  std::set<std::uint64_t> handles;
  reader.set_forwarded_handler([&](const core::trace::ForwardedCall& c) {
    const std::string entry(core::trace::forwarded_entry_name(c.entry));
    ++calls[entry + "/" + std::string(c.path)];
    EXPECT_NE(c.thread, 0u) << entry;
    if (c.entry == core::trace::ForwardedEntry::cuMemAllocFromPoolAsync) {
      pool_bytes += c.bytes;
      EXPECT_NE(c.address, 0u);
      EXPECT_NE(c.stream, 0u);  // the mode's own stream
    }
    if (c.entry == core::trace::ForwardedEntry::cuMemCreate) {
      created += c.bytes;
      handles.insert(c.handle);
    }
    if (c.entry == core::trace::ForwardedEntry::cuMemRelease) {
      released += c.bytes;  // luma remembers each handle's size
      EXPECT_EQ(handles.count(c.handle), 1u);
    }
    if (c.entry == core::trace::ForwardedEntry::cuMemMap) mapped += c.bytes;
  });
  const core::TraceReadSummary sum = reader.read({});
  EXPECT_EQ(sum.events, 0u);  // luma's cache served nothing
  EXPECT_EQ(sum.forwarded_calls, 18u);
  EXPECT_EQ(calls["cuMemAllocFromPoolAsync/stream_ordered"], 3);
  EXPECT_EQ(calls["cuMemFreeAsync/stream_ordered"], 3);
  EXPECT_EQ(calls["cuMemCreate/virtual_memory"], 3);
  EXPECT_EQ(calls["cuMemRelease/virtual_memory"], 3);
  EXPECT_EQ(calls["cuMemMap/virtual_mappings"], 3);
  EXPECT_EQ(calls["cuMemUnmap/virtual_mappings"], 3);
  EXPECT_EQ(pool_bytes, 4096u * (1 + 2 + 3));
  const std::uint64_t two_granules = 2 * (2u << 20);
  EXPECT_EQ(created, 3 * two_granules);
  EXPECT_EQ(released, 3 * two_granules);
  EXPECT_EQ(mapped, 3 * two_granules);
  EXPECT_EQ(handles.size(), 3u);

  Result s = run({paths().luma, "stats", "--json", trace}, clean_env());
  ASSERT_EQ(s.exit_code, 0) << describe(s);
  const json fwd = json::parse(s.out)["runs"][0]["forwarded_calls"];
  ASSERT_EQ(fwd.size(), 3u) << fwd.dump();
  EXPECT_EQ(fwd[0]["path"], "stream_ordered");
  EXPECT_EQ(fwd[0]["calls"]["cuMemAllocFromPoolAsync"], 3);
  EXPECT_EQ(fwd[0]["peak_live_bytes"], 4096 * 3) << fwd[0].dump();  // one at a time
  EXPECT_EQ(fwd[1]["path"], "virtual_memory");
  EXPECT_EQ(fwd[1]["alloc_bytes"], 3 * two_granules);
  EXPECT_EQ(fwd[1]["peak_live_bytes"], two_granules);
  EXPECT_EQ(fwd[1]["final_live_bytes"], 0);
  EXPECT_EQ(fwd[2]["path"], "virtual_mappings");
  EXPECT_EQ(fwd[2]["maps"], 3);
  EXPECT_EQ(fwd[2]["unmaps"], 3);
  Result t = run({paths().luma, "stats", trace}, clean_env());
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  EXPECT_NE(t.out.find("virtual_memory: cuMemCreate 3, cuMemRelease 3"), std::string::npos) << t.out;
}

// `luma run` of a program that allocates only with cuMemAllocAsync finds its trace (no
// "wrote no trace"), and `luma stats` names the calls.
TEST(ForwardedTrace, LumaRunOfAStreamOrderedOnlyProgramHasATrace) {
  NEED(paths().luma);
  NEED(paths().prog("driver"));
  const std::string dir = temp_dir();
  Result r = run({paths().luma, "run", "--trace", dir + "/a.%p.trace", "--", paths().prog("driver"),
                  "async", "20"},
                 clean_env({{"LD_LIBRARY_PATH", paths().fake_dir}}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.err.find("wrote no trace"), std::string::npos) << r.err;
  const std::string trace = trace_from_run_output(r.err);
  ASSERT_FALSE(trace.empty()) << describe(r);
  Result s = run({paths().luma, "stats", trace}, clean_env());
  ASSERT_EQ(s.exit_code, 0) << describe(s);
  EXPECT_NE(s.out.find("stream_ordered: cuMemAllocAsync 20, cuMemFreeAsync 20"), std::string::npos)
      << s.out;
}

// ---- out of memory: the report's top call sites, LUMA_OOM_SNAPSHOT -------------------

// The bytes luma had reserved when the trace's first oom event came: its segments then.
std::uint64_t reserved_at_oom(const std::string& trace) {
  core::TraceReader reader(trace);
  std::uint64_t reserved = 0;
  bool oom = false;
  reader.read([&](const core::TraceEvent& e) {
    if (oom) return;
    if (e.kind == core::EventKind::segment_reserve) reserved += e.size;
    if (e.kind == core::EventKind::segment_release) reserved -= e.size;
    if (e.kind == core::EventKind::oom) oom = true;
  });
  EXPECT_TRUE(oom) << "the trace has no oom event";
  return reserved;
}

TEST(OomUnderTheShim, ReportNamesTheTopSitesAndTheSnapshotOpensInPyTorchsViewer) {
  NEED(paths().trace_prog);
  const std::string dir = temp_dir();
  Result r = run({paths().trace_prog, "oom", "1000"},
                 recording_env(dir + "/o.trace", {{"LUMA_TRACE_STACKS", "8"},
                                                  {"LUMA_FAKE_CAPACITY", "64M"},
                                                  {"LUMA_OOM_SNAPSHOT", dir + "/oom-%p.pickle"}}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count(r.out, "oom after "), 1) << r.out;
  // The report: one paragraph, its top site the function that allocated the 1 MiB blocks.
  const auto sites = r.err.find("Top allocation sites by live bytes: #1 ");
  ASSERT_NE(sites, std::string::npos) << r.err;
  const auto first = r.err.find("luma_trace_test_oom_function", sites);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_LT(first, r.err.find("#2", sites)) << "the 1 MiB blocks' site comes first: " << r.err;
  // The snapshot: one file, named by the pattern, and said in the log.
  std::string name;
  for (const std::string& f : files_in(dir))
    if (std::regex_match(f, std::regex("oom-[0-9]+\\.pickle"))) {
      EXPECT_TRUE(name.empty()) << "two snapshots: " << name << " and " << f;
      name = f;
    }
  ASSERT_FALSE(name.empty()) << r.err;
  EXPECT_NE(r.err.find(dir + "/" + name), std::string::npos) << r.err;
  if (paths().python.empty() || paths().check_oom_snapshot.empty()) GTEST_SKIP() << "no python3";
  Result py = run({paths().python, paths().check_oom_snapshot, dir + "/" + name,
                   std::to_string(reserved_at_oom(dir + "/o.trace")), std::to_string(1 << 20),
                   "luma_trace_test_oom_function"},
                  clean_env());
  EXPECT_EQ(py.exit_code, 0) << describe(py);
}

TEST(OomUnderTheShim, ASnapshotThatCannotBeWrittenLogsOneLineAndTheProgramRunsOn) {
  NEED(paths().trace_prog);
  const std::string dir = temp_dir();
  Result r = run({paths().trace_prog, "oom", "1000"},
                 recording_env(dir + "/o.trace", {{"LUMA_FAKE_CAPACITY", "16M"},
                                                  {"LUMA_OOM_SNAPSHOT", "/nonexistent-luma-dir/x.pickle"}}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count(r.err, "LUMA_OOM_SNAPSHOT: cannot write the snapshot to '/nonexistent-luma-dir/x.pickle'"), 1)
      << r.err;
  EXPECT_EQ(count(r.err, "CUDA out of memory"), 1) << r.err;
  EXPECT_EQ(r.err.find("Top allocation sites"), std::string::npos) << "no stacks recorded: " << r.err;
}

TEST(OomUnderTheShim, WithoutATraceTheSnapshotHoldsTheSegmentsAndTheOomEntry) {
  NEED(paths().trace_prog);
  const std::string dir = temp_dir();
  Env env = recording_env("", {{"LUMA_FAKE_CAPACITY", "16M"}, {"LUMA_OOM_SNAPSHOT", dir + "/o.pickle"}});
  env.erase("LUMA_TRACE");
  Result r = run({paths().trace_prog, "oom", "1000"}, env);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  ASSERT_EQ(files_in(dir), std::vector<std::string>{"o.pickle"}) << r.err;
  if (paths().python.empty() || paths().check_memviz.empty()) GTEST_SKIP() << "no python3";
  Result py = run({paths().python, paths().check_memviz, dir + "/o.pickle", "--partial"}, clean_env());
  EXPECT_EQ(py.exit_code, 0) << describe(py);
  EXPECT_NE(py.out.find("1 device traces, 1 entries"), std::string::npos) << py.out;
}

// With expandable segments the snapshot shows PyTorch's: each mapped range one segment
// with is_expandable, its pages' entries segment_map, and it passes the viewer's checks.
TEST(OomUnderTheShim, WithExpandableSegmentsTheSnapshotShowsMappedRanges) {
  NEED(paths().trace_prog);
  const std::string dir = temp_dir();
  Result r = run({paths().trace_prog, "oom", "1000"},
                 recording_env(dir + "/o.trace", {{"LUMA_CONF", "expandable_segments:1"},
                                                  {"LUMA_FAKE_CAPACITY", "64M"},
                                                  {"LUMA_OOM_SNAPSHOT", dir + "/o.pickle"}}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  ASSERT_TRUE(std::filesystem::exists(dir + "/o.pickle")) << r.err;
  if (paths().python.empty() || paths().check_memviz.empty()) GTEST_SKIP() << "no python3";
  Result py = run({paths().python, paths().check_memviz, dir + "/o.pickle", "--partial"}, clean_env());
  EXPECT_EQ(py.exit_code, 0) << describe(py);
  Result fields = run({paths().python, "-c",
                       "import pickle, sys\n"
                       "s = pickle.load(open(sys.argv[1], 'rb'))\n"
                       "segs = s['segments']\n"
                       "acts = {e['action'] for t in s['device_traces'] for e in t}\n"
                       "assert segs and all(g['is_expandable'] for g in segs), segs\n"
                       "assert 'segment_map' in acts and 'segment_alloc' not in acts, acts\n"
                       "assert s['allocator_settings']['expandable_segments'] is True\n",
                       dir + "/o.pickle"},
                      clean_env());
  EXPECT_EQ(fields.exit_code, 0) << describe(fields);
}

}  // namespace
}  // namespace luma::integration
