// signal_flush.h - SIGTERM and SIGINT flush luma's output (the exit statistics and the
// trace), then the program ends by the signal, as it would have without luma.
//
// Installed only by the one-time initialisation, only when luma serves CUDA and has
// something to flush (statistics or a trace), and only for a signal whose disposition is
// still the default: a program with its own handler (or SIG_IGN) keeps it untouched, and
// its handler decides (exit() then prints the statistics as at any exit). A program that
// installs its own handler later replaces luma's; one that chains to the handler it
// replaced (luma's) gets what luma's stands for: flush, then death by the signal.
//
// The handler does only async-signal-safe work: it writes the signal number into a pipe
// and waits (bounded). A flusher thread, started with every signal blocked (so it never
// takes a signal meant for the program), reads it, prints the statistics and closes the
// trace in an ordinary thread context - both allocate and take locks, which a handler
// must never do - then restores the default disposition and raises the signal, so the
// parent sees WIFSIGNALED with the same signal. Must never run in a forked child: the
// child gets the default disposition back (on_fork_child).
#pragma once

namespace luma::shim {

struct State;

// At initialisation, after `s.serving` is decided. Never throws; on any failure (no pipe,
// no thread) no handler is installed and the program's signals stay as they were.
void install_signal_flush(const State& s) noexcept;

// In a forked child (pthread_atfork): the flusher thread is not there; luma's handlers are
// replaced by the default disposition they stand for.
void signal_flush_in_child() noexcept;

}  // namespace luma::shim
