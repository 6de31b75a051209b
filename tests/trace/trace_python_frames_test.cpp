// trace_python_frames_test.cpp - Python call sites in the trace (format version 2,
// docs/trace-format.md): what the writer writes, the reader reads back (interned, cut to
// the format's bounds, alone or with a native stack); a damaged record is refused with its
// reason; a version 1 trace still reads, and a version 1 header does not admit them.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
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

struct Frame {
  std::string file, function;
  std::uint32_t line;
};

std::vector<PythonFrame> views(const std::vector<Frame>& frames) {
  std::vector<PythonFrame> v;
  for (const Frame& f : frames) v.push_back({f.file, f.function, f.line});
  return v;
}

void expect_frames(const std::vector<TracePythonFrame>& got, const std::vector<Frame>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(got[k].file, want[k].file) << k;
    EXPECT_EQ(got[k].function, want[k].function) << k;
    EXPECT_EQ(got[k].line, want[k].line) << k;
  }
}

const std::vector<Frame> kTrain = {{"/srv/model.py", "Model.forward", 42},
                                   {"/srv/train.py", "train_step", 17},
                                   {"/srv/train.py", "<module>", 90}};
const std::vector<Frame> kEval = {{"/srv/model.py", "Model.forward", 43},
                                  {"/srv/eval.py", "evaluate", 5}};

// Writes allocs: [0..5] alternating kTrain/kEval frames with a native stack, [6] kTrain
// with no native stack, [7] none. Returns the file's bytes.
std::string python_trace(std::uint32_t stack_depth = 4) {
  const std::string path = temp_path("python");
  {
    auto w = TraceWriter::open(path, test_header(stack_depth), nullptr);
    EXPECT_NE(w, nullptr);
    const std::vector<std::uint64_t> native = {0x401000, 0x402000};
    // The names come from new storage each time: equal content reads as equal frames.
    for (int i = 0; i < 6; ++i) {
      const std::vector<Frame> copy = i % 2 ? kEval : kTrain;
      const auto frames = views(copy);
      w->write({EventKind::alloc, 0, std::uint64_t(i + 1) << 20, 1024, 1000}, 1, 0,
               EntryPoint::cuMemAlloc, 2000 + i, native, frames);
    }
    const auto train = views(kTrain);
    w->write({EventKind::alloc, 0, 7u << 20, 1024, 1000}, 1, 0, EntryPoint::cuMemAlloc, 2010,
             {}, train);
    w->write({EventKind::alloc, 0, 8u << 20, 1024, 1000}, 1, 0, EntryPoint::cuMemAlloc, 2011);
  }
  std::string bytes = testing::slurp(path);
  std::remove(path.c_str());
  return bytes;
}

std::string read_error(const std::string& bytes) {
  try {
    TraceReader r(bytes, "t");
    r.read([](const TraceEvent&) {});
    return "";
  } catch (const TraceError& e) {
    return e.what();
  }
}

// The header stamped with another format version (its CRC-32 recomputed as the writer
// computes it: over the fixed header with its CRC and close record zeroed, and the fields).
std::string with_version(std::string bytes, std::uint32_t version) {
  std::memcpy(bytes.data() + trace::kOffVersion, &version, 4);
  std::uint32_t fields = 0;
  std::memcpy(&fields, bytes.data() + trace::kOffFieldsBytes, 4);
  std::string head = bytes.substr(0, trace::kFixedHeaderBytes + fields);
  std::memset(head.data() + trace::kOffHeaderCrc, 0, 4);
  std::memset(head.data() + trace::kOffCloseSlots, 0, 16);
  const std::uint32_t crc = trace::crc32(head.data(), head.size());
  std::memcpy(bytes.data() + trace::kOffHeaderCrc, &crc, 4);
  return bytes;
}

TEST(TracePythonFrames, WrittenFramesReadBackInternedWithOrWithoutANativeStack) {
  const std::string bytes = python_trace();
  TraceReader r(bytes, "t");
  EXPECT_EQ(r.header().format_version, trace::kFormatVersion);
  const auto events = read_all_events(r);
  ASSERT_EQ(events.size(), 8u);
  // (Names from new storage may be defined again: RepeatedNamesFromTheSameStorage... checks
  // the interning; here only what each event reads back.)
  for (int i = 0; i < 6; ++i) {
    expect_frames(r.python_stack(events[i].python_stack), i % 2 ? kEval : kTrain);
    EXPECT_EQ(r.stack(events[i].stack), (std::vector<std::uint64_t>{0x401000, 0x402000}));
  }
  expect_frames(r.python_stack(events[6].python_stack), kTrain);
  EXPECT_EQ(events[6].stack, 0u);  // Python frames alone
  EXPECT_EQ(events[7].python_stack, 0u);
  EXPECT_EQ(events[7].stack, 0u);
}

TEST(TracePythonFrames, RepeatedNamesFromTheSameStorageAreDefinedOnce) {
  const std::string path = temp_path("python_once");
  {
    auto w = TraceWriter::open(path, test_header(0), nullptr);
    ASSERT_NE(w, nullptr);
    const auto frames = views(kTrain);
    for (int i = 0; i < 100; ++i)
      w->write({EventKind::alloc, 0, std::uint64_t(i + 1) << 20, 1024, 1000}, 1, 0,
               EntryPoint::cuMemAlloc, 2000 + i, {}, frames);
  }
  TraceReader r(path);
  const auto events = read_all_events(r);
  ASSERT_EQ(events.size(), 100u);
  EXPECT_EQ(r.python_stack_count(), 1u);
  for (const auto& e : events) EXPECT_EQ(e.python_stack, 1u);
  std::remove(path.c_str());
}

TEST(TracePythonFrames, DeepStacksAndLongNamesAreCutToTheFormatsBounds) {
  std::vector<Frame> deep;
  for (std::uint32_t k = 0; k < trace::kMaxPythonFrames + 10; ++k)
    deep.push_back({"/f" + std::to_string(k) + ".py", "fn", k});
  // A name of 2-byte UTF-8 characters whose cut would fall inside one: cut before it.
  std::string long_name = "x";
  for (int k = 0; k < 600; ++k) long_name += "\xC3\xA9";  // U+00E9
  deep[0].function = long_name;
  const std::string path = temp_path("python_deep");
  {
    auto w = TraceWriter::open(path, test_header(0), nullptr);
    ASSERT_NE(w, nullptr);
    const auto frames = views(deep);
    w->write({EventKind::alloc, 0, 1u << 20, 1024, 1000}, 1, 0, EntryPoint::cuMemAlloc, 2000,
             {}, frames);
  }
  TraceReader r(path);
  const auto events = read_all_events(r);
  ASSERT_EQ(events.size(), 1u);
  const auto& got = r.python_stack(events[0].python_stack);
  ASSERT_EQ(got.size(), trace::kMaxPythonFrames);
  EXPECT_EQ(got[0].function.size(), trace::kMaxPythonNameBytes - 1);  // 1 + 2 x 511
  EXPECT_EQ(got[0].function, long_name.substr(0, trace::kMaxPythonNameBytes - 1));
  EXPECT_EQ(got.back().file, "/f63.py");
  EXPECT_EQ(got.back().line, 63u);
  std::remove(path.c_str());
}

TEST(TracePythonFrames, AVersion1TraceStillReads) {
  // A trace with no Python frames stamped version 1 reads the same events.
  const std::string path = temp_path("v1");
  {
    auto w = TraceWriter::open(path, test_header(2), nullptr);
    ASSERT_NE(w, nullptr);
    const std::vector<std::uint64_t> native = {0x401000, 0x402000};
    w->write({EventKind::alloc, 0, 1u << 20, 1024, 1000}, 1, 0, EntryPoint::cuMemAlloc, 2000,
             native);
  }
  const std::string v1 = with_version(testing::slurp(path), 1);
  std::remove(path.c_str());
  TraceReader r(v1, "v1");
  EXPECT_EQ(r.header().format_version, 1u);
  const auto events = read_all_events(r);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(r.stack(events[0].stack), (std::vector<std::uint64_t>{0x401000, 0x402000}));
  EXPECT_EQ(events[0].python_stack, 0u);
}

TEST(TracePythonFrames, AVersion1HeaderDoesNotAdmitPythonRecords) {
  const std::string err = read_error(with_version(python_trace(), 1));
  EXPECT_NE(err.find("record of type 4 with invalid length"), std::string::npos) << err;
  EXPECT_NE(read_error(with_version(python_trace(), 3)).find("format version 3 is not supported"),
            std::string::npos);
}

// The first python_stack_def record's data, rewritten by `damage`, with its slots' checks
// recomputed: a record the writer could not have written but whose slots are intact.
std::string damaged(const std::function<void(std::vector<unsigned char>&)>& damage) {
  std::string bytes = python_trace();
  std::uint32_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data() + trace::kOffHeaderBytes, 4);
  const std::uint64_t slots = (bytes.size() - header_bytes) / trace::kSlotBytes;
  for (std::uint64_t s = 0; s < slots; ++s) {
    char* p = bytes.data() + header_bytes + s * trace::kSlotBytes;
    const auto head = static_cast<unsigned char>(p[0]);
    if ((head & 0xF) != static_cast<unsigned>(trace::SlotKind::blob_head) ||
        (head >> 4) != static_cast<unsigned>(trace::BlobType::python_stack_def))
      continue;
    std::uint32_t length = 0;
    std::memcpy(&length, p + 1, 4);
    const std::uint64_t n = trace::blob_slots(length);
    std::vector<unsigned char> data(length);
    std::size_t done = std::min<std::size_t>(length, trace::kBlobHeadData);
    std::memcpy(data.data(), p + 5, done);
    for (std::uint64_t k = 1; k < n; ++k) {
      const std::size_t m = std::min<std::size_t>(length - done, trace::kBlobContData);
      std::memcpy(data.data() + done, p + k * trace::kSlotBytes + 1, m);
      done += m;
    }
    damage(data);
    done = std::min<std::size_t>(length, trace::kBlobHeadData);
    std::memcpy(p + 5, data.data(), done);
    for (std::uint64_t k = 1; k < n; ++k) {
      const std::size_t m = std::min<std::size_t>(length - done, trace::kBlobContData);
      std::memcpy(p + k * trace::kSlotBytes + 1, data.data() + done, m);
      done += m;
    }
    for (std::uint64_t k = 0; k < n; ++k) {
      std::uint64_t w[3];
      char* q = p + k * trace::kSlotBytes;
      std::memcpy(w, q, sizeof w);
      w[2] = trace::with_check(w[0], w[1], w[2], s + k);
      std::memcpy(q, w, sizeof w);
    }
    return bytes;
  }
  ADD_FAILURE() << "no python_stack_def record";
  return bytes;
}

TEST(TracePythonFrames, DamagedRecordsAreRefusedWithTheirReason) {
  EXPECT_EQ(read_error(damaged([](auto&) {})), "");  // the rewrite alone changes nothing
  // A name length past the record.
  std::string err = read_error(damaged([](auto& d) { d[8 + 4] = 0xFF; }));
  EXPECT_NE(err.find("names run past the record"), std::string::npos) << err;
  // More frames than the record holds.
  err = read_error(damaged([](auto& d) { d[4] = 9; }));
  EXPECT_NE(err.find("ends inside frame"), std::string::npos) << err;
  // More frames than the format allows.
  err = read_error(damaged([](auto& d) { d[4] = 200; }));
  EXPECT_NE(err.find("Python stack of 200 frames"), std::string::npos) << err;
  // Fewer frames than the record holds.
  err = read_error(damaged([](auto& d) { d[4] = 1; }));
  EXPECT_NE(err.find("bytes after its last frame"), std::string::npos) << err;
  // Ids out of order.
  err = read_error(damaged([](auto& d) { d[0] = 5; }));
  EXPECT_NE(err.find("Python stack id 5 out of order"), std::string::npos) << err;
}

}  // namespace
}  // namespace luma::core
