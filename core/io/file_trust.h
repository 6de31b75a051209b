// file_trust.h - whether a file in a directory other users can write to (/dev/shm) may be
// trusted: a limit_group table (shim/budgets/group_budget.h) or a live-statistics record
// (core/live/) that another local user made first could set a group's budget or show
// made-up figures. Such a file is refused, never used.
#pragma once

#include <sys/stat.h>

#include <string>

namespace luma::core {

// "" when `st` (fstat of the opened file) is a regular file owned by `uid` that neither
// its group nor others may write; otherwise why not, as a phrase that follows the file's
// name: "is owned by uid 65534, not 1000", "is writable by others (mode 0666)", "is not a
// regular file".
std::string untrusted_file_reason(const struct stat& st, unsigned uid);

}  // namespace luma::core
