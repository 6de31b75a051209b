// trace_forwarded_test.cpp - the forwarded_call record (format version 2): written between
// ordinary events, read back field for field in file order, skipped by readers that ask
// for events only; version-1 traces still read, and a version-1 trace holding such a
// record is refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "trace/trace_format.h"
#include "trace/trace_reader.h"
#include "trace/trace_test_util.h"
#include "trace/trace_writer.h"

namespace luma::core {
namespace {

using testing::temp_path;
using testing::test_header;
using trace::EntryPoint;
using trace::ForwardedCall;
using trace::ForwardedEntry;
using trace::ForwardedOp;

struct Copy {  // a ForwardedCall with its path owned
  ForwardedCall c;
  std::string path;
};

std::vector<ForwardedCall> some_calls() {
  std::vector<ForwardedCall> v;
  v.push_back({0, ForwardedOp::alloc, ForwardedEntry::cuMemAllocAsync, "stream_ordered", 77,
               0x55aa, 5000, 0x7f0000200000ull, 1024, 0});
  v.push_back({0, ForwardedOp::alloc, ForwardedEntry::cuMemCreate, "virtual_memory", 78, 0, 5100,
               0, 2u << 20, 3});
  v.push_back({0, ForwardedOp::map, ForwardedEntry::cuMemMap, "virtual_mappings", 78, 0, 5200,
               0x7f0000400000ull, 2u << 20, 3});
  v.push_back({0, ForwardedOp::unmap, ForwardedEntry::cuMemUnmap, "virtual_mappings", 78, 0,
               5300, 0x7f0000400000ull, 2u << 20, 0});
  v.push_back({0, ForwardedOp::free, ForwardedEntry::cuMemRelease, "virtual_memory", 78, 0, 5400,
               0, 0, 3});
  // A path longer than the format allows is cut; an odd address and huge values are kept.
  v.push_back({0, ForwardedOp::free, ForwardedEntry::cuMemFreeAsync, std::string_view(), ~0ull,
               ~0ull, 5500, 0x7f0000200001ull, ~0ull, ~0ull});
  return v;
}

const std::string kLongPath(100, 'p');

std::string write_trace(const std::string& name, bool with_events) {
  const std::string path = temp_path(name);
  std::string err;
  auto w = TraceWriter::open(path, test_header(), &err);
  EXPECT_NE(w, nullptr) << err;
  auto calls = some_calls();
  calls.back().path = kLongPath;
  for (const auto& c : calls) {
    if (with_events)
      w->write({EventKind::alloc, 0, 0x7f0000001000ull, 4096, 4000}, 77, 0,
               EntryPoint::cudaMalloc, c.time_ns);
    w->write_forwarded(c);
  }
  EXPECT_TRUE(w->close());
  EXPECT_EQ(w->dropped(), 0u);
  std::string bytes = testing::slurp(path);
  std::remove(path.c_str());
  return bytes;
}

TEST(TraceForwarded, RecordsReadBackFieldForFieldInFileOrder) {
  TraceReader r(write_trace("fwd", true), "fwd");
  EXPECT_EQ(r.header().format_version, trace::kFormatVersion);
  std::vector<Copy> got;
  std::vector<std::uint64_t> event_seqs;
  r.set_forwarded_handler([&](const ForwardedCall& c) { got.push_back({c, std::string(c.path)}); });
  const TraceReadSummary sum = r.read([&](const TraceEvent& e) { event_seqs.push_back(e.seq); });
  const auto want = some_calls();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(sum.forwarded_calls, want.size());
  EXPECT_EQ(sum.events, want.size());
  const std::uint64_t base = test_header().clock_base_ns;
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    const ForwardedCall& g = got[i].c;
    EXPECT_EQ(g.op, want[i].op);
    EXPECT_EQ(g.entry, want[i].entry);
    EXPECT_EQ(g.thread, want[i].thread);
    EXPECT_EQ(g.stream, want[i].stream);
    EXPECT_EQ(g.time_ns, want[i].time_ns - base);
    EXPECT_EQ(g.address, want[i].address);
    EXPECT_EQ(g.bytes, want[i].bytes);
    EXPECT_EQ(g.handle, want[i].handle);
    // Each record follows the event written before it.
    EXPECT_GT(g.seq, event_seqs[i]);
    if (i + 1 < want.size()) {
      EXPECT_LT(g.seq, event_seqs[i + 1]);
    }
  }
  EXPECT_EQ(got[0].path, "stream_ordered");
  EXPECT_EQ(got[2].path, "virtual_mappings");
  EXPECT_EQ(got.back().path, kLongPath.substr(0, trace::kMaxForwardedPathBytes));
}

TEST(TraceForwarded, AReaderOfEventsOnlySkipsThem) {
  TraceReader r(write_trace("skip", true), "skip");
  const TraceReadSummary sum = r.read({});
  EXPECT_EQ(sum.events, some_calls().size());
  EXPECT_EQ(sum.forwarded_calls, some_calls().size());
  // A trace of forwarded calls only (a program luma served nothing for) has no events.
  TraceReader only(write_trace("only", false), "only");
  EXPECT_EQ(only.read({}).events, 0u);
}

TEST(TraceForwarded, NamesOfEntriesAndOperations) {
  EXPECT_EQ(trace::forwarded_entry_name(ForwardedEntry::cuMemAllocFromPoolAsync),
            "cuMemAllocFromPoolAsync");
  EXPECT_EQ(trace::forwarded_entry_name(ForwardedEntry::cuMemUnmap), "cuMemUnmap");
  EXPECT_EQ(trace::forwarded_op_name(ForwardedOp::map), "map");
  EXPECT_EQ(trace::kForwardedEntries, 13);
}

// The header's version field set to `version`, its checksum made right again.
std::string with_version(std::string bytes, std::uint32_t version) {
  std::memcpy(bytes.data() + trace::kOffVersion, &version, 4);
  std::uint32_t fields = 0;
  std::memcpy(&fields, bytes.data() + trace::kOffFieldsBytes, 4);
  std::string copy = bytes.substr(0, trace::kFixedHeaderBytes + fields);
  std::memset(copy.data() + trace::kOffHeaderCrc, 0, 4);
  std::memset(copy.data() + trace::kOffCloseSlots, 0, 16);
  const std::uint32_t crc = trace::crc32(copy.data(), copy.size());
  std::memcpy(bytes.data() + trace::kOffHeaderCrc, &crc, 4);
  return bytes;
}

std::string events_only_trace() {
  const std::string path = temp_path("v1");
  {
    auto w = TraceWriter::open(path, test_header(), nullptr);
    w->write({EventKind::alloc, 0, 0x7f0000001000ull, 4096, 4000}, 77, 0, EntryPoint::cudaMalloc,
             2000);
    w->write({EventKind::free_requested, 0, 0x7f0000001000ull, 4096, 0}, 77, 0,
             EntryPoint::cudaFree, 2100);
  }
  std::string bytes = testing::slurp(path);
  std::remove(path.c_str());
  return bytes;
}

TEST(TraceForwarded, VersionOneTracesStillRead) {
  TraceReader r(with_version(events_only_trace(), 1), "v1");
  EXPECT_EQ(r.header().format_version, 1u);
  EXPECT_EQ(r.read({}).events, 2u);
}

TEST(TraceForwarded, AVersionOneTraceWithAForwardedRecordIsRefused) {
  TraceReader r(with_version(write_trace("v1fwd", false), 1), "v1fwd");
  try {
    r.read({});
    FAIL() << "a version-1 trace with a forwarded-call record was read";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("forwarded-call record in a version 1 trace"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace luma::core
