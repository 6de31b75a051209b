// device_limits.h - the memory limit of each device index (LUMA_CONF memory_limit,
// memory_fraction, limit_group; docs/settings.md "Memory limits"): one budget per device,
// shared by every context of that device in the process, and - with limit_group - by
// every process of the group. Made on first use, when the device's first context is
// served; never freed (like the context entries that point at them).
//
// budget_for is called only under the context table's lock (context_table.h); a context
// entry keeps its budget (through its LimitedDevice) for lock-free use. Never throws; shared memory that cannot be used is one log line, then each
// device gets a budget of this process's own.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include "settings/config.h"
#include "budgets/group_budget.h"
#include "limits/memory_budget.h"

namespace luma::shim {

class DeviceLimits {
 public:
  // Device indices with a limit (as many as a group table holds).
  static constexpr std::size_t kMaxDevices = kGroupDevices;

  // Whether the settings ask for a limit at all.
  static bool wanted(const core::Settings& s) noexcept {
    return s.memory_limit != 0 || s.memory_fraction > 0;
  }

  // The budget of `device` (made on the first call), or nullptr when no limit applies.
  // device_total: the device's memory in bytes (0: unknown, so memory_fraction cannot
  // apply; said once).
  core::MemoryBudget* budget_for(int device, std::size_t device_total,
                                 const core::Settings& settings) noexcept;
  // Whether the limits are a limit_group's (its shared table is in use); known once a
  // budget was made.
  bool grouped() const noexcept { return group_ != nullptr; }

 private:
  GroupTable* group(const core::Settings& settings) noexcept;

  std::array<core::MemoryBudget*, kMaxDevices> budgets_{};  // never freed
  std::array<bool, kMaxDevices> decided_{};
  std::unique_ptr<GroupTable> group_;
  bool group_tried_ = false;
  bool said_too_many_ = false;
  bool said_group_alone_ = false;
};

}  // namespace luma::shim
