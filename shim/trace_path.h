// trace_path.h - the LUMA_TRACE value turned into a file name: "1" (or true/yes/on) means
// the default pattern, "0" (false/no/off) means no trace; the pattern's %p (pid), %h (host
// name), %r (rank), %e (executable name) and %% are expanded. Pure: the caller passes the
// process's facts, so tests need no real process.
#pragma once

#include <string>
#include <string_view>

namespace luma::shim {

// In the working directory, one file per process: a multi-process job (torchrun, mpirun,
// srun) and a program that execs others never share a file.
inline constexpr std::string_view kDefaultTracePattern = "luma.%e.%p.trace";

// The pattern LUMA_TRACE asks for: empty when it asks for no trace.
std::string trace_pattern_from_setting(std::string_view value);

struct PathFields {
  long pid = 0;
  std::string_view host;
  std::string_view rank;
  std::string_view exe;
};

// Expands %p %h %r %e %%; an unknown %x is kept as written.
std::string expand_path_pattern(std::string_view pattern, const PathFields& fields);

// Whether the pattern names the pid (each process then has its own file).
bool pattern_has_pid(std::string_view pattern) noexcept;

}  // namespace luma::shim
