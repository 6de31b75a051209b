// live_directory.cpp - listing, checking and reading the live records (see
// live_directory.h; the liveness rule is docs/live-record.md's).
#include "inputs/live_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "io/file_trust.h"
#include "live/proc_stat.h"

namespace luma::tools {

namespace {

namespace live = core::live;

// Whether the process that published `r` still runs and still maps the record (a pid
// reused by another process has another start time; a process that exec'd another
// program maps it no more).
bool publisher_alive(const live::RecordView& r, const struct stat& st) {
  if (!live::process_alive(r.pid, r.start_time)) return false;
  return live::process_maps_file(r.pid, r.map_address, r.map_bytes, st.st_dev, st.st_ino).value_or(true);
}

struct Closer {
  void operator()(DIR* d) const { closedir(d); }
};

}  // namespace

std::string default_live_dir() {
  const char* env = std::getenv("LUMA_LIVE_DIR");
  if (env != nullptr && env[0] == '/') return env;
  return live::kDefaultDir;
}

LiveScan scan_live_directory(const std::string& dir) {
  std::unique_ptr<DIR, Closer> d(opendir(dir.c_str()));
  if (d == nullptr) throw std::runtime_error("cannot list " + dir + ": " + std::strerror(errno));
  const unsigned uid = geteuid();
  LiveScan scan;
  auto skip = [&](const std::string& path, std::string reason) {
    scan.skipped.push_back({path, std::move(reason)});
  };
  while (const dirent* e = readdir(d.get())) {
    const std::optional<live::RecordName> name = live::parse_record_file_name(e->d_name);
    if (!name || name->uid != uid) continue;  // not a record, or another user's
    const std::string path = dir + "/" + e->d_name;
    // O_NONBLOCK: a FIFO under the name does not stop the scan.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // its process removed it meanwhile
      skip(path, errno == ELOOP ? "is a symbolic link" : std::string("cannot be opened: ") + std::strerror(errno));
      continue;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      skip(path, std::string("cannot be examined: ") + std::strerror(errno));
      ::close(fd);
      continue;
    }
    if (std::string why = core::untrusted_file_reason(st, uid); !why.empty()) {
      skip(path, why);
      ::close(fd);
      continue;
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    void* map = size == 0 ? nullptr : ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) {
      skip(path, std::string("cannot be mapped: ") + std::strerror(errno));
      continue;
    }
    static const unsigned char kEmpty[1] = {};
    live::ReadResult r = live::read_record(map != nullptr ? map : kEmpty, size);
    if (map != nullptr) ::munmap(map, size);
    if (r.status != live::ReadStatus::ok) {
      skip(path, r.error);
      continue;
    }
    if (r.record.pid != name->pid || r.record.uid != uid) {
      skip(path, "holds the record of pid " + std::to_string(r.record.pid) + " uid " +
                     std::to_string(r.record.uid) + ", not the one its name says");
      continue;
    }
    if (r.record.state != live::RecordState::live) continue;  // its process is exiting
    if (!publisher_alive(r.record, st)) {
      // Left by a process that could not remove it: this user's own file, so tidied here.
      ::unlink(path.c_str());
      continue;
    }
    scan.records.push_back(std::move(r.record));
  }
  return scan;
}

std::vector<live::DeviceRow> rows_of(const LiveScan& scan) {
  std::vector<live::DeviceRow> rows;
  for (const live::RecordView& r : scan.records) {
    std::vector<live::DeviceRow> mine = live::device_rows(r);
    rows.insert(rows.end(), mine.begin(), mine.end());
  }
  live::sort_rows(rows);
  return rows;
}

std::string skipped_line(const live::SkippedFile& s) { return s.path + " " + s.reason + "; skipped"; }

}  // namespace luma::tools
