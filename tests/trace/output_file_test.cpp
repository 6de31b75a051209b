// output_file_test.cpp - core/output_file.h: same_file and check_outputs_distinct tell
// when an output names an input (through a link, another spelling) or another output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "output_file.h"

namespace {

namespace fs = std::filesystem;

fs::path scratch_dir() {
  fs::path dir = fs::temp_directory_path() / ("luma-output-file-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
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
