// path_pattern.h - the file-name patterns of LUMA_TRACE, LUMA_STATS_FILE, LUMA_OOM_SNAPSHOT
// and `luma run --trace`, written once: %p the pid, %h the host name, %r the rank, %e the
// executable's name, %% a percent sign; any other %x is kept as written. Also the rank
// variables of the launchers and the LUMA_TRACE values that mean "the default" or "none".
// Pure: the caller passes the process's facts (the shim reads them from its own process,
// `luma run` from the one it starts), so tests need no real process.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace luma::core {

// The launchers' rank variables, first found wins: torchrun, Open MPI, MPICH/PMI, Slurm.
inline constexpr const char* kRankVariables[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                                 "SLURM_PROCID"};

// In the working directory, one file per process: a multi-process job (torchrun, mpirun,
// srun) and a program that execs others never share a file.
inline constexpr std::string_view kDefaultTracePattern = "luma.%e.%p.trace";

// The rank from the first rank variable `lookup(name)` says is set (non-empty); "0" when
// none is (a lone process is rank 0).
template <typename Lookup>
std::string rank_from(Lookup&& lookup) {
  for (const char* name : kRankVariables) {
    const char* v = lookup(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "0";
}

// The pattern a LUMA_TRACE (or `luma run --trace`) value asks for: "1", "true", "yes", "on"
// the default pattern; empty, "0", "false", "no", "off" none (empty); anything else itself.
// The words in any case (`luma run` always took them so).
std::string trace_pattern_from_setting(std::string_view value);

struct PathFields {
  long pid = 0;
  std::string_view host;
  std::string_view rank;
  // Not every pattern knows the executable (LUMA_STATS_FILE does not): %e is then kept.
  std::optional<std::string_view> exe;
};

// Walks a pattern: literal(c) for each character written as itself (a lone trailing % and
// the % of %% included), key(k) for %p %h %r %e; key returns false for a key it does not
// take, which is then written as itself. Every expansion of a pattern goes through here.
template <typename Literal, typename Key>
void walk_path_pattern(std::string_view pattern, Literal&& literal, Key&& key) {
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '%' || i + 1 == pattern.size()) {
      literal(c);
      continue;
    }
    const char k = pattern[++i];
    if (k == '%') {
      literal('%');
    } else if ((k != 'p' && k != 'h' && k != 'r' && k != 'e') || !key(k)) {
      literal('%');
      literal(k);
    }
  }
}

// The pattern with its fields filled in.
std::string expand_path_pattern(std::string_view pattern, const PathFields& fields);

// Whether the pattern names the pid (each process then has its own file).
bool pattern_has_pid(std::string_view pattern) noexcept;

}  // namespace luma::core
