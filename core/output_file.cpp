// output_file.cpp - the same-file checks of output_file.h, on stat(2): device and inode
// for files that exist, the weakly canonical path (links resolved one level at a time)
// for those that do not.
#include "output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

namespace luma::core {

namespace {

namespace fs = std::filesystem;

// Symbolic-link levels followed before giving up, as the kernel's ELOOP limit.
constexpr int kMaxLinkLevels = 40;

// The file a path finally names: symbolic links followed one level at a time, so that a
// dangling link yields the path it points to (which the output then creates).
std::string resolve_links(const std::string& path) {
  std::string p = path;
  for (int level = 0; level < kMaxLinkLevels; ++level) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string target(static_cast<std::size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0) throw std::runtime_error(path + ": cannot read the symbolic link " + p);
    target.resize(static_cast<std::size_t>(n));
    p = fs::path(target).is_absolute() ? target : (fs::path(p).parent_path() / target).string();
  }
  throw std::runtime_error(path + ": too many levels of symbolic links");
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  if (a == "-" || b == "-") return false;
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(resolve_links(a), ea);
  const fs::path cb = fs::weakly_canonical(resolve_links(b), eb);
  return !ea && !eb && ca == cb;
}

void check_outputs_distinct(const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const std::string& in : inputs)
      if (same_file(outputs[i], in))
        throw std::runtime_error("the output " + outputs[i] + " is the input " + in +
                                 " (writing it would destroy the input); name another file");
    for (std::size_t j = 0; j < i; ++j)
      if (same_file(outputs[i], outputs[j]))
        throw std::runtime_error("the outputs " + outputs[j] + " and " + outputs[i] +
                                 " are the same file; name different files");
  }
}

}  // namespace luma::core
