// group_budget.cpp - the shared per-process slot table of a limit group (see
// group_budget.h for the protocol and why it needs no lock).
#include "budgets/group_budget.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "io/file_trust.h"
#include "live/proc_stat.h"

namespace luma::shim {

namespace {
constexpr unsigned kPidBits = 22;  // Linux's PID_MAX_LIMIT is 2^22
constexpr std::uint64_t kPidMask = (std::uint64_t{1} << kPidBits) - 1;
}  // namespace

// Each slot on its own cache lines: a process's updates do not slow the others' reads.
struct alignas(64) GroupSlot {
  std::atomic<MemberId> owner;
  std::atomic<std::uint64_t> bytes[kGroupDevices];
};

struct GroupShared {
  std::atomic<std::uint64_t> magic;
  // One past the highest slot ever claimed: sums stop there.
  alignas(64) std::atomic<std::uint32_t> slots_used;
  GroupSlot slots[kGroupSlots];
};

// Shared between processes: each atomic must be a plain word, lock-free and address-free;
// all-zero bytes (a fresh ftruncate) are a valid empty table.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t));

MemberId member_id(std::uint32_t pid, std::uint64_t start_time) noexcept {
  return (start_time << kPidBits) | (pid & kPidMask);
}

std::uint32_t member_pid(MemberId id) noexcept { return static_cast<std::uint32_t>(id & kPidMask); }

MemberId process_member_id(std::uint32_t pid) noexcept {
  if (pid == 0 || pid > kPidMask) return 0;
  const std::optional<core::live::ProcStat> s = core::live::read_proc_stat(pid);
  if (!s || s->start_time >= (std::uint64_t{1} << (64 - kPidBits))) return 0;
  return member_id(pid, s->start_time);
}

MemberId own_member_id() noexcept {
  return process_member_id(static_cast<std::uint32_t>(::getpid()));
}

bool member_alive(MemberId id) noexcept {
  // Its memory is freed once it exited (a zombie too); a reused pid has another start time.
  return core::live::process_alive(member_pid(id), id >> kPidBits);
}

std::string group_object_name(std::string_view group, unsigned uid) {
  return "/luma." + std::string(group) + "." + std::to_string(uid);
}

std::unique_ptr<GroupTable> GroupTable::open(const std::string& object_name, MemberId self,
                                             AliveFn alive, std::string* error) {
  auto fail = [&](std::string why) -> std::unique_ptr<GroupTable> {
    if (error != nullptr) *error = std::move(why);
    return nullptr;
  };
  if (self == 0) return fail("this process's start time could not be read from /proc/self/stat");
  // O_NOFOLLOW: a link planted under the name is not followed (glibc adds it too).
  const int fd = ::shm_open(object_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return fail("shm_open(" + object_name + "): " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return fail("fstat(" + object_name + "): " + std::strerror(e));
  }
  // /dev/shm is writable by every local user: one who made the table first (or may write
  // it) could set the group's budget for everyone. Only this user's own table is used.
  if (const std::string why = core::untrusted_file_reason(st, ::geteuid()); !why.empty()) {
    ::close(fd);
    return fail(object_name + " " + why + "; not used");
  }
  // Every process sizes a new object the same way; zero bytes are an empty table, so
  // whoever comes first, no process waits for another to set it up.
  if (st.st_size == 0 && ::ftruncate(fd, sizeof(GroupShared)) != 0) {
    const int e = errno;
    ::close(fd);
    return fail("ftruncate(" + object_name + "): " + std::strerror(e));
  }
  if (st.st_size != 0 && static_cast<std::size_t>(st.st_size) != sizeof(GroupShared)) {
    ::close(fd);
    return fail(object_name + " is a table of another layout (another luma version?)");
  }
  void* map = ::mmap(nullptr, sizeof(GroupShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return fail("mmap(" + object_name + "): " + std::strerror(errno));
  auto* shared = static_cast<GroupShared*>(map);
  std::uint64_t magic = 0;
  if (!shared->magic.compare_exchange_strong(magic, kGroupMagic) && magic != kGroupMagic) {
    ::munmap(map, sizeof(GroupShared));
    return fail(object_name + " is a table of another layout (another luma version?)");
  }
  // A free slot, else one whose process is gone: claimed in one compare-and-swap, then
  // emptied (a dead owner's bytes count until then: conservative, never over the limit).
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < kGroupSlots; ++i) {
      GroupSlot& s = shared->slots[i];
      MemberId owner = s.owner.load();
      if (pass == 0 ? owner != 0 : (owner == 0 || alive(owner))) continue;
      if (!s.owner.compare_exchange_strong(owner, self)) continue;
      for (auto& b : s.bytes) b.store(0);
      // Published before this process adds anything, so every sum from then on sees it.
      std::uint32_t used = shared->slots_used.load();
      while (used < i + 1 && !shared->slots_used.compare_exchange_weak(used, static_cast<std::uint32_t>(i + 1))) {
      }
      return std::unique_ptr<GroupTable>(new GroupTable(shared, i, self, alive));
    }
  }
  ::munmap(map, sizeof(GroupShared));
  return fail(object_name + ": all " + std::to_string(kGroupSlots) +
              " slots are held by running processes");
}

void GroupTable::remove(const std::string& object_name) noexcept {
  ::shm_unlink(object_name.c_str());
}

GroupTable::~GroupTable() { ::munmap(shared_, sizeof(GroupShared)); }

bool GroupTable::take(std::size_t device, std::size_t bytes, std::size_t limit) noexcept {
  if (device >= kGroupDevices || bytes > limit) return false;
  std::atomic<std::uint64_t>& mine = shared_->slots[slot_].bytes[device];
  mine.fetch_add(bytes);  // first: see group_budget.h for why add-then-sum is enough
  // Counting every claimed slot overcounts dead members: only then are they checked.
  if (sum(device, false) <= limit || sum(device, true) <= limit) return true;
  mine.fetch_sub(bytes);
  return false;
}

void GroupTable::give_back(std::size_t device, std::size_t bytes) noexcept {
  if (device < kGroupDevices) shared_->slots[slot_].bytes[device].fetch_sub(bytes);
}

std::size_t GroupTable::used(std::size_t device) noexcept {
  return device < kGroupDevices ? sum(device, true) : 0;
}

std::size_t GroupTable::own(std::size_t device) const noexcept {
  return device < kGroupDevices ? shared_->slots[slot_].bytes[device].load() : 0;
}

std::size_t GroupTable::sum(std::size_t device, bool check_alive) noexcept {
  const std::size_t n = std::min<std::size_t>(shared_->slots_used.load(), kGroupSlots);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    GroupSlot& s = shared_->slots[i];
    const MemberId owner = s.owner.load();
    if (owner == 0) continue;
    if (check_alive && i != slot_ && owner != self_ && !alive_(owner)) {
      reap(i, owner);
      continue;
    }
    const std::uint64_t b = s.bytes[device].load();
    total = b > std::numeric_limits<std::uint64_t>::max() - total
                ? std::numeric_limits<std::uint64_t>::max()
                : total + b;
  }
  return static_cast<std::size_t>(std::min<std::uint64_t>(total, std::numeric_limits<std::size_t>::max()));
}

// Empties a dead member's slot for reuse. Held under this process's own id while its
// bytes are zeroed (so no claimer adds into it meanwhile); should this process die here,
// the slot is a dead member's again and the next sum reaps it.
void GroupTable::reap(std::size_t slot, MemberId dead) noexcept {
  GroupSlot& s = shared_->slots[slot];
  MemberId expected = dead;
  if (!s.owner.compare_exchange_strong(expected, self_)) return;  // someone else did
  for (auto& b : s.bytes) b.store(0);
  s.owner.store(0);
}

}  // namespace luma::shim
