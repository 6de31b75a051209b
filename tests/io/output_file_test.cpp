// output_file_test.cpp - core::OutputFile, the writer behind every file luma export and
// luma plan write: an abandoned or failed write leaves the old file as it was and no
// temporary behind; a committed one replaces the file (through a link: its target) and
// keeps its permissions; directories and missing folders are named in the error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "io/output_file.h"

namespace {

namespace fs = std::filesystem;

fs::path scratch_dir() {
  fs::path dir = fs::temp_directory_path() / ("luma-output-file-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t entries(const fs::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(OutputFile, AbandonedWriteLeavesTheOldFileAndNoTemporary) {
  const fs::path dir = scratch_dir(), path = dir / "out.txt";
  std::ofstream(path) << "old contents";
  {
    luma::core::OutputFile out(path.string());
    out.stream() << "half of the new";
    // No commit: as when the export throws halfway.
  }
  EXPECT_EQ(slurp(path), "old contents");
  EXPECT_EQ(entries(dir), 1u);
  fs::remove_all(dir);
}

TEST(OutputFile, CommitReplacesTheTargetOfALinkAndKeepsItsMode) {
  const fs::path dir = scratch_dir(), target = dir / "target.txt", link = dir / "link.txt";
  std::ofstream(target) << "old";
  ASSERT_EQ(::chmod(target.c_str(), 0640), 0);
  fs::create_symlink(target, link);
  luma::core::write_output_file(link.string(), "new contents");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(slurp(target), "new contents");
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(entries(dir), 2u);
  fs::remove_all(dir);
}

TEST(OutputFile, ADanglingLinkCreatesItsTarget) {
  const fs::path dir = scratch_dir(), target = dir / "made.txt", link = dir / "link.txt";
  fs::create_symlink(target, link);
  luma::core::write_output_file(link.string(), "made");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(slurp(target), "made");
  fs::remove_all(dir);
}

TEST(OutputFile, ErrorsNameThePath) {
  const fs::path dir = scratch_dir();
  try {
    luma::core::write_output_file(dir.string(), "x");
    FAIL() << "a directory was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.string() + ": is a directory"), std::string::npos) << e.what();
  }
  const std::string missing = (dir / "no-such-folder" / "out.txt").string();
  try {
    luma::core::write_output_file(missing, "x");
    FAIL() << "a missing folder was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(OutputFile, AFifoIsWrittenNotReplaced) {
  const fs::path dir = scratch_dir(), fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(fifo); });
  luma::core::write_output_file(fifo.string(), "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(entries(dir), 1u);
  fs::remove_all(dir);
}

TEST(SameFile, LinksAndSpellingsNameOneFile) {
  const fs::path dir = scratch_dir(), a = dir / "a", b = dir / "b";
  std::ofstream(a) << "a";
  std::ofstream(b) << "b";
  fs::create_symlink(a, dir / "link");
  EXPECT_TRUE(luma::core::same_file(a.string(), (dir / "link").string()));
  EXPECT_TRUE(luma::core::same_file(a.string(), (dir / "." / "a").string()));
  EXPECT_FALSE(luma::core::same_file(a.string(), b.string()));
  EXPECT_FALSE(luma::core::same_file(a.string(), (dir / "new").string()));
  EXPECT_FALSE(luma::core::same_file("-", "-"));
  EXPECT_THROW(luma::core::check_outputs_distinct({a.string()}, {(dir / "link").string()}),
               std::runtime_error);
  EXPECT_NO_THROW(luma::core::check_outputs_distinct({a.string()}, {b.string()}));
  fs::remove_all(dir);
}

}  // namespace
