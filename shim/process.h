// process.h - the end of the process as luma sees it (process.cpp): the statistics printed
// once and the trace closed, from exit or from a signal's flusher thread.
// Never call these from a signal handler: they allocate and take locks.
#pragma once

namespace luma::shim {

// Prints the statistics once (LUMA_STATS, LUMA_STATS_FILE) and closes the trace
// (LUMA_TRACE). `signal` is the signal that ends the process, or 0 at a normal exit; the
// statistics then say which. A second caller while the first is still at it waits (up to
// kFlushWaitNs) until the output is complete, so neither exit nor a signal returns before
// the other finished writing; after that it does nothing.
void flush_process_output(int signal) noexcept;

}  // namespace luma::shim
