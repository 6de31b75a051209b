// group_budget.h - a memory limit shared by a group of processes (LUMA_CONF
// limit_group:NAME, docs/settings.md "Memory limits"), kept in POSIX shared memory
// (/dev/shm/luma.NAME.UID) so that every process of a container or of a job on one node
// that names the same group draws from one budget per device index.
//
// Without any lock, so no process can die holding one: a fixed table of per-process slots,
// each {owner, bytes per device}, changed with atomics only. owner packs the pid and the
// process's start time (/proc/<pid>/stat field 22) into one word, so a slot is claimed,
// and a recycled pid told apart, in one compare-and-swap. A process adds to its own slot
// first, then sums every slot; over the limit, it takes its addition back and fails. Two
// processes reserving at once near the limit may both fail (each saw the other's
// addition), but never both succeed past it (sequentially consistent add-then-read: at
// least one of them sees the other). A member that died (killed, crashed, exited) stops
// counting once a sum finds its pid gone, a zombie, or its start time different; its slot
// is then emptied for reuse.
//
// Pure (no driver, no logging, no globals): the caller logs. Tests pass their own
// identity and liveness check to act as several processes in one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "limits/memory_budget.h"

namespace luma::shim {

// The layout in shared memory, fixed by this version (kGroupMagic names it: a table of
// another layout is refused, never misread).
inline constexpr std::size_t kGroupSlots = 256;   // processes of one group at once
inline constexpr std::size_t kGroupDevices = 64;  // device indices 0..63
inline constexpr std::uint64_t kGroupMagic = 0x6c756d61'67727031ULL;  // "lumagrp1"

// A process as the group knows it: pid and start time in one word (pid < 2^22, Linux's
// PID_MAX_LIMIT; start time in clock ticks since boot < 2^42). 0: no process.
using MemberId = std::uint64_t;
MemberId member_id(std::uint32_t pid, std::uint64_t start_time) noexcept;
std::uint32_t member_pid(MemberId id) noexcept;

// The id of process pid from /proc/<pid>/stat; 0 when it cannot be read.
MemberId process_member_id(std::uint32_t pid) noexcept;
// This process's id; 0 when it cannot be read.
MemberId own_member_id() noexcept;
// Whether the process `id` names still runs: /proc/<pid>/stat exists, its state is not
// zombie or dead, and its start time is the one in id.
bool member_alive(MemberId id) noexcept;

// The shared-memory object's name: "/luma.NAME.UID".
std::string group_object_name(std::string_view group, unsigned uid);

struct GroupShared;  // the mapped table (group_budget.cpp)

class GroupTable {
 public:
  using AliveFn = bool (*)(MemberId);

  // Opens (creating if need be, mode 0600) the table named object_name and claims a slot
  // for `self`. nullptr with *error set when shared memory cannot be used (no /dev/shm,
  // permissions, a table another user owns or that others may write, a table of another
  // layout, every slot held by a live process).
  static std::unique_ptr<GroupTable> open(const std::string& object_name, MemberId self,
                                          AliveFn alive, std::string* error);
  // Removes the object's name (tests; processes that have it mapped keep using it).
  static void remove(const std::string& object_name) noexcept;

  ~GroupTable();  // unmaps; the slot stays this process's until it is gone
  GroupTable(const GroupTable&) = delete;
  GroupTable& operator=(const GroupTable&) = delete;

  // Adds bytes to this process's share of device `device` if the group's total stays at or
  // below limit; false (nothing changed) otherwise. device < kGroupDevices.
  bool take(std::size_t device, std::size_t bytes, std::size_t limit) noexcept;
  void give_back(std::size_t device, std::size_t bytes) noexcept;
  // What the live members hold on `device` (dead members' slots are emptied on the way).
  std::size_t used(std::size_t device) noexcept;
  // This process's own share of `device`.
  std::size_t own(std::size_t device) const noexcept;
  std::size_t slot() const noexcept { return slot_; }

 private:
  GroupTable(GroupShared* shared, std::size_t slot, MemberId self, AliveFn alive) noexcept
      : shared_(shared), slot_(slot), self_(self), alive_(alive) {}
  // Sum over every claimed slot; with check_alive, dead members are emptied and skipped.
  std::size_t sum(std::size_t device, bool check_alive) noexcept;
  void reap(std::size_t slot, MemberId dead) noexcept;

  GroupShared* shared_;
  std::size_t slot_;
  MemberId self_;
  AliveFn alive_;
};

// One device's budget in a group table (the table must outlive it).
class GroupBudget final : public core::MemoryBudget {
 public:
  GroupBudget(GroupTable& table, std::size_t device, std::size_t limit) noexcept
      : table_(table), device_(device), limit_(limit) {}
  bool take(std::size_t bytes) noexcept override { return table_.take(device_, bytes, limit_); }
  void give_back(std::size_t bytes) noexcept override { table_.give_back(device_, bytes); }
  std::size_t limit() const noexcept override { return limit_; }
  std::size_t used() const noexcept override { return table_.used(device_); }

 private:
  GroupTable& table_;
  std::size_t device_;
  std::size_t limit_;
};

}  // namespace luma::shim
