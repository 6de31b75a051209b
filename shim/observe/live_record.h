// live_record.h - this process's live-statistics file (LUMA_LIVE_DIR, docs/live-record.md):
// DIR/luma-live.UID.PID, mode 0600, made whole under a hidden temporary name and renamed
// into place (a reader never sees half a record), mapped for the life of the process and
// removed at exit. The record's memory is core/live/; what writes into it is
// live_publisher.h.
//
// The directory is shared with every local user (/dev/shm): a file already under this
// process's name that another user owns, or that others may write, is refused (this
// process then publishes nothing), never replaced or used; links are not followed.
// Pure (no driver, no logging): the caller logs the error.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "live/live_writer.h"

namespace luma::shim {

class LiveRecord {
 public:
  enum class Failure {
    unavailable,  // the directory cannot be used (missing, read-only, out of memory)
    refused,      // a file there that is not this user's own (error names it)
  };

  // Makes the record of `id` (pid, uid: its name) in `dir`, published (state live);
  // `id`'s map_address and map_bytes are filled in here. nullptr, with *error (one
  // phrase naming the file) and *failure, when it cannot.
  static std::unique_ptr<LiveRecord> create(const std::string& dir, core::live::RecordIdentity id,
                                            std::string* error, Failure* failure);

  // The record's memory (core::live::Header then the slots); mapped until the process ends.
  void* base() const noexcept { return base_; }
  const std::string& path() const noexcept { return path_; }

  // At exit: the record is closed and its file removed (if it is still the one this
  // process made). The memory stays mapped: another thread may still be in an allocation.
  void close() noexcept;

  ~LiveRecord() = default;  // unmaps nothing (see close)
  LiveRecord(const LiveRecord&) = delete;
  LiveRecord& operator=(const LiveRecord&) = delete;

 private:
  LiveRecord(void* base, std::string path, dev_t dev, ino_t ino) noexcept
      : base_(base), path_(std::move(path)), dev_(dev), ino_(ino) {}

  void* base_;
  std::string path_;
  dev_t dev_;
  ino_t ino_;
  bool closed_ = false;
};

}  // namespace luma::shim
