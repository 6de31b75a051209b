// live_record_test.cpp - this process's live-statistics file (shim/observe/live_record.h): made
// whole under its name with mode 0600, mapped where the record says, removed at exit;
// a file under its name that another user owns, that others may write, or that is a link
// is refused and left alone; a dead namesake of this user's is replaced.
#include "observe/live_record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "live/live_reader.h"
#include "live/proc_stat.h"

namespace luma::shim {
namespace {

class LiveRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/luma-live-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    id_.pid = static_cast<unsigned>(getpid());
    id_.uid = static_cast<unsigned>(geteuid());
    id_.start_time = core::live::read_proc_stat(id_.pid).value().start_time;
    id_.exe = "live_record_test";
    id_.command = "live_record_test --gtest";
    path_ = dir_ + "/" + core::live::record_file_name(id_.uid, id_.pid);
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    (void)!std::system(cmd.c_str());
  }

  std::unique_ptr<LiveRecord> make(std::string* error, LiveRecord::Failure* failure) {
    return LiveRecord::create(dir_, id_, error, failure);
  }
  // A file under the record's name with `mode`, owned by `uid` (when not -1).
  void plant(mode_t mode, int uid = -1) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "planted", 7), 7);
    ASSERT_EQ(fchmod(fd, mode), 0);
    if (uid >= 0) {
      ASSERT_EQ(fchown(fd, static_cast<uid_t>(uid), static_cast<gid_t>(uid)), 0);
    }
    ::close(fd);
  }
  off_t size_of(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 ? st.st_size : -1;
  }

  std::string dir_;
  std::string path_;
  core::live::RecordIdentity id_;
};

TEST_F(LiveRecordTest, IsMadeWholeReadableByThisUserOnlyAndRemovedAtClose) {
  std::string error;
  LiveRecord::Failure failure{};
  const mode_t old_umask = umask(0);  // 0600 whatever the umask
  auto r = make(&error, &failure);
  umask(old_umask);
  ASSERT_NE(r, nullptr) << error;
  EXPECT_EQ(r->path(), path_);
  struct stat st {};
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), core::live::kRecordBytes);
  const core::live::ReadResult read = core::live::read_record(r->base(), core::live::kRecordBytes);
  ASSERT_EQ(read.status, core::live::ReadStatus::ok) << read.error;
  EXPECT_EQ(read.record.state, core::live::RecordState::live);
  EXPECT_EQ(read.record.pid, id_.pid);
  EXPECT_EQ(read.record.exe, "live_record_test");
  // The record says where this process maps it, as /proc lists the mapping.
  EXPECT_EQ(read.record.map_address, reinterpret_cast<std::uintptr_t>(r->base()));
  EXPECT_EQ(core::live::process_maps_file(id_.pid, read.record.map_address, read.record.map_bytes, st.st_dev,
                                          st.st_ino),
            std::optional<bool>(true));
  EXPECT_EQ(core::live::process_maps_file(id_.pid, read.record.map_address, read.record.map_bytes, st.st_dev,
                                          st.st_ino + 1),
            std::optional<bool>(false));
  // No temporary is left beside it.
  EXPECT_EQ(size_of(dir_ + "/." + core::live::record_file_name(id_.uid, id_.pid) + ".tmp"), -1);
  r->close();
  EXPECT_EQ(size_of(path_), -1) << "removed at close";
  EXPECT_EQ(core::live::read_record(r->base(), core::live::kRecordBytes).record.state,
            core::live::RecordState::closed)
      << "still mapped, and closed for readers that had it open";
}

// A record this user left under the same name (a dead process that had this pid) is
// replaced by the new one.
TEST_F(LiveRecordTest, ADeadNamesakeOfThisUserIsReplaced) {
  plant(0600);
  const std::string temp = dir_ + "/." + core::live::record_file_name(id_.uid, id_.pid) + ".tmp";
  ASSERT_EQ(::close(::open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600)), 0);  // half made, died
  std::string error;
  LiveRecord::Failure failure{};
  auto r = make(&error, &failure);
  ASSERT_NE(r, nullptr) << error;
  EXPECT_EQ(static_cast<std::size_t>(size_of(path_)), core::live::kRecordBytes);
  EXPECT_EQ(size_of(temp), -1);
  r->close();
}

// Others may write the file under this process's name: refused (not used, not replaced).
TEST_F(LiveRecordTest, AFileOthersMayWriteIsRefused) {
  plant(0666);
  std::string error;
  LiveRecord::Failure failure{};
  EXPECT_EQ(make(&error, &failure), nullptr);
  EXPECT_EQ(failure, LiveRecord::Failure::refused);
  EXPECT_EQ(error, path_ + " is writable by others (mode 0666)");
  EXPECT_EQ(size_of(path_), 7) << "the file was changed";
}

TEST_F(LiveRecordTest, AFileOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  plant(0600, 65534);
  std::string error;
  LiveRecord::Failure failure{};
  EXPECT_EQ(make(&error, &failure), nullptr);
  EXPECT_EQ(failure, LiveRecord::Failure::refused);
  EXPECT_EQ(error, path_ + " is owned by uid 65534, not 0");
  EXPECT_EQ(size_of(path_), 7);
}

TEST_F(LiveRecordTest, ALinkUnderTheNameIsRefusedAndNotFollowed) {
  const std::string target = dir_ + "/target";
  ASSERT_EQ(::close(::open(target.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600)), 0);
  ASSERT_EQ(symlink(target.c_str(), path_.c_str()), 0);
  std::string error;
  LiveRecord::Failure failure{};
  EXPECT_EQ(make(&error, &failure), nullptr);
  EXPECT_EQ(failure, LiveRecord::Failure::refused);
  EXPECT_EQ(error, path_ + " is not a regular file");
  EXPECT_EQ(size_of(target), 0);
}

// A temporary under the hidden name that another user planted is not removed or used.
TEST_F(LiveRecordTest, AForeignTemporaryIsRefused) {
  const std::string temp = dir_ + "/." + core::live::record_file_name(id_.uid, id_.pid) + ".tmp";
  const int fd = ::open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0622), 0);
  ::close(fd);
  std::string error;
  LiveRecord::Failure failure{};
  EXPECT_EQ(make(&error, &failure), nullptr);
  EXPECT_EQ(failure, LiveRecord::Failure::refused);
  EXPECT_EQ(error, temp + " is writable by others (mode 0622)");
  EXPECT_EQ(size_of(temp), 0);
  EXPECT_EQ(size_of(path_), -1);
}

TEST_F(LiveRecordTest, AMissingDirectoryIsUnavailable) {
  std::string error;
  LiveRecord::Failure failure{};
  EXPECT_EQ(LiveRecord::create(dir_ + "/nowhere", id_, &error, &failure), nullptr);
  EXPECT_EQ(failure, LiveRecord::Failure::unavailable);
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
}

}  // namespace
}  // namespace luma::shim
