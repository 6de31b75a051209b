// live_record.cpp - making, publishing and removing this process's live record (see
// live_record.h).
#include "observe/live_record.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/file_trust.h"

namespace luma::shim {

namespace {

// Opens a new file `path` for this record: O_EXCL and O_NOFOLLOW, so nothing that is
// already there (a link, another user's file) is opened. A temporary left by a process
// of the same pid that died while making its record is this user's: removed, then made
// again once. -1 with *error otherwise.
int create_new(const std::string& path, std::string* error, LiveRecord::Failure* failure) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    if (errno != EEXIST || attempt > 0) break;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;  // gone meanwhile: try again
    if (std::string why = core::untrusted_file_reason(st, ::geteuid()); !why.empty()) {
      *error = path + " " + why;
      *failure = LiveRecord::Failure::refused;
      return -1;
    }
    ::unlink(path.c_str());
  }
  *error = path + ": " + std::strerror(errno);
  *failure = LiveRecord::Failure::unavailable;
  return -1;
}

}  // namespace

std::unique_ptr<LiveRecord> LiveRecord::create(const std::string& dir, core::live::RecordIdentity id,
                                               std::string* error, Failure* failure) {
  const std::string name = core::live::record_file_name(id.uid, id.pid);
  const std::string path = dir + "/" + name;
  const std::string temp = dir + "/." + name + ".tmp";  // no record's name: readers skip it
  // A file under the record's own name that is not this user's is refused before any is
  // made (a rename would replace it where the directory lets it, or fail where it is
  // sticky, as /dev/shm is).
  if (struct stat st {}; ::lstat(path.c_str(), &st) == 0) {
    if (std::string why = core::untrusted_file_reason(st, ::geteuid()); !why.empty()) {
      *error = path + " " + why;
      *failure = Failure::refused;
      return nullptr;
    }
  }
  const int fd = create_new(temp, error, failure);
  if (fd < 0) return nullptr;
  auto give_up = [&](const std::string& what, int e, void* map) -> std::unique_ptr<LiveRecord> {
    *error = what + ": " + std::strerror(e);
    *failure = Failure::unavailable;
    if (map != nullptr) ::munmap(map, core::live::kRecordBytes);
    ::close(fd);
    ::unlink(temp.c_str());
    return nullptr;
  };
  // Readable and writable by this user only, whatever the umask left.
  if (::fchmod(fd, 0600) != 0) return give_up("fchmod(" + temp + ")", errno, nullptr);
  if (::ftruncate(fd, static_cast<off_t>(core::live::kRecordBytes)) != 0)
    return give_up("ftruncate(" + temp + ")", errno, nullptr);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return give_up("fstat(" + temp + ")", errno, nullptr);
  void* map = ::mmap(nullptr, core::live::kRecordBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return give_up("mmap(" + temp + ")", errno, nullptr);
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::uint64_t p = page > 0 ? static_cast<std::uint64_t>(page) : 4096;
  id.map_address = reinterpret_cast<std::uintptr_t>(map);
  id.map_bytes = (core::live::kRecordBytes + p - 1) / p * p;  // the mapping as /proc lists it
  core::live::init_record(map, id);
  if (::rename(temp.c_str(), path.c_str()) != 0) return give_up("rename(" + temp + ", " + path + ")", errno, map);
  ::close(fd);
  core::live::publish_record(map);
  return std::unique_ptr<LiveRecord>(new LiveRecord(map, path, st.st_dev, st.st_ino));
}

void LiveRecord::close() noexcept {
  if (closed_) return;
  closed_ = true;
  core::live::close_record(base_);
  // Only the file this process made: never one that took its name since.
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
}

}  // namespace luma::shim
