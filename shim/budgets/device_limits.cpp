// device_limits.cpp - per-device budgets: the process's own, or a share of a group's
// (see device_limits.h).
#include "budgets/device_limits.h"

#include <unistd.h>

#include "config/log.h"

namespace luma::shim {

GroupTable* DeviceLimits::group(const core::Settings& settings) noexcept {
  if (group_tried_) return group_.get();
  group_tried_ = true;
  try {
    const std::string name = group_object_name(settings.limit_group, static_cast<unsigned>(::getuid()));
    std::string error;
    group_ = GroupTable::open(name, own_member_id(), &member_alive, &error);
    if (group_ == nullptr)
      log_noexcept(LogLevel::warn, "limit_group:{}: shared memory cannot be used ({}); each device's limit "
                 "applies to this process alone", settings.limit_group, error);
    else
      log_noexcept(LogLevel::debug, "limit_group:{}: slot {} of {}", settings.limit_group, group_->slot(), name);
  } catch (...) {
    group_.reset();
  }
  return group_.get();
}

core::MemoryBudget* DeviceLimits::budget_for(int device, std::size_t device_total,
                                             const core::Settings& settings) noexcept {
  if (!wanted(settings) || device < 0) {
    if (!settings.limit_group.empty() && !said_group_alone_) {
      said_group_alone_ = true;
      try {
        log_noexcept(LogLevel::warn, "limit_group:{} has no effect without memory_limit or memory_fraction",
                   settings.limit_group);
      } catch (...) {
      }
    }
    return nullptr;
  }
  const auto d = static_cast<std::size_t>(device);
  try {
    if (d >= kMaxDevices) {
      if (!said_too_many_)
        log_noexcept(LogLevel::warn, "memory limits apply to device indices 0..{}; device {} has none",
                   kMaxDevices - 1, device);
      said_too_many_ = true;
      return nullptr;
    }
    if (decided_[d]) return budgets_[d];
    decided_[d] = true;
    if (settings.memory_fraction > 0 && device_total == 0 && settings.memory_limit == 0) {
      log_noexcept(LogLevel::warn, "memory_fraction: the size of device {} is unknown; it has no limit", device);
      return nullptr;
    }
    // Unknown total with both set: the byte limit alone.
    std::uint64_t limit = settings.memory_limit;
    if (device_total != 0) limit = core::memory_limit_for(settings, device_total).value_or(0);
    GroupTable* table = settings.limit_group.empty() ? nullptr : group(settings);
    core::MemoryBudget* made =
        table != nullptr
            ? static_cast<core::MemoryBudget*>(new GroupBudget(*table, d, limit))
            : static_cast<core::MemoryBudget*>(new core::ProcessBudget(limit));
    budgets_[d] = made;
    log_noexcept(LogLevel::info, "device {}: memory limit {} bytes{}{}", device, limit,
               table != nullptr ? ", shared by limit_group " : "",
               table != nullptr ? settings.limit_group : std::string());
    return made;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace luma::shim
