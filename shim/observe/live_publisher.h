// live_publisher.h - LUMA_LIVE_DIR: this process's live statistics for `luma top` and
// `luma exporter` (docs/live-record.md). Each allocator (one per CUDA context; with a plan,
// its cache and its plan's arena each) keeps one slot of the process's record up to date
// through a core::live::SlotWriter it is given (CachingAllocator::set_live_writer: a
// sequence lock, a few stores at the end of each allocator call; the plan's arena: per
// event); the
// record itself (live_record.h) is made when the first allocator is built, so a process
// that never allocates publishes nothing.
//
// A destroyed context's slot is taken over by the next allocator of the same device, so
// a program that resets its device in a loop uses one slot and keeps the device's peaks
// and OOM count. The writers live as long as the process (one per slot, never freed).
// Never throws; a record that cannot be made is one log line, then the process publishes
// nothing.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "live/live_writer.h"
#include "observe/live_record.h"
#include "config/settings.h"

namespace luma::shim {

class LivePublisher {
 public:
  // At the one-time initialisation: the directory (empty: LUMA_LIVE_DIR=off).
  void configure(const ShimSettings& settings) noexcept;
  bool wanted() const noexcept { return !dir_.empty(); }

  // For a context's allocator being built (ContextTable's lock held): the writer of a new
  // slot for one of its parts (key: the cache, or the plan's arena), or nullptr when
  // nothing is published. limit: the device's memory limit (nullopt: none); group: the
  // limit_group this process shares its limits with ("" for none, or when its table could
  // not be used).
  core::live::SlotWriter* writer_for(const void* key, int device, std::optional<std::uint64_t> limit,
                                     const std::string& group) noexcept;

  // The part `key` is retired (its context is gone, its memory with it): its slot goes to
  // the next allocator of its device.
  void release(const void* key) noexcept;

  // At exit (and on SIGTERM/SIGINT): the record is closed and removed.
  void close_at_exit() noexcept;
  // In a forked child: the record is the parent's; never touched again.
  void detach_in_child() noexcept;

 private:
  bool open(const std::string& group_name) noexcept;

  struct SlotOwner {
    const void* key = nullptr;  // nullptr: released (its slot may be taken over)
    int device = 0;
    bool used = false;
  };

  std::string dir_;
  bool dir_from_user_ = false;  // LUMA_LIVE_DIR was set: a failure is a warning
  std::mutex mu_;
  bool tried_ = false;
  std::unique_ptr<LiveRecord> record_;
  pid_t owner_pid_ = 0;
  std::array<SlotOwner, core::live::kSlots> owners_{};
  std::array<core::live::SlotWriter, core::live::kSlots> writers_{};  // writer i: slot i
  bool said_full_ = false;
  std::atomic<bool> detached_{false};
};

}  // namespace luma::shim
