// subprocess.h - runs a program as a user would (posix_spawn with a chosen environment)
// and collects its exit status, stdout and stderr, for the integration tests.
// Never inherits LUMA_* or LD_PRELOAD from the test's own environment: each test states
// exactly the environment it means.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace luma::integration {

struct Result {
  int exit_code = -1;  // -1: did not exit normally (signal)
  int signal = 0;
  std::string out;
  std::string err;
};

using Env = std::map<std::string, std::string>;

// The test's environment without LUMA_*, LD_PRELOAD and LD_LIBRARY_PATH, plus `extra`.
Env clean_env(const Env& extra = {});

// Runs argv[0] (a path, or a name looked up in PATH) with env.
Result run(const std::vector<std::string>& argv, const Env& env);

// The environment variable the meson test sets, or "" (tests skip on "").
std::string setting(const char* name);

std::string read_file(const std::string& path);
std::string temp_dir();  // a fresh directory under $TMPDIR or /tmp
int count(const std::string& text, const std::string& needle);

}  // namespace luma::integration
