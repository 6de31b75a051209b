// trace_location.h - after `luma run`, the trace file(s) the program's process wrote: the
// LUMA_TRACE pattern expanded as libluma.so expands it (%p pid, %h host, %r rank,
// %e executable name, %%), with the executable name matched by a wildcard (the tool knows
// the pid it started, not what the process called itself after an exec), plus the
// NAME.PID form libluma.so falls back to when the name was in use. A trace found by
// pattern is attributed by what its own header says (pid, executable), since a pattern
// with %e or without %p also matches the files of other processes of the run.
#pragma once

#include <string>
#include <vector>

namespace luma::tools {

struct TraceNameFields {
  long pid = 0;
  std::string host;
  std::string rank;
};

// Existing files the process `fields.pid` may have written for `pattern`, newest first.
// With any_pid, %p matches any pid: the traces of the processes a launcher (a shell
// script, mpirun, torchrun) started, each of which records its own.
std::vector<std::string> find_written_traces(const std::string& pattern,
                                             const TraceNameFields& fields, bool any_pid = false);

// The process a trace's header names. pid 0 and an empty executable when the file is no
// readable trace (it was found by name only).
struct TraceOwner {
  long pid = 0;
  std::string executable;  // the first word of its command line
};
TraceOwner trace_owner(const std::string& path);

}  // namespace luma::tools
