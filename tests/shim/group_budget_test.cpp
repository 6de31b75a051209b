// group_budget_test.cpp - the shared table of a limit_group (shim/budgets/group_budget.h), with
// several members acted by one test process: each GroupTable gets its own member id, and
// the liveness check reads a table the test controls. Real processes are checked by
// member_alive (a child, a zombie, a recycled start time), and end to end by the
// integration test that SIGKILLs a member.
#include "budgets/group_budget.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace luma::shim {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// The members the test says are alive.
std::mutex g_alive_mu;
std::set<MemberId> g_alive;

bool test_alive(MemberId id) {
  std::lock_guard lock(g_alive_mu);
  return g_alive.count(id) != 0;
}
void set_alive(MemberId id, bool alive) {
  std::lock_guard lock(g_alive_mu);
  if (alive) g_alive.insert(id);
  else g_alive.erase(id);
}

class GroupBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/luma.test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    GroupTable::remove(name_);
  }
  void TearDown() override { GroupTable::remove(name_); }

  // A member with pid `pid` (start time 1), alive.
  std::unique_ptr<GroupTable> member(std::uint32_t pid, std::uint64_t start = 1) {
    const MemberId id = member_id(pid, start);
    set_alive(id, true);
    std::string error;
    auto t = GroupTable::open(name_, id, &test_alive, &error);
    EXPECT_NE(t, nullptr) << error;
    return t;
  }

  std::string name_;
};

TEST_F(GroupBudgetTest, MembersShareOneLimitPerDevice) {
  auto a = member(101), b = member(102);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->slot(), b->slot());
  EXPECT_TRUE(a->take(0, 40 * MiB, 64 * MiB));
  EXPECT_FALSE(b->take(0, 32 * MiB, 64 * MiB));  // 72 > 64
  EXPECT_EQ(b->own(0), 0u);                       // the refused addition was taken back
  EXPECT_TRUE(b->take(0, 24 * MiB, 64 * MiB));    // exactly the limit
  EXPECT_EQ(a->used(0), 64 * MiB);
  EXPECT_TRUE(b->take(1, 64 * MiB, 64 * MiB));    // another device index: its own limit
  a->give_back(0, 40 * MiB);
  EXPECT_EQ(b->used(0), 24 * MiB);
  EXPECT_TRUE(b->take(0, 40 * MiB, 64 * MiB));
  EXPECT_FALSE(a->take(kGroupDevices, 1, 64 * MiB));  // no such device index
  EXPECT_FALSE(a->take(0, 65 * MiB, 64 * MiB));
}

TEST_F(GroupBudgetTest, ADeadMembersShareComesBackAndItsSlotIsReused) {
  auto a = member(201), b = member(202);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->take(0, 48 * MiB, 64 * MiB));
  EXPECT_FALSE(b->take(0, 32 * MiB, 64 * MiB));
  const std::size_t a_slot = a->slot();
  set_alive(member_id(201, 1), false);  // killed: nothing of it ran
  EXPECT_TRUE(b->take(0, 32 * MiB, 64 * MiB));
  EXPECT_EQ(b->used(0), 32 * MiB);
  auto c = member(203);  // the emptied slot is free again
  ASSERT_TRUE(c);
  EXPECT_EQ(c->slot(), a_slot);
  EXPECT_EQ(c->own(0), 0u);
}

TEST_F(GroupBudgetTest, ARecycledPidIsNotTheMemberThatDied) {
  auto a = member(301, /*start=*/100), b = member(302);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->take(0, 64 * MiB, 64 * MiB));
  set_alive(member_id(301, 100), false);
  set_alive(member_id(301, 555), true);  // pid 301 again, a process started later
  EXPECT_TRUE(b->take(0, 64 * MiB, 64 * MiB));
}

TEST_F(GroupBudgetTest, ADeadMembersSlotIsClaimedWhenEveryOtherIsHeld) {
  std::vector<std::unique_ptr<GroupTable>> members;
  for (std::uint32_t i = 0; i < kGroupSlots; ++i) {
    members.push_back(member(1000 + i));
    ASSERT_TRUE(members.back());
  }
  members[7]->take(0, 8 * MiB, 64 * MiB);
  std::string error;
  const MemberId late = member_id(5000, 1);
  set_alive(late, true);
  EXPECT_EQ(GroupTable::open(name_, late, &test_alive, &error), nullptr);
  EXPECT_NE(error.find("slots"), std::string::npos) << error;
  set_alive(member_id(1007, 1), false);
  auto t = GroupTable::open(name_, late, &test_alive, &error);
  ASSERT_NE(t, nullptr) << error;
  EXPECT_EQ(t->slot(), 7u);
  EXPECT_EQ(t->own(0), 0u);  // the dead member's bytes are not the newcomer's
  EXPECT_EQ(t->used(0), 0u);
}

TEST_F(GroupBudgetTest, ATableOfAnotherLayoutIsRefused) {
  const int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  std::string error;
  set_alive(member_id(401, 1), true);
  EXPECT_EQ(GroupTable::open(name_, member_id(401, 1), &test_alive, &error), nullptr);
  EXPECT_NE(error.find("another layout"), std::string::npos) << error;
}

// /dev/shm is writable by every local user: a table someone made first with mode 0666
// (so that any member opens it) would let them set the group's budget. Refused, with the
// reason, and the table is left as it was.
TEST_F(GroupBudgetTest, ATableOthersMayWriteIsRefused) {
  const int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0666), 0);  // as the umask would not let shm_open make it
  close(fd);
  std::string error;
  set_alive(member_id(411, 1), true);
  EXPECT_EQ(GroupTable::open(name_, member_id(411, 1), &test_alive, &error), nullptr);
  EXPECT_NE(error.find("is writable by others (mode 0666)"), std::string::npos) << error;
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm" + name_).c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0) << "the refused table was sized by this process";
}

// A table another user owns (mode 0600, so only root could open it anyway): made here as
// root and given to nobody (65534). Without root the test cannot make such a file.
TEST_F(GroupBudgetTest, ATableOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  const int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchown(fd, 65534, 65534), 0);
  close(fd);
  std::string error;
  set_alive(member_id(412, 1), true);
  EXPECT_EQ(GroupTable::open(name_, member_id(412, 1), &test_alive, &error), nullptr);
  EXPECT_NE(error.find("is owned by uid 65534, not 0"), std::string::npos) << error;
}

// A symbolic link planted under the table's name is not followed.
TEST_F(GroupBudgetTest, ALinkUnderTheNameIsNotFollowed) {
  const std::string target = "/dev/shm" + name_ + ".target";
  const std::string link = "/dev/shm" + name_;
  ::unlink(target.c_str());
  const int fd = ::open(target.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  std::string error;
  set_alive(member_id(413, 1), true);
  EXPECT_EQ(GroupTable::open(name_, member_id(413, 1), &test_alive, &error), nullptr);
  EXPECT_NE(error.find("shm_open"), std::string::npos) << error;
  struct stat st {};
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0) << "the link's target was written";
  ::unlink(target.c_str());
}

TEST_F(GroupBudgetTest, NoIdentityNoTable) {
  std::string error;
  EXPECT_EQ(GroupTable::open(name_, 0, &test_alive, &error), nullptr);
  EXPECT_NE(error.find("/proc/self/stat"), std::string::npos) << error;
}

// Members reserving at once (add to their own slot, then sum) never hold more than the
// limit together; everything given back, the group holds nothing.
TEST_F(GroupBudgetTest, ConcurrentMembersNeverPassTheLimitTogether) {
  constexpr int kMembers = 6;
  std::vector<std::unique_ptr<GroupTable>> members;
  for (int i = 0; i < kMembers; ++i) {
    members.push_back(member(600 + static_cast<std::uint32_t>(i)));
    ASSERT_TRUE(members.back());
  }
  const std::size_t limit = 10 * MiB;
  std::atomic<std::size_t> held{0};
  std::atomic<bool> over{false};
  std::atomic<int> successes{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kMembers; ++i) {
    threads.emplace_back([&, i] {
      GroupTable& t = *members[static_cast<std::size_t>(i)];
      const std::size_t n = static_cast<std::size_t>(i % 3 + 2) * MiB;
      for (int k = 0; k < 5000; ++k) {
        if (!t.take(0, n, limit)) continue;
        successes.fetch_add(1);
        if (held.fetch_add(n) + n > limit) over = true;
        held.fetch_sub(n);
        t.give_back(0, n);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(over.load());
  EXPECT_GT(successes.load(), 0);
  EXPECT_EQ(members[0]->used(0), 0u);
}

// ---- real processes ---------------------------------------------------------------

TEST(MemberAlive, ThisProcessIsAliveAndADeadChildIsNot) {
  const MemberId self = own_member_id();
  ASSERT_NE(self, 0u);
  EXPECT_EQ(member_pid(self), static_cast<std::uint32_t>(getpid()));
  EXPECT_TRUE(member_alive(self));
  // The same pid with another start time: a recycled pid, not this process.
  EXPECT_FALSE(member_alive(member_id(member_pid(self), (self >> 22) + 1)));
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    close(go[1]);
    (void)!read(go[0], &c, 1);  // until the parent closes its end
    _exit(0);
  }
  close(go[0]);
  // The child's id as it would claim its slot.
  const MemberId child_id = process_member_id(static_cast<std::uint32_t>(child));
  ASSERT_NE(child_id, 0u);
  EXPECT_TRUE(member_alive(child_id));
  close(go[1]);  // the child exits...
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_FALSE(member_alive(child_id)) << "a zombie holds no device memory";  // ...not reaped yet
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(member_alive(child_id));
}

TEST(GroupObjectName, NamesTheGroupAndTheUser) {
  EXPECT_EQ(group_object_name("job-1", 1000), "/luma.job-1.1000");
}

}  // namespace
}  // namespace luma::shim
