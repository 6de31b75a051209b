// run_command.cpp - `luma run [--trace FILE] [--stacks N] [--stats text|json|off] [--]
// PROGRAM ARGS...`: runs the program with libluma.so preloaded and the trace on, returns
// its exit status (128 + N when signal N ended it), and then says where the trace went and
// the command that analyses it, as heaptrack does.
// While the program runs, luma ignores SIGINT and SIGQUIT (the terminal delivers them to
// the program too, which decides) and passes SIGTERM on to it, so the report still comes.
// It never changes the program's arguments, working directory or other environment: every
// argument from the program on is the program's, and an option luma run does not know,
// before the program, is an error (exit 2) rather than an argument of the program.
// The message names each trace by the process its header names (pid, executable): the
// program's own, and those of the processes a launcher started.
// With --plan PLAN.json the program runs on its captured plan: LUMA_PLAN names the plan (as
// an absolute path: the program may change directory before its first allocation) and
// libluma.so replays it (docs/plan-replay.md). The plan is read and its executable and
// arguments are compared with the command first, so a plan that cannot be used is refused
// here with one line (exit 1) instead of being ignored by the program.
#include <fmt/core.h>
#include <signal.h>
#include <spawn.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "commands/commands.h"
#include "plan/plan_file.h"
#include "plan/plan_fingerprint.h"
#include "common/preload_library.h"
#include "inputs/trace_location.h"
#include "io/path_pattern.h"

extern char** environ;

namespace luma::tools {
namespace {

// The name libluma.so gives a trace when luma run is not told one (docs/settings.md).
const std::string kDefaultTrace(core::kDefaultTracePattern);
// What a shell returns when the program cannot be started.
constexpr int kExitCannotRun = 127;
constexpr int kExitSignalBase = 128;

struct RunOptions {
  std::string trace = kDefaultTrace;
  std::string stats;
  unsigned stacks = 0;
  std::string plan;  // --plan: the plan file to replay (empty: none)
  std::vector<std::string> command;
};

// The plan checked against the command to run (the devices are the library's to check);
// returns the absolute path for LUMA_PLAN, or prints why not and returns "".
std::string usable_plan(const RunOptions& o) {
  core::PlanFile plan;
  try {
    plan = core::read_plan_file(o.plan);
  } catch (const core::PlanFileError& e) {
    std::fprintf(stderr, "luma run: %s\n", e.what());
    return {};
  }
  if (!plan.fingerprint) {
    std::fprintf(stderr,
                 "luma run: %s: refused: the plan has no fingerprint (it was made from %s, not from a "
                 "luma trace)\n",
                 o.plan.c_str(), plan.input.empty() ? "an unknown input" : plan.input.c_str());
    return {};
  }
  if (o.command.empty()) return {};
  core::RunFingerprint current;
  current.executable = o.command.front();
  current.arguments.assign(o.command.begin() + 1, o.command.end());
  current.devices = plan.fingerprint->devices;  // not known here
  const core::FingerprintMatch m = core::match_fingerprint(*plan.fingerprint, current);
  if (!m.match) {
    std::fprintf(stderr, "luma run: %s: refused: %s\n", o.plan.c_str(), m.reason.c_str());
    return {};
  }
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(o.plan, ec);
  return ec ? o.plan : abs.string();
}

volatile sig_atomic_t g_child = 0;

void forward_term(int sig) {
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "luma";
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}


std::vector<std::string> child_environment(const std::map<std::string, std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    const std::string name =
        eq ? std::string(*e, static_cast<std::size_t>(eq - *e)) : std::string(*e);
    if (!set.count(name)) env.emplace_back(*e);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

long long mtime_ns(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
}

long long now_realtime_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return t.tv_sec * 1'000'000'000LL + t.tv_nsec;
}

int run_program(const RunOptions& given) {
  RunOptions o = given;
  // The values libluma.so reads from LUMA_TRACE, read the same way.
  o.trace = core::trace_pattern_from_setting(o.trace);
  const bool tracing = !o.trace.empty();
  if (!tracing) o.trace = "0";
  const LibrarySearch lib = find_preload_library(self_path());
  if (lib.found.empty()) {
    std::string where;
    for (const auto& t : lib.tried) where += "\n  " + t;
    std::fprintf(stderr, "luma run: libluma.so not found; looked for:%s\n", where.c_str());
    return kExitFailure;
  }
  std::map<std::string, std::string> set = {
      {"LD_PRELOAD", prepend_preload(lib.found, std::getenv("LD_PRELOAD"))},
      {"LUMA_TRACE", o.trace},
  };
  if (o.stacks > 0) set["LUMA_TRACE_STACKS"] = std::to_string(o.stacks);
  if (!o.plan.empty()) {
    const std::string plan = usable_plan(o);
    if (plan.empty()) return kExitFailure;
    set["LUMA_PLAN"] = plan;
  }
  if (!o.stats.empty()) set["LUMA_STATS"] = o.stats;
  std::vector<std::string> env = child_environment(set);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.command;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // The program gets the default dispositions of the signals luma handles itself.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGQUIT, SIGTERM}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);

  struct sigaction ignore {}, forward {}, old_int {}, old_quit {}, old_term {};
  ignore.sa_handler = SIG_IGN;
  forward.sa_handler = forward_term;
  sigemptyset(&ignore.sa_mask);
  sigemptyset(&forward.sa_mask);
  sigaction(SIGINT, &ignore, &old_int);
  sigaction(SIGQUIT, &ignore, &old_quit);
  sigaction(SIGTERM, &forward, &old_term);

  const long long started = now_realtime_ns();
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  int status = 0;
  if (err == 0) {
    g_child = pid;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    g_child = 0;
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (err != 0) {
    std::fprintf(stderr, "luma run: cannot run '%s': %s\n", argv[0], std::strerror(err));
    return kExitCannotRun;
  }

  const int code = WIFEXITED(status)     ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? kExitSignalBase + WTERMSIG(status)
                                         : kExitFailure;
  if (!tracing) return code;
  const TraceNameFields fields{static_cast<long>(pid), host_name(),
                               core::rank_from([](const char* n) { return std::getenv(n); })};
  // Named as this pid's (a pattern without %p names everyone's the same way).
  const std::vector<std::string> named_as_own = find_written_traces(o.trace, fields);
  std::vector<std::string> traces = named_as_own;
  // The processes the program started (a launcher: a shell script, mpirun, torchrun) write
  // their own traces, named by their own pids.
  for (const std::string& t : find_written_traces(o.trace, fields, /*any_pid=*/true))
    if (std::find(traces.begin(), traces.end(), t) == traces.end()) traces.push_back(t);
  // A pattern without %p may name a file an earlier run left: only this run's count.
  std::erase_if(traces, [&](const std::string& t) { return mtime_ns(t) + 1'000'000'000LL < started; });
  const std::string outcome = WIFSIGNALED(status)
                                  ? fmt::format("killed by signal {}", WTERMSIG(status))
                                  : fmt::format("exit status {}", code);
  if (traces.empty()) {
    std::fprintf(stderr,
                 "luma: %s (pid %d, %s) wrote no trace: no device allocation went through luma, "
                 "or the trace file could not be created (its stderr says so)\n",
                 argv[0], static_cast<int>(pid), outcome.c_str());
    return code;
  }
  // Each trace is named by the process its header names: a launcher's children record
  // their own, and the message must not give the launcher's pid or name to their traces.
  std::vector<std::string> own, of_others;
  for (const std::string& t : traces) {
    const TraceOwner owner = trace_owner(t);
    const bool is_own =
        owner.pid != 0 ? owner.pid == static_cast<long>(pid)
                       : std::find(named_as_own.begin(), named_as_own.end(), t) != named_as_own.end();
    if (is_own) {
      own.push_back(t);
      // The program may have exec'd another: the trace says which executable wrote it.
      const std::string exe = owner.executable.empty() ? argv[0] : owner.executable;
      std::fprintf(stderr, "luma: trace of %s (pid %d, %s) written to %s\n", exe.c_str(),
                   static_cast<int>(pid), outcome.c_str(), t.c_str());
    } else {
      of_others.push_back(t);
    }
  }
  if (own.empty())
    std::fprintf(stderr,
                 "luma: %s (pid %d, %s) recorded no allocation itself; the processes it started "
                 "did:\n",
                 argv[0], static_cast<int>(pid), outcome.c_str());
  for (const std::string& t : of_others) {
    const TraceOwner owner = trace_owner(t);
    const std::string who =
        owner.pid != 0 ? fmt::format("{} (pid {}, started by pid {})",
                                     owner.executable.empty() ? "?" : owner.executable,
                                     owner.pid, static_cast<int>(pid))
                       : fmt::format("another process of the run");
    std::fprintf(stderr, "luma: trace of %s written to %s\n", who.c_str(), t.c_str());
  }
  std::string all;
  for (const std::string& t : own) all += " " + t;
  for (const std::string& t : of_others) all += " " + t;
  std::fprintf(stderr, "luma: analyse %s with: luma stats%s\n",
               traces.size() == 1 ? "it" : "them", all.c_str());
  return code;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a program with libluma.so preloaded and its allocations traced");
  cmd->add_option("--trace", o->trace,
                  std::string("trace file name; %p pid, %h host, %r rank, %e executable "
                              "(default ") +
                      kDefaultTrace + "; 1: the default, off: no trace)");
  cmd->add_option("--stacks", o->stacks,
                  "record up to N return addresses with each allocation (LUMA_TRACE_STACKS)")
      ->check(CLI::Range(0u, 128u));
  cmd->add_option("--stats", o->stats, "statistics at exit: text (default), json or off")
      ->check(CLI::IsMember({"text", "json", "off"}));
  cmd->add_option("--plan", o->plan,
                  "run the program on this plan (luma plan -o): one arena per device, the planned "
                  "offsets (LUMA_PLAN)");
  cmd->add_option("command", o->command,
                  "PROGRAM ARGS...: the first argument that is not an option of luma run (or "
                  "the first after --) and everything after it, passed on untouched")
      ->required();
  // Arguments after the program are the program's, even when they look like options or
  // are "--": once the program is found, CLI11 takes every argument as positional.
  cmd->positionals_at_end();
  // Unknown options before the program are collected, so that the error below names them
  // (CLI11's own lists the "--" separator among them).
  cmd->allow_extras();
  cmd->footer("Exit status: the program's (128 + N when signal N ended it), 127 when it "
              "cannot be started, 2 for a bad command line, 1 when --plan names a plan that "
              "cannot be read or was made for another command.");
  cmd->callback([o, cmd] {
    // What CLI11 did not take before the program: the "--" that ends luma's options, and
    // options luma run does not have, which are an error (never the program's arguments).
    for (const std::string& extra : cmd->remaining()) {
      if (extra == "--") continue;
      std::fprintf(stderr,
                   "luma run: unknown option '%s' (the options of luma run come before the "
                   "program; see luma run --help)\n",
                   extra.c_str());
      throw ExitCode{kExitUsage};
    }
    const int code = run_program(*o);
    if (code != kExitOk) throw ExitCode{code};
  });
}

}  // namespace luma::tools
