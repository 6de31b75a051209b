// trace_malformed_test.cpp - the reader against bad input: a small trace cut at every
// byte, bytes changed at random, foreign files. Each must end in one TraceError that names
// a byte offset inside the file - never a crash, a hang or a silent success - except a
// trace cut after its header, which is read up to the cut with the loss reported.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
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

std::vector<TraceEvent> events_of(TraceReader& r) {
  std::vector<TraceEvent> out;
  r.read([&](const TraceEvent& e) { out.push_back(e); });
  return out;
}

// True when `part` is `whole`'s first events, field for field.
bool is_prefix(const std::vector<TraceEvent>& part, const std::vector<TraceEvent>& whole) {
  if (part.size() > whole.size()) return false;
  for (std::size_t i = 0; i < part.size(); ++i) {
    const TraceEvent &a = part[i], &b = whole[i];
    if (a.seq != b.seq || a.index != b.index || a.kind != b.kind || a.device != b.device ||
        a.thread != b.thread || a.stream != b.stream || a.time_ns != b.time_ns ||
        a.address != b.address || a.size != b.size || a.requested != b.requested ||
        a.stack != b.stack)
      return false;
  }
  return true;
}

TEST(TraceMalformed, CutInsideTheHeaderIsAnErrorWithItsOffset) {
  const std::string good = small_trace();
  const std::uint64_t header_bytes = trace::parse_header(good, "t").header_bytes;
  for (std::size_t n = 0; n < header_bytes; ++n) {
    std::uint64_t offset = ~0ull;
    const std::string err = read_error(good.substr(0, n), &offset);
    ASSERT_NE(err, "") << "cut at " << n << " read as a valid trace";
    ASSERT_LE(offset, n) << err;
    ASSERT_NE(err.find("at byte " + std::to_string(offset)), std::string::npos) << err;
  }
}

// Regression: a closed trace cut after its header (a copy that stopped) was refused
// outright. It is read up to the cut: the events before it, exactly, and how much is lost.
TEST(TraceMalformed, AClosedTraceCutAfterItsHeaderIsReadUpToTheCut) {
  const std::string good = small_trace();
  TraceReader whole_reader(good, "t");
  const std::vector<TraceEvent> whole = events_of(whole_reader);
  ASSERT_FALSE(whole_reader.truncation().truncated);
  const std::uint64_t header_bytes = trace::parse_header(good, "t").header_bytes;
  const std::uint64_t slots = (good.size() - header_bytes) / trace::kSlotBytes;
  std::size_t fewer = 0;
  for (std::size_t n = header_bytes; n < good.size(); ++n) {
    TraceReader r(good.substr(0, n), "t");
    const TraceTruncation& cut = r.truncation();
    ASSERT_TRUE(cut.truncated) << n;
    ASSERT_TRUE(cut.exact) << n;
    ASSERT_EQ(cut.file_bytes, n);
    ASSERT_EQ(cut.missing_bytes(), good.size() - n);
    ASSERT_EQ(cut.lost_slots, slots - (n - header_bytes) / trace::kSlotBytes) << n;
    ASSERT_NE(cut.describe().find(std::to_string(good.size() - n) + " bytes"), std::string::npos)
        << cut.describe();
    std::vector<TraceEvent> part;
    ASSERT_NO_THROW(part = events_of(r)) << "cut at " << n;
    ASSERT_TRUE(is_prefix(part, whole)) << "cut at " << n;
    ASSERT_GE(part.size() + cut.lost_slots, whole.size()) << "more events lost than slots, cut at " << n;
    if (part.size() < whole.size()) ++fewer;
  }
  EXPECT_GT(fewer, 0u);
}

// An unfinished trace (its process was killed) grows by whole chunks; one that ends inside a
// chunk was cut afterwards (a disk that filled, a copy that stopped). What the rest of the
// chunk held is unknown, so the loss is an upper bound.
TEST(TraceMalformed, AnUnfinishedTraceCutInsideAChunkIsReadUpToTheCut) {
  std::string unfinished = small_trace();
  const std::uint64_t header_bytes = trace::parse_header(unfinished, "t").header_bytes;
  std::memset(unfinished.data() + 32, 0, 16);  // no close record: the writer was killed
  unfinished.resize(header_bytes + trace::kChunkBytes, '\0');
  TraceReader full(unfinished, "t");
  ASSERT_FALSE(full.closed_cleanly());
  ASSERT_FALSE(full.truncation().truncated);
  const std::vector<TraceEvent> whole = events_of(full);
  ASSERT_EQ(whole.size(), 13u);
  for (std::uint64_t n : {header_bytes + 1, header_bytes + 100, header_bytes + 24 * 20 + 7,
                          header_bytes + 24 * 40, header_bytes + trace::kChunkBytes - 1}) {
    TraceReader r(unfinished.substr(0, n), "t");
    const TraceTruncation& cut = r.truncation();
    ASSERT_TRUE(cut.truncated) << n;
    EXPECT_FALSE(cut.exact);
    EXPECT_EQ(cut.expected_bytes, header_bytes + trace::kChunkBytes);
    EXPECT_EQ(cut.lost_slots, trace::kChunkSlots - (n - header_bytes) / trace::kSlotBytes);
    EXPECT_NE(cut.describe().find("up to"), std::string::npos) << cut.describe();
    std::vector<TraceEvent> part;
    ASSERT_NO_THROW(part = events_of(r)) << "cut at " << n;
    EXPECT_TRUE(is_prefix(part, whole)) << "cut at " << n;
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
