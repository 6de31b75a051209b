// luma_cli.h - running the built luma program (LUMA_EXE) from a test: its exit status and
// output, a scratch directory per test program, RMM logs written from a list of
// allocations and frees, and the shipped torch_train sequence unpacked.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace luma::test {

namespace fs = std::filesystem;

struct LumaRun {
  int code = -1;  // the exit status; -1: killed by a signal (a crash)
  std::string output;
};

inline LumaRun shell(const std::string& cmd, bool with_stderr = true) {
  LumaRun r;
  FILE* p = popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `luma ARGS` (run_luma: `luma` names the namespace): stdout, and stderr unless
// with_stderr is false (JSON on stdout alone).
inline LumaRun run_luma(const std::string& args, bool with_stderr = true) {
  return shell(std::string(LUMA_EXE) + " " + args, with_stderr);
}

inline fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("luma-cli-" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir / name;
}

inline nlohmann::json json_of(const LumaRun& r) {
  EXPECT_EQ(r.code, 0) << r.output;
  return r.code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json();
}

// One row of an RMM log: allocation `id` of `bytes`, or (bytes 0) its free.
struct RmmOp {
  std::uint32_t id;
  std::uint64_t bytes;
};
inline RmmOp alloc(std::uint32_t id, std::uint64_t bytes) { return {id, bytes}; }
inline RmmOp release(std::uint32_t id) { return {id, 0}; }

// An RMM log of one thread on the legacy stream, 100 us between rows.
inline fs::path rmm_log(const std::string& name, const std::vector<RmmOp>& ops) {
  const fs::path p = scratch(name);
  std::ofstream out(p);
  out << "Thread,Time,Action,Pointer,Size,Stream\n";
  std::vector<std::uint64_t> size_of;
  std::uint64_t us = 0;
  for (const RmmOp& op : ops) {
    if (op.id >= size_of.size()) size_of.resize(op.id + 1);
    char time[32];
    std::snprintf(time, sizeof time, "10:%02u:%02u.%06u", unsigned(us / 60'000'000), unsigned(us / 1'000'000 % 60),
                  unsigned(us % 1'000'000));
    const bool is_free = op.bytes == 0;
    if (!is_free) size_of[op.id] = op.bytes;
    char row[160];
    std::snprintf(row, sizeof row, "1,%s,%s,0x%x,%llu,0x0\n", time, is_free ? "free" : "allocate",
                  0x1000u * (op.id + 1), static_cast<unsigned long long>(size_of[op.id]));
    out << row;
    us += 100;
  }
  return p;
}

// The shipped sequence, unpacked once per test program.
inline fs::path torch_train() {
  const fs::path out = scratch("torch_train.rmm.csv");
  if (!fs::exists(out)) {
    const fs::path gz = fs::path(LUMA_DATA_DIR) / "torch_train.rmm.csv.gz";
    const LumaRun r = shell("gzip -dc '" + gz.string() + "' > '" + out.string() + "'");
    EXPECT_EQ(r.code, 0) << r.output;
  }
  return out;
}

}  // namespace luma::test
