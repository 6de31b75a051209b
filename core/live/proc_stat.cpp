// proc_stat.cpp - see proc_stat.h.
#include "live/proc_stat.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <charconv>
#include <cstdio>

namespace luma::core::live {

std::optional<ProcStat> parse_proc_stat(std::string_view line) noexcept {
  const std::size_t close = line.rfind(')');
  if (close == std::string_view::npos || close + 2 >= line.size() || line[close + 1] != ' ')
    return std::nullopt;
  std::string_view rest = line.substr(close + 2);  // field 3 on
  ProcStat s;
  s.state = rest[0];
  for (int field = 3; field < 22; ++field) {  // to the start of field 22
    const std::size_t space = rest.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(space + 1);
  }
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), s.start_time);
  if (ec != std::errc{} || end == rest.data()) return std::nullopt;
  return s;
}

std::optional<ProcStat> read_proc_stat(unsigned pid) noexcept {
  if (pid == 0) return std::nullopt;
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parse_proc_stat(std::string_view(buf, static_cast<std::size_t>(n)));
}

bool process_alive(unsigned pid, std::uint64_t start_time) noexcept {
  const std::optional<ProcStat> s = read_proc_stat(pid);
  if (!s) return false;                                                     // gone
  if (s->state == 'Z' || s->state == 'X' || s->state == 'x') return false;  // exited
  return s->start_time == start_time;                                       // else reused
}

std::optional<bool> process_maps_file(unsigned pid, std::uint64_t address, std::uint64_t bytes, dev_t dev,
                                      ino_t ino) noexcept {
  char path[96];
  std::snprintf(path, sizeof path, "/proc/%u/map_files/%llx-%llx", pid,
                static_cast<unsigned long long>(address), static_cast<unsigned long long>(address + bytes));
  struct stat st {};
  if (::stat(path, &st) == 0) return st.st_dev == dev && st.st_ino == ino;
  if (errno == ENOENT) {
    // No such mapping - or no map_files at all: only a process's own directory tells.
    char dir[48];
    std::snprintf(dir, sizeof dir, "/proc/%u/map_files", pid);
    struct stat d {};
    if (::stat(dir, &d) == 0) return false;
  }
  return std::nullopt;
}

}  // namespace luma::core::live
