// stats_output.h - where the exit statistics go: the LUMA_STATS_FILE pattern expanded
// (%p pid, %h host name, %r rank, %% a percent sign) and the rank taken from the usual
// launcher variables. Pure: the caller passes pid, host and environment.
#pragma once

#include <string>
#include <string_view>

#include "settings.h"

namespace luma::shim {

// The launchers' rank variables, first found wins: torchrun, Open MPI, MPICH/PMI, Slurm.
inline constexpr const char* kRankVariables[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                                 "SLURM_PROCID"};

// The rank from the first rank variable set; "0" when none is (a lone process is rank 0).
std::string rank_from_env(const EnvLookup& getenv_fn);

// Expands the pattern; an unknown %x is kept as written.
std::string expand_stats_path(std::string_view pattern, long pid, std::string_view host,
                              std::string_view rank);

}  // namespace luma::shim
