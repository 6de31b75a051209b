// live_publisher.cpp - the live record's slots and their writers (see live_publisher.h).
#include "observe/live_publisher.h"

#include <errno.h>  // program_invocation_short_name
#include <time.h>
#include <unistd.h>

#include "live/proc_stat.h"
#include "config/log.h"
#include "observe/run_identity.h"

namespace luma::shim {

void LivePublisher::configure(const ShimSettings& settings) noexcept {
  try {
    dir_ = settings.live_dir;
    dir_from_user_ = settings.live_dir_set;
  } catch (...) {
    dir_.clear();
  }
}

bool LivePublisher::open(const std::string& group_name) noexcept {
  if (tried_) return record_ != nullptr;
  tried_ = true;
  try {
    core::live::RecordIdentity id;
    id.pid = static_cast<unsigned>(::getpid());
    id.uid = static_cast<unsigned>(::geteuid());
    const std::optional<core::live::ProcStat> self = core::live::read_proc_stat(id.pid);
    if (!self) {
      log_noexcept(LogLevel::warn, "LUMA_LIVE_DIR: this process's start time cannot be read from /proc; it is not published");
      return false;
    }
    id.start_time = self->start_time;
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    id.created_unix_ns = static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u +
                         static_cast<std::uint64_t>(now.tv_nsec);
    id.exe = program_invocation_short_name;
    for (const std::string& arg : process_command_line()) {
      if (id.command.size() >= core::live::kCommandBytes) break;
      id.command += (id.command.empty() ? "" : " ") + arg;
    }
    id.group = group_name;
    std::string error;
    LiveRecord::Failure failure = LiveRecord::Failure::unavailable;
    record_ = LiveRecord::create(dir_, id, &error, &failure);
    if (record_ == nullptr) {
      // Another user's file under this name is worth a warning wherever it is; a default
      // directory that does not exist here (no /dev/shm) is not.
      const bool loud = failure == LiveRecord::Failure::refused || dir_from_user_;
      log_noexcept(loud ? LogLevel::warn : LogLevel::info,
                "LUMA_LIVE_DIR: {}; this process is not published (luma top will not list it)", error);
      return false;
    }
    owner_pid_ = ::getpid();
    log_noexcept(LogLevel::debug, "live statistics in {}", record_->path());
    return true;
  } catch (...) {
    record_.reset();
    return false;
  }
}

core::live::SlotWriter* LivePublisher::writer_for(const void* key, int device,
                                                  std::optional<std::uint64_t> limit,
                                                  const std::string& group) noexcept {
  if (dir_.empty() || detached_.load()) return nullptr;
  try {
    std::lock_guard lock(mu_);
    if (!open(group)) return nullptr;
    // A released slot of this device (its context is gone), else a new one.
    std::optional<std::uint32_t> slot;
    for (std::uint32_t i = 0; i < core::live::kSlots && !slot; ++i)
      if (owners_[i].used && owners_[i].key == nullptr && owners_[i].device == device) slot = i;
    if (!slot) slot = core::live::next_free_slot(record_->base());
    if (!slot) {
      if (!said_full_)
        log_noexcept(LogLevel::warn, "LUMA_LIVE_DIR: more than {} allocators alive at once; the newest are not published",
                   core::live::kSlots);
      said_full_ = true;
      return nullptr;
    }
    core::live::SlotWriter& w = writers_[*slot];
    w.bind(record_->base(), *slot, device, limit, !group.empty());
    owners_[*slot] = SlotOwner{key, device, true};
    return &w;
  } catch (...) {
    return nullptr;
  }
}

void LivePublisher::release(const void* key) noexcept {
  if (dir_.empty()) return;
  std::lock_guard lock(mu_);
  for (SlotOwner& o : owners_)
    if (o.used && o.key == key) o.key = nullptr;
}

void LivePublisher::close_at_exit() noexcept {
  if (detached_.load() || dir_.empty()) return;
  // Not while an allocator is being built (a thread stuck there must not stop the exit):
  // a record made after this point is left, and readers find its process gone.
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (record_ != nullptr && owner_pid_ == ::getpid()) record_->close();
}

void LivePublisher::detach_in_child() noexcept { detached_.store(true); }

}  // namespace luma::shim
