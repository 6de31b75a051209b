// signal_flush.cpp - see signal_flush.h.
//
// Why a thread and not the handler itself: the statistics are formatted into a std::string
// and read under each allocator's mutex, and the trace close joins the writer's helper
// thread and takes its mutex. A handler that interrupted the program inside malloc, or a
// luma hook holding an allocator's lock, would deadlock doing that. The handler therefore
// only write()s one byte to a pipe and poll()s (both async-signal-safe); the flusher
// thread, which holds nothing when the byte arrives, does the work and then kills the
// process with the signal (default disposition restored first, the signal unblocked in
// the flusher only, raise() - thread-directed, so the default action ends the process).
//
// The handler waits (kHandlerWaitMs) so that the thread the signal stopped stays stopped,
// as it would be without luma, while the flusher runs. It does not wait when the signal
// interrupted a luma hook on this thread (the flusher may need the lock that hook holds):
// then the thread runs on until the flusher ends the process. If the wait expires (the
// interrupted code held a malloc lock the flusher needs), the handler returns, the lock is
// released, and the flusher still ends the process when it is done: nothing is lost and
// nothing hangs.
#include "signal_flush.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>

#include "config/log.h"
#include "process.h"
#include "threads/recursion_guard.h"
#include "shim_state.h"

namespace luma::shim {
namespace {

// The signals whose default action luma stands in for. Others (SIGHUP, SIGQUIT, ...) keep
// their plain default: SIGTERM and SIGINT are what schedulers, `timeout` and Ctrl-C send.
constexpr int kSignals[] = {SIGTERM, SIGINT};
constexpr std::size_t kSignalCount = sizeof kSignals / sizeof kSignals[0];
// How long the signalled thread waits in the handler for the flusher to end the process
// (it normally takes milliseconds). Past it the thread runs on (see the header comment).
constexpr int kHandlerWaitMs = 2000;
constexpr int kHandlerPollMs = 10;
// The flusher formats the statistics (heap strings) and closes the trace: a small stack is
// plenty, and a thread in someone else's process should not reserve the default 8 MiB.
constexpr std::size_t kFlusherStackBytes = 256 * 1024;

// The process whose flusher thread exists (a forked child has none).
std::atomic<pid_t> g_owner{0};
// Handler -> flusher: one byte, the signal number. The write end is non-blocking: a full
// pipe already holds a request.
int g_pipe[2] = {-1, -1};
std::atomic<bool> g_ours[kSignalCount] = {};
// Set by the flusher when it could not end the process (the program changed the signal's
// disposition meanwhile): a waiting handler then returns at once.
std::atomic<bool> g_flusher_gave_up{false};

std::size_t index_of(int sig) noexcept {
  for (std::size_t i = 0; i < kSignalCount; ++i)
    if (kSignals[i] == sig) return i;
  return kSignalCount;
}

// The default action of `sig`, from any thread: only async-signal-safe calls. Returns if
// the signal did not end the process (someone installed another disposition meanwhile).
void die_by(int sig) noexcept {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  const std::size_t i = index_of(sig);
  if (i < kSignalCount) g_ours[i].store(false);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
}

void on_signal(int sig) noexcept {
  const int saved_errno = errno;
  if (getpid() != g_owner.load(std::memory_order_relaxed)) {
    // A forked child whose handler survived (it normally gets SIG_DFL back at fork): no
    // flusher here, nothing of the child's to flush.
    die_by(sig);
    errno = saved_errno;
    return;
  }
  const auto byte = static_cast<unsigned char>(sig);
  (void)!::write(g_pipe[1], &byte, 1);
  if (!RecursionGuard::active()) {
    for (int waited = 0; waited < kHandlerWaitMs && !g_flusher_gave_up.load();
         waited += kHandlerPollMs)
      (void)::poll(nullptr, 0, kHandlerPollMs);
  }
  errno = saved_errno;
}

void* flusher_main(void*) noexcept {
  for (;;) {
    unsigned char byte = 0;
    const ssize_t n = ::read(g_pipe[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return nullptr;
    const int sig = byte;
    flush_process_output(sig);
    die_by(sig);
    // Still alive: the program gave the signal a handler of its own or SIG_IGN meanwhile;
    // that disposition has been applied. Keep every signal blocked here again.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    g_flusher_gave_up.store(true);
  }
}

bool start_flusher() noexcept {
  if (::pipe2(g_pipe, O_CLOEXEC) != 0) return false;
  const int flags = ::fcntl(g_pipe[1], F_GETFL);
  if (flags < 0 || ::fcntl(g_pipe[1], F_SETFL, flags | O_NONBLOCK) != 0) {
    ::close(g_pipe[0]);
    ::close(g_pipe[1]);
    g_pipe[0] = g_pipe[1] = -1;
    return false;
  }
  // The thread inherits this mask: it must never take a signal meant for the program.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, kFlusherStackBytes);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, flusher_main, nullptr);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    ::close(g_pipe[0]);
    ::close(g_pipe[1]);
    g_pipe[0] = g_pipe[1] = -1;
    return false;
  }
  pthread_setname_np(thread, "luma-flush");
  return true;
}

bool is_default(int sig) noexcept {
  struct sigaction cur {};
  if (sigaction(sig, nullptr, &cur) != 0) return false;
  return (cur.sa_flags & SA_SIGINFO) == 0 && cur.sa_handler == SIG_DFL;
}

bool is_ours(int sig) noexcept {
  struct sigaction cur {};
  if (sigaction(sig, nullptr, &cur) != 0) return false;
  return (cur.sa_flags & SA_SIGINFO) == 0 && cur.sa_handler == on_signal;
}

}  // namespace

void install_signal_flush(const State& s) noexcept {
  if (!s.serves()) return;
  // Nothing would be written: stay out of the program's signals altogether.
  if (s.settings.stats == StatsFormat::off && !s.recorder.wanted()) return;
  bool want[kSignalCount] = {};
  bool any = false;
  for (std::size_t i = 0; i < kSignalCount; ++i) any |= want[i] = is_default(kSignals[i]);
  if (!any) return;
  g_owner.store(getpid());
  if (!start_flusher()) {
    log_noexcept(LogLevel::warn, "no thread for the signal flush; statistics are not written on SIGTERM/SIGINT");
    return;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) sigaddset(&sa.sa_mask, sig);  // one at a time per thread
  // SA_RESTART: the program's interrupted system calls go on as if luma were not there
  // (the signal would have killed it; it must not see EINTR it never asked for).
  sa.sa_flags = SA_RESTART;
  for (std::size_t i = 0; i < kSignalCount; ++i) {
    if (!want[i]) continue;
    if (sigaction(kSignals[i], &sa, nullptr) == 0) g_ours[i].store(true);
  }
}

void signal_flush_in_child() noexcept {
  for (std::size_t i = 0; i < kSignalCount; ++i) {
    if (!g_ours[i].load() || !is_ours(kSignals[i])) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(kSignals[i], &dfl, nullptr);
    g_ours[i].store(false);
  }
  if (g_pipe[0] >= 0) ::close(g_pipe[0]);
  if (g_pipe[1] >= 0) ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

}  // namespace luma::shim
