// trace_malformed_test.cpp - the reader against bad input: a small trace cut at every
// byte, bytes changed at random, foreign files. Each must end in one TraceError that names
// a byte offset inside the file - never a crash, a hang or a silent success.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "trace/trace_reader.h"
#include "trace/trace_test_util.h"
#include "trace/trace_writer.h"

namespace luma::core {
namespace {

using testing::temp_path;
using testing::test_header;
using trace::EntryPoint;

// A small closed trace with every record kind: definitions, narrow and wide events, a
// stack definition and call sites.
std::string small_trace() {
  const std::string path = temp_path("small");
  {
    auto w = TraceWriter::open(path, test_header(3), nullptr);
    const std::vector<std::uint64_t> stack = {0x401000, 0x402000, 0x403000};
    for (int i = 0; i < 6; ++i) {
      w->write({EventKind::alloc, 0, std::uint64_t(i + 1) << 12, 512, 500}, 9, 1,
               EntryPoint::cudaMalloc, 2000 + i, stack);
      w->write({EventKind::free_requested, 0, std::uint64_t(i + 1) << 12, 512, 0}, 9, 1,
               EntryPoint::cudaFree, 2100 + i);
    }
    w->write({EventKind::oom, 1, 0, 0, 1ull << 45}, 10, 2, EntryPoint::cudaMalloc, 3000);
  }
  std::string bytes = testing::slurp(path);
  std::remove(path.c_str());
  return bytes;
}

// Reads the whole input; returns the error, or "" when it read cleanly.
std::string read_error(const std::string& bytes, std::uint64_t* offset = nullptr) {
  try {
    TraceReader r(bytes, "t");
    r.read([](const TraceEvent&) {});
    return "";
  } catch (const TraceError& e) {
    if (offset) *offset = e.offset();
    return e.what();
  }
}

TEST(TraceMalformed, TheSmallTraceReadsCleanly) {
  const std::string good = small_trace();
  EXPECT_EQ(read_error(good), "");
  TraceReader r(good, "t");
  EXPECT_EQ(r.read({}).events, 13u);
}

TEST(TraceMalformed, CutAtEveryByteIsAnErrorWithItsOffset) {
  const std::string good = small_trace();
  for (std::size_t n = 0; n < good.size(); ++n) {
    std::uint64_t offset = ~0ull;
    const std::string err = read_error(good.substr(0, n), &offset);
    ASSERT_NE(err, "") << "cut at " << n << " read as a valid trace";
    ASSERT_LE(offset, n) << err;
    ASSERT_NE(err.find("at byte " + std::to_string(offset)), std::string::npos) << err;
  }
}

TEST(TraceMalformed, EveryChangedByteIsDetected) {
  const std::string good = small_trace();
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bad = good;
    const std::size_t at = rng() % bad.size();
    const auto delta = static_cast<char>(1 + rng() % 255);
    bad[at] = static_cast<char>(bad[at] ^ delta);
    std::uint64_t offset = ~0ull;
    const std::string err = read_error(bad, &offset);
    ASSERT_NE(err, "") << "byte " << at << " changed and the trace still read";
    ASSERT_LT(offset, bad.size() + 1) << err;
  }
}

TEST(TraceMalformed, GarbageOverTheSlotsIsDetected) {
  const std::string good = small_trace();
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    const std::size_t start = 4096 + rng() % (bad.size() - 4096);
    for (std::size_t i = start; i < std::min(bad.size(), start + 1 + rng() % 60); ++i)
      bad[i] = static_cast<char>(rng());
    if (bad == good) continue;
    EXPECT_NE(read_error(bad), "") << "garbage at " << start;
  }
}

TEST(TraceMalformed, ForeignFilesAreNamedAsSuch) {
  EXPECT_NE(read_error("").find("empty file"), std::string::npos);
  EXPECT_NE(read_error("Thread,Time,Action,Pointer,Size,Stream\n").find("not a luma trace"),
            std::string::npos);
  EXPECT_NE(read_error(std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(5000, '\0'))
                .find("not a luma trace"),
            std::string::npos);
  std::string future = small_trace();
  future[8] = 9;  // format version 9
  EXPECT_NE(read_error(future).find("format version 9 is not supported"), std::string::npos);
}

TEST(TraceMalformed, HugeLengthsNeverSizeAnAllocation) {
  std::string bad = small_trace();
  // Header size field claims 4 GiB: refused against the limit and the file size.
  bad[12] = '\xff';
  bad[13] = '\xff';
  bad[14] = '\xff';
  bad[15] = '\x7f';
  EXPECT_NE(read_error(bad).find("header size"), std::string::npos);
}

// A trace (damaged, or forged) whose event names a device no machine has, or whose block
// runs past the end of the address space: one clear error, never an export sized by it.
std::string trace_with(const Event& e, std::uint32_t header_device = 0) {
  const std::string path = temp_path("odd");
  {
    TraceHeader h = test_header();
    h.devices.push_back({header_device, 1ull << 30, "dev"});
    auto w = TraceWriter::open(path, h, nullptr);
    w->write(e, 9, 1, EntryPoint::cudaMalloc, 1000);
  }
  std::string bytes = testing::slurp(path);
  std::remove(path.c_str());
  return bytes;
}

TEST(TraceMalformed, ImpossibleDevicesAndWrappingBlocksAreRefused) {
  EXPECT_EQ(read_error(trace_with({EventKind::alloc, 70, 4096, 512, 500})), "");  // a wide event
  EXPECT_NE(read_error(trace_with({EventKind::alloc, 5'000'000, 4096, 512, 500})).find("names device 5000000"),
            std::string::npos);
  EXPECT_NE(read_error(trace_with({EventKind::alloc, -5, 4096, 512, 500})).find("names device -5"),
            std::string::npos);
  EXPECT_NE(read_error(trace_with({EventKind::segment_reserve, 0, ~std::uint64_t{0} - 4095, 8192, 0}))
                .find("passes the end of the address space"),
            std::string::npos);
  EXPECT_NE(read_error(trace_with({EventKind::alloc, 0, 4096, 512, 500}, 3'000'000)).find("device 3000000"),
            std::string::npos);
}

TEST(TraceMalformed, ErrorsNameTheFile) {
  const std::string path = temp_path("not-a-trace");
  { std::FILE* f = std::fopen(path.c_str(), "w"); std::fputs("hello\n", f); std::fclose(f); }
  try {
    TraceReader r(path);
    FAIL() << "read a text file as a trace";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": at byte 0: not a luma trace"),
              std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  EXPECT_THROW(TraceReader("/nonexistent/trace"), TraceError);
}

}  // namespace
}  // namespace luma::core
