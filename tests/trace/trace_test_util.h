// trace_test_util.h - helpers the trace tests share: a temporary file path, a standard
// header, and reading a file into memory.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "trace/trace_header.h"

namespace luma::core::testing {

inline std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/luma-trace-test-" + std::to_string(::getpid()) +
         "-" + name;
}

inline TraceHeader test_header(std::uint32_t stack_depth = 0) {
  TraceHeader h;
  h.luma_version = "0.1.0-test";
  h.pid = 4242;
  h.host = "testhost";
  h.command_line = {"./app", "--flag", "x y"};
  h.start_unix_ns = 1700000000000000000ull;
  h.clock_base_ns = 1000;
  h.devices = {{0, 80ull << 30, "Stand-in 0"}, {1, 80ull << 30, "Stand-in 1"}};
  h.settings = "alignment:256,min_split:256";
  h.stack_depth = stack_depth;
  if (stack_depth) h.mappings = "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/app\n";
  return h;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace luma::core::testing
