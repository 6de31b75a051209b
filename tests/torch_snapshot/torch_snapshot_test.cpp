// torch_snapshot_test.cpp - core/torch_snapshot/torch_snapshot.h on snapshots of every
// shape: a complete window; a window that dropped the run's start (frees of blocks it
// never saw allocated, blocks allocated all along, segments reserved before it); expandable
// segments mapped and unmapped; two devices; free_completed without free_requested; no
// clock; a MemPool's snapshot (its segments alone, or with the whole device's trace);
// windows recorded with skip_actions, and what they lack. PyTorch's reserved bytes and their peak exactly, also against a forward count on
// random runs cut at many points. Python's own pickles (data/, written by
// make_snapshots.py), luma's memviz export read back as the trace it came from, detection
// by content, and the refusals of damaged or foreign files (naming the offset or field).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "planner/input/lifetime_reader.h"
#include "py_pickler.h"
#include "simulate/sim_sequence.h"
#include "torch_snapshot/torch_snapshot.h"

namespace luma::core {
namespace {

using test::Py;
using test::pickle_dump;
using namespace std::string_literals;

constexpr std::uint64_t MiB = 1u << 20;
constexpr std::int64_t T0 = 1'700'000'000'000'000;  // time_us, as PyTorch writes it

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
std::string data(const std::string& name) { return slurp(std::string(LUMA_SNAPSHOT_DATA_DIR) + "/" + name); }

// ---- snapshots built as torch/csrc/cuda/Module.cpp builds them ---------------------------

Py entry(const char* action, std::uint64_t addr, std::uint64_t size, std::int64_t t, std::int64_t stream = 0,
         Py frames = Py()) {
  Py e = Py::dict({{"action", action}, {"addr", Py(addr)}, {"size", Py(size)}, {"stream", Py(stream)}});
  if (t >= 0) e.set("time_us", Py(T0 + t));
  if (!std::holds_alternative<Py::None>(*frames.data)) e.set("frames", frames);
  return e;
}
Py block(std::uint64_t address, std::uint64_t size, std::uint64_t requested, const char* state,
         Py frames = Py::list()) {
  return Py::dict({{"address", Py(address)},
                   {"size", Py(size)},
                   {"requested_size", Py(requested)},
                   {"state", state},
                   {"frames", frames}});
}
Py segment(int device, std::uint64_t address, std::uint64_t total, std::vector<Py> blocks, std::int64_t stream = 0,
           bool expandable = false) {
  return Py::dict({{"device", device},
                   {"address", Py(address)},
                   {"total_size", Py(total)},
                   {"allocated_size", 0},
                   {"active_size", 0},
                   {"requested_size", 0},
                   {"stream", Py(stream)},
                   {"segment_type", total > 2 * MiB ? "large" : "small"},
                   {"segment_pool_id", Py::tuple({0, 0})},
                   {"is_expandable", Py(expandable)},
                   {"frames", Py::list()},
                   {"blocks", Py::list(std::move(blocks))}});
}
Py snapshot(std::vector<Py> segments, std::vector<std::vector<Py>> traces) {
  Py per_device = Py::list();
  for (auto& t : traces) per_device.append(Py::list(std::move(t)));
  return Py::dict({{"segments", Py::list(std::move(segments))},
                   {"device_traces", per_device},
                   {"allocator_settings", Py::dict({{"PYTORCH_CUDA_ALLOC_CONF", ""}, {"max_split_size", -1},
                                                    {"garbage_collection_threshold", Py(0.0)},
                                                    {"expandable_segments", Py(false)}})}});
}

// A segment with one field set to another value (the other fields as segment() writes them).
Py with_field(const Py& segment, const char* key, Py value) {
  Py out = Py::dict();
  for (const auto& [k, v] : std::get<Py::Dict>(*segment.data).entries)
    out.set(k, std::get<std::string>(*k.data) == key ? value : v);
  return out;
}

TorchSnapshot read(const Py& top, int protocol = 4) {
  return TorchSnapshotReader::read(pickle_dump(top, protocol), "test.pickle");
}
std::string refusal(const std::string& bytes) {
  try {
    (void)TorchSnapshotReader::read(bytes, "test.pickle");
  } catch (const PlanInputError& e) {
    return e.what();
  }
  return "";
}

// An op, compared whole.
struct Op {
  std::uint64_t t, bytes;
  std::uint32_t id;
  bool free;
  bool operator==(const Op&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Op& o) {
  return os << (o.free ? "free #" : "alloc #") << o.id << " " << o.bytes << " B at " << o.t;
}
Op A(std::uint64_t t, std::uint64_t bytes, std::uint32_t id) { return {t, bytes, id, false}; }
Op F(std::uint64_t t, std::uint32_t id) { return {t, 0, id, true}; }
std::vector<Op> ops(const SimSequence& s) {
  std::vector<Op> out;
  for (const SimOp& o : s.ops) out.push_back({o.time_ns, o.bytes, o.id, o.is_free});
  return out;
}
std::vector<std::uint64_t> step_bytes(const TorchDevice& d) {
  std::vector<std::uint64_t> out;
  for (const TorchReservedStep& s : d.reserved) out.push_back(s.bytes);
  return out;
}

const TorchDevice& device(const TorchSnapshot& s, int number) {
  for (const TorchDevice& d : s.devices)
    if (d.sequence.device == number) return d;
  throw std::runtime_error("no device " + std::to_string(number));
}

// ---- the shapes ------------------------------------------------------------------------

TEST(TorchSnapshot, ACompleteWindowReadsAsItsAllocationsAndFrees) {
  const std::uint64_t a0 = 0x7f0000000000;
  const Py site = Py::list({Py::dict({{"filename", "train.py"}, {"name", "step"}, {"line", 12}})});
  const Py top = snapshot({segment(0, a0, 2 * MiB,
                                   {block(a0, 1024, 1000, "active_allocated", site),
                                    block(a0 + 1024, 2 * MiB - 1024, 0, "inactive")})},
                          {{entry("segment_alloc", a0, 2 * MiB, 1), entry("alloc", a0, 500, 2, 0, site),
                            entry("alloc", a0 + 512, 4000, 3), entry("free_requested", a0, 500, 4),
                            entry("free_completed", a0, 500, 5), entry("alloc", a0, 1000, 6, 0, site),
                            entry("free_requested", a0 + 512, 4000, 7), entry("free_completed", a0 + 512, 4000, 8)}});
  const TorchSnapshot s = read(top);
  ASSERT_EQ(s.devices.size(), 1u);
  const TorchDevice& d = s.devices[0];
  EXPECT_EQ(d.sequence.device, 0);
  EXPECT_TRUE(d.sequence.has_times);
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(1000, 500, 0), A(2000, 4000, 1), F(3000, 0), A(5000, 1000, 2),
                                              F(6000, 1)}));
  EXPECT_EQ(d.sequence.allocations, 3u);
  EXPECT_EQ(d.sequence.frees, 2u);
  EXPECT_EQ(d.sequence.peak_live, 5000u);
  EXPECT_EQ(d.entries, 8u);
  EXPECT_FALSE(d.incomplete);
  EXPECT_EQ(d.blocks_before_window, 0u);
  EXPECT_EQ(d.recorded_reserved_start_bytes, 0u);
  EXPECT_EQ(d.recorded_reserved_end_bytes, 2 * MiB);
  EXPECT_EQ(d.recorded_peak_reserved_bytes, 2 * MiB);
  ASSERT_EQ(d.reserved.size(), 1u);
  EXPECT_EQ(d.reserved[0].op, 0u);
  EXPECT_EQ(d.reserved[0].time_ns, 0u);
  EXPECT_EQ(d.reserved[0].bytes, 2 * MiB);
  ASSERT_EQ(d.allocations.size(), 3u);
  EXPECT_EQ(d.allocations[1].address, a0 + 512);
  EXPECT_EQ(d.allocations[1].bytes, 4000u);
  EXPECT_EQ(d.allocations[1].stack, 0u);  // no frames recorded
  EXPECT_EQ(d.allocations[0].stack, d.allocations[2].stack);
  ASSERT_EQ(s.stacks.at(d.allocations[0].stack).size(), 1u);
  EXPECT_EQ(frame_text(s.frames.at(s.stacks[d.allocations[0].stack][0])), "train.py:12 step");
  EXPECT_TRUE(d.sequence.facts.empty());  // stream 0, one device
  EXPECT_TRUE(s.unknown_actions.empty());
}

// The window of make_snapshots.py's window_device0(): built here, and read from Python's
// own pickles below.
Py window_snapshot() {
  const std::uint64_t s0 = 0x7F0001000000, s1 = 0x7F0000000000, s2 = 0x7F0000400000;
  const Py frame_a = Py::dict({{"filename", "train.py"}, {"name", "forward"}, {"line", 42}});
  const Py frame_b = Py::dict({{"filename", "torch/nn/modules/linear.py"}, {"name", "forward"}, {"line", 125}});
  const Py frame_c = Py::dict({{"filename", "train.py"}, {"name", "setup"}, {"line", 7}});
  const Py ab = Py::list({frame_b, frame_a}), c = Py::list({frame_c});
  const Py pool = Py::tuple({0, 0});  // one tuple object in Python (a constant)
  auto seg = [&](std::uint64_t address, std::uint64_t total, std::vector<Py> blocks) {
    std::uint64_t allocated = 0, requested = 0;
    for (const Py& b : blocks) {
      const auto& e = std::get<Py::Dict>(*b.data).entries;
      if (std::get<std::string>(*e[3].second.data) == "active_allocated") {
        allocated += std::get<std::int64_t>(*e[1].second.data);
        requested += std::get<std::int64_t>(*e[2].second.data);
      }
    }
    return Py::dict({{"device", 0},
                     {"address", Py(address)},
                     {"total_size", Py(total)},
                     {"allocated_size", Py(allocated)},
                     {"active_size", Py(allocated)},
                     {"requested_size", Py(requested)},
                     {"stream", 0},
                     {"segment_type", total > 2 * MiB ? "large" : "small"},
                     {"segment_pool_id", pool},
                     {"is_expandable", Py(false)},
                     {"frames", Py::list()},
                     {"blocks", Py::list(std::move(blocks))}});
  };
  auto blk = [](std::uint64_t address, std::int64_t size, std::int64_t requested, const char* state, Py frames) {
    return Py::dict({{"address", Py(address)},
                     {"size", Py(size)},
                     {"requested_size", Py(requested)},
                     {"state", state},
                     {"frames", frames}});
  };
  std::vector<Py> segments = {
      seg(s1, 4 * MiB, {blk(s1, 1024, 777, "active_allocated", c), blk(s1 + 1024, 4 * MiB - 1024, 0, "inactive", Py::list())}),
      seg(s2, 2 * MiB, {blk(s2, 512, 100, "active_allocated", ab), blk(s2 + 512, 2 * MiB - 512, 0, "inactive", Py::list())}),
  };
  std::vector<Py> trace = {entry("free_requested", s0, 1000, 1), entry("free_completed", s0, 1000, 2),
                           entry("alloc", s0, 3000, 3, 0, ab),   entry("segment_alloc", s2, 2 * MiB, 4),
                           entry("alloc", s2, 100, 5, 0, ab),    entry("free_requested", s0, 3000, 6, 0, ab),
                           entry("free_completed", s0, 3000, 7, 0, ab), entry("segment_free", s0, 20 * MiB, 8)};
  Py per_device = Py::list({Py::list(std::move(trace))});
  return Py::dict({{"segments", Py::list(std::move(segments))},
                   {"device_traces", per_device},
                   {"allocator_settings", Py::dict({{"PYTORCH_CUDA_ALLOC_CONF", ""},
                                                    {"max_split_size", -1},
                                                    {"garbage_collection_threshold", Py(0.0)},
                                                    {"expandable_segments", Py(false)}})}});
}

// What window_snapshot() reads as (device 0 of full_p4.pickle too, but for its entry count).
void expect_window_device(const TorchSnapshot& s, const TorchDevice& d) {
  EXPECT_TRUE(d.sequence.has_times);
  // X (1000 B) and W (777 B) live when the window began, then Y and Z.
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(0, 1000, 0), A(0, 777, 1), F(0, 0), A(2000, 3000, 2),
                                              A(4000, 100, 3), F(5000, 2)}));
  EXPECT_EQ(d.sequence.peak_live, 3877u);
  EXPECT_TRUE(d.incomplete);
  EXPECT_EQ(d.blocks_before_window, 2u);
  // Reserved: 6 MiB at the dump, walked back over segment_free 20 MiB and segment_alloc 2 MiB.
  EXPECT_EQ(d.recorded_reserved_end_bytes, 6 * MiB);
  EXPECT_EQ(d.recorded_reserved_start_bytes, 24 * MiB);
  EXPECT_EQ(d.recorded_peak_reserved_bytes, 26 * MiB);
  EXPECT_EQ(step_bytes(d), (std::vector<std::uint64_t>{26 * MiB, 6 * MiB}));
  ASSERT_EQ(d.reserved.size(), 2u);
  EXPECT_EQ(d.reserved[0].op, 4u);  // after the two before-window allocations, X's free and Y
  EXPECT_EQ(d.reserved[0].time_ns, 3000u);
  EXPECT_EQ(d.reserved[1].op, 6u);
  ASSERT_EQ(d.allocations.size(), 4u);
  EXPECT_TRUE(d.allocations[0].before_window);
  EXPECT_EQ(d.allocations[0].address, 0x7F0001000000u);
  EXPECT_EQ(d.allocations[0].stack, 0u);  // a free's frames are not where it was allocated
  EXPECT_TRUE(d.allocations[1].before_window);
  EXPECT_EQ(d.allocations[1].address, 0x7F0000000000u);
  EXPECT_FALSE(d.allocations[2].before_window);
  EXPECT_EQ(d.allocations[2].stack, d.allocations[3].stack);
  // Call sites: W's block frames (setup) and Y's and Z's shared stack (linear, then forward).
  auto text = [&](std::uint32_t stack) {
    std::string t;
    for (std::uint32_t f : s.stacks.at(stack)) t += frame_text(s.frames.at(f)) + ";";
    return t;
  };
  EXPECT_EQ(text(d.allocations[1].stack), "train.py:7 setup;");
  EXPECT_EQ(text(d.allocations[2].stack), "torch/nn/modules/linear.py:125 forward;train.py:42 forward;");
}

TEST(TorchSnapshot, AWindowMissingTheStartReplaysTheBlocksLiveWhenItBegan) {
  for (int protocol = 2; protocol <= 5; ++protocol) {
    SCOPED_TRACE(protocol);
    const TorchSnapshot s = read(window_snapshot(), protocol);
    EXPECT_EQ(s.protocol, protocol);
    ASSERT_EQ(s.devices.size(), 1u);
    expect_window_device(s, s.devices[0]);
    EXPECT_EQ(s.devices[0].entries, 8u);
  }
}

TEST(TorchSnapshot, PythonsOwnPicklesReadTheSameAtEveryProtocol) {
  for (int protocol = 2; protocol <= 5; ++protocol) {
    SCOPED_TRACE(protocol);
    const std::string bytes = data("window_p" + std::to_string(protocol) + ".pickle");
    EXPECT_TRUE(TorchSnapshotReader::accepts(bytes.substr(0, 4096)));
    const TorchSnapshot s = TorchSnapshotReader::read(bytes, "window.pickle");
    EXPECT_EQ(s.protocol, protocol);
    ASSERT_EQ(s.devices.size(), 1u);
    expect_window_device(s, s.devices[0]);
  }
}

TEST(TorchSnapshot, TheTestsPicklerWritesWhatPythonWrites) {
  // py_pickler.h against Python's pickle.dump, byte for byte: the other tests' snapshots
  // are Python's pickles.
  for (int protocol : {2, 3, 4, 5})
    EXPECT_EQ(pickle_dump(window_snapshot(), protocol), data("window_p" + std::to_string(protocol) + ".pickle"))
        << "protocol " << protocol;
}

TEST(TorchSnapshot, AFullSnapshotOfTwoDevicesWithExpandableSegmentsAndEveryKey) {
  const std::string bytes = data("full_p4.pickle");
  ASSERT_TRUE(TorchSnapshotReader::accepts(bytes));
  const TorchSnapshot s = TorchSnapshotReader::read(bytes, "full.pickle");
  ASSERT_EQ(s.devices.size(), 2u);
  const TorchDevice& d0 = device(s, 0);
  expect_window_device(s, d0);
  EXPECT_EQ(d0.entries, 10u);  // with an oom and a snapshot entry, which change nothing
  const TorchDevice& d1 = device(s, 1);
  // Device 1, stream 0x5555aaaa0000: map 20 MiB, A 15 MiB, map 20 MiB, B 10 MiB, free A,
  // unmap the first 20 MiB; its clock counts from device 0's first entry.
  EXPECT_EQ(ops(d1.sequence), (std::vector<Op>{A(10000, 15 * MiB, 0), A(12000, 10 * MiB, 1), F(13000, 0)}));
  EXPECT_FALSE(d1.incomplete);
  EXPECT_EQ(d1.recorded_reserved_start_bytes, 0u);
  EXPECT_EQ(step_bytes(d1), (std::vector<std::uint64_t>{20 * MiB, 40 * MiB, 20 * MiB}));
  EXPECT_EQ(d1.recorded_peak_reserved_bytes, 40 * MiB);
  EXPECT_EQ(d1.recorded_reserved_end_bytes, 20 * MiB);
  EXPECT_EQ(d1.allocations.at(0).stream, 0x5555AAAA0000);
  // Facts: the side stream and the second device, from device 1's first op (after device
  // 0's last, by the clock).
  ASSERT_EQ(d1.sequence.facts.size(), 2u);
  EXPECT_EQ(d1.sequence.facts[0].fact, FreePathFact::unordered_stream);
  EXPECT_EQ(d1.sequence.facts[0].op, 0u);
  EXPECT_NE(d1.sequence.facts[0].evidence.find("stream 0x5555aaaa0000 from device_traces[1][1]"), std::string::npos)
      << d1.sequence.facts[0].evidence;
  EXPECT_EQ(d1.sequence.facts[1].fact, FreePathFact::second_context);
  ASSERT_EQ(d0.sequence.facts.size(), 2u);
  EXPECT_EQ(d0.sequence.facts[0].op, d0.sequence.ops.size());
  const SimInput in = torch_snapshot_sim_input(s);
  EXPECT_EQ(in.format, "PyTorch memory snapshot");
  EXPECT_EQ(in.devices.size(), 2u);
}

TEST(TorchSnapshot, ExpandableSegmentsMapAndUnmapCountInTheReservedBytes) {
  const std::uint64_t d = 0x7e0000000000;
  // PyTorch reports each contiguous mapped range as a segment: at the dump [d, d+40 MiB).
  const Py top = snapshot({segment(0, d, 40 * MiB,
                                   {block(d, MiB, MiB, "active_allocated"), block(d + MiB, 19 * MiB, 0, "inactive"),
                                    block(d + 20 * MiB, 10 * MiB, 10 * MiB, "active_allocated"),
                                    block(d + 30 * MiB, 10 * MiB, 0, "inactive")},
                                   0, true)},
                          {{entry("segment_map", d, 20 * MiB, 1), entry("alloc", d, 15 * MiB, 2),
                            entry("segment_map", d + 20 * MiB, 20 * MiB, 3), entry("alloc", d + 20 * MiB, 10 * MiB, 4),
                            entry("free_requested", d, 15 * MiB, 5), entry("free_completed", d, 15 * MiB, 6),
                            entry("segment_unmap", d, 20 * MiB, 7), entry("segment_map", d, 20 * MiB, 8),
                            entry("alloc", d, MiB, 9)}});
  const TorchSnapshot snap_dev = read(top);
  const TorchDevice& dev = snap_dev.devices.at(0);
  EXPECT_EQ(step_bytes(dev), (std::vector<std::uint64_t>{20 * MiB, 40 * MiB, 20 * MiB, 40 * MiB}));
  EXPECT_EQ(dev.recorded_reserved_start_bytes, 0u);
  EXPECT_EQ(dev.recorded_peak_reserved_bytes, 40 * MiB);
  EXPECT_FALSE(dev.incomplete);
  EXPECT_EQ(ops(dev.sequence), (std::vector<Op>{A(1000, 15 * MiB, 0), A(3000, 10 * MiB, 1), F(4000, 0),
                                                A(8000, MiB, 2)}));
  EXPECT_EQ(dev.reserved[3].op, 3u);  // the second map of d comes before the 1 MiB alloc
}

TEST(TorchSnapshot, TwoDevicesEachGetTheirSequenceAndReservedBytes) {
  const std::uint64_t a = 0x7f0000000000, b = 0x7f1000000000;
  const Py top = snapshot(
      {segment(0, a, 2 * MiB, {block(a, 2 * MiB, 2 * MiB - 1, "active_allocated")}),
       segment(2, b, 20 * MiB, {block(b, 20 * MiB, 0, "inactive")}),
       segment(2, b + 20 * MiB, 20 * MiB, {block(b + 20 * MiB, 20 * MiB, 0, "inactive")})},
      {{entry("segment_alloc", a, 2 * MiB, 1), entry("alloc", a, 2 * MiB - 1, 2)},
       {},
       {entry("segment_alloc", b, 20 * MiB, 3), entry("alloc", b, 5 * MiB, 4), entry("segment_alloc", b + 20 * MiB, 20 * MiB, 5),
        entry("free_requested", b, 5 * MiB, 6), entry("free_completed", b, 5 * MiB, 7)}});
  const TorchSnapshot s = read(top);
  ASSERT_EQ(s.devices.size(), 2u);  // device 1 has neither entries nor segments
  EXPECT_EQ(s.devices[0].sequence.device, 0);
  EXPECT_EQ(s.devices[1].sequence.device, 2);
  EXPECT_EQ(ops(s.devices[0].sequence), (std::vector<Op>{A(1000, 2 * MiB - 1, 0)}));
  EXPECT_EQ(ops(s.devices[1].sequence), (std::vector<Op>{A(3000, 5 * MiB, 0), F(5000, 0)}));
  EXPECT_EQ(s.devices[0].recorded_peak_reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.devices[1].recorded_peak_reserved_bytes, 40 * MiB);
  EXPECT_EQ(s.devices[1].recorded_reserved_start_bytes, 0u);
  // A second device is a second context: from device 2's first op, and on device 0 from
  // the first op at or after its time (none: after the last).
  ASSERT_EQ(s.devices[1].sequence.facts.size(), 1u);
  EXPECT_EQ(s.devices[1].sequence.facts[0].fact, FreePathFact::second_context);
  EXPECT_EQ(s.devices[1].sequence.facts[0].op, 0u);
  ASSERT_EQ(s.devices[0].sequence.facts.size(), 1u);
  EXPECT_EQ(s.devices[0].sequence.facts[0].op, 1u);
}

TEST(TorchSnapshot, FreeCompletedIsTheFreeWhereNoRequestWasRecorded) {
  // skip_actions=["free_requested"]: only completions. X was allocated before the window.
  const std::uint64_t a = 0x7f0000000000;
  const Py top = snapshot({segment(0, a, 2 * MiB, {block(a, 2 * MiB, 0, "inactive")})},
                          {{entry("alloc", a, 100, 1), entry("alloc", a + 512, 200, 2),
                            entry("free_completed", a, 100, 3), entry("free_completed", a + 4096, 64, 4),
                            entry("free_completed", a + 512, 200, 5)}});
  const TorchSnapshot snap_d = read(top);
  const TorchDevice& d = snap_d.devices.at(0);
  EXPECT_EQ(ops(d.sequence),
            (std::vector<Op>{A(0, 64, 0), A(0, 100, 1), A(1000, 200, 2), F(2000, 1), F(3000, 0), F(4000, 2)}));
  EXPECT_TRUE(d.incomplete);
  EXPECT_EQ(d.blocks_before_window, 1u);
  EXPECT_EQ(d.recorded_reserved_start_bytes, 2 * MiB);  // reserved before the window: incomplete too
}

TEST(TorchSnapshot, ACompletionWhoseRequestCameBeforeTheWindowMakesNoAllocation) {
  const std::uint64_t a = 0x7f0000000000;
  const Py top = snapshot({}, {{entry("free_completed", a, 64, 1), entry("alloc", a, 100, 2),
                                entry("free_requested", a, 100, 3), entry("free_completed", a, 100, 4)}});
  const TorchSnapshot snap_d = read(top);
  const TorchDevice& d = snap_d.devices.at(0);
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(1000, 100, 0), F(2000, 0)}));
  EXPECT_EQ(d.blocks_before_window, 0u);
  EXPECT_TRUE(d.incomplete);  // the window does not reach the run's start
  EXPECT_EQ(d.recorded_peak_reserved_bytes, 0u);
}

TEST(TorchSnapshot, EntriesWithoutATimeAreNumberedByPosition) {
  const std::uint64_t a = 0x7f0000000000;
  const Py top = snapshot({segment(0, a, 2 * MiB, {block(a, 512, 10, "active_allocated")})},
                          {{entry("free_requested", a + 512, 7, -1), entry("segment_alloc", a, 2 * MiB, -1),
                            entry("alloc", a, 10, -1)}});
  const TorchSnapshot snap_d = read(top);
  const TorchDevice& d = snap_d.devices.at(0);
  EXPECT_FALSE(d.sequence.has_times);
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(0, 7, 0), F(1, 0), A(2, 10, 1)}));
  ASSERT_EQ(d.reserved.size(), 1u);
  EXPECT_EQ(d.reserved[0].op, 2u);
  EXPECT_EQ(d.reserved[0].time_ns, 2u);
}

// Stages: external_annotations' START/END pairs and annotate entries of a device's trace,
// on the ops' clock; make_snapshots.py's training step.
TEST(TorchSnapshot, AnnotationsAreStagesOnTheClockOfTheOps) {
  const TorchSnapshot snap = TorchSnapshotReader::read(data("training_p4.pickle"), "training_p4.pickle");
  ASSERT_TRUE(snap.first_time_us && snap.last_time_us);
  EXPECT_EQ(*snap.first_time_us, T0 + 1000);  // the segment_alloc at t = 1 ms
  EXPECT_EQ(*snap.last_time_us, T0 + 52000);
  struct S {
    std::string name;
    int device;
    std::uint64_t start, end;
    bool operator==(const S&) const = default;
  };
  std::vector<S> got;
  for (const TorchStage& t : snap.stages) got.push_back({t.name, t.device, t.start_ns, t.end_ns});
  // ns since the earliest entry (t = 1 ms).
  const std::vector<S> want = {{"Optimizer.zero_grad#AdamW.zero_grad", 0, 4'000'000, 5'000'000},
                               {"forward", 0, 8'000'000, 11'000'000},
                               {"backward", 0, 18'000'000, 22'000'000},
                               {"Optimizer.step#AdamW.step", 0, 29'000'000, 39'000'000}};
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[i] == want[i]) << i << ": " << got[i].name;
  // The annotate entries change nothing else: the 19 allocations, 15 freed.
  EXPECT_EQ(snap.devices.at(0).sequence.ops.size(), 19u + 15u);
}

TEST(TorchSnapshot, AStageCutByTheWindowRunsToItsEdgeAndUnpairedMarksAreKept) {
  const std::uint64_t a = 0x7f0000000000;
  auto ann = [](const char* stage, const char* name, std::int64_t t) {
    return Py::dict({{"stage", stage}, {"name", name}, {"device", 0}, {"time_us", Py(T0 + t)}});
  };
  Py top = snapshot({segment(0, a, 2 * MiB, {block(a, 2 * MiB, 0, "inactive")})},
                    {{entry("segment_alloc", a, 2 * MiB, 10), entry("alloc", a, 10, 11),
                      entry("free_requested", a, 10, 12)}});
  // An END whose START came before the window; a START never ended; an END of nothing
  // begun on another name; nested ranges of one name; a mark that is not a range's.
  top.set("external_annotations",
          Py::list({ann("END", "Optimizer.zero_grad", 5), ann("START", "outer", 10), ann("START", "outer", 11),
                    ann("END", "outer", 12), ann("START", "open", 12), ann("END", "outer", 13),
                    Py::dict({{"name", "no stage"}, {"time_us", Py(T0 + 11)}})}));
  const TorchSnapshot snap = read(top);
  std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t>> got;
  for (const TorchStage& t : snap.stages) got.emplace_back(t.name, t.start_ns, t.end_ns);
  EXPECT_EQ(got, (std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t>>{
                     {"Optimizer.zero_grad", 0, 0},  // before the earliest entry: at 0
                     {"outer", 0, 3000},
                     {"outer", 1000, 2000},
                     {"open", 2000, UINT64_MAX}}));
  // Without a clock there are no stages.
  Py untimed = snapshot({}, {{entry("alloc", a, 10, -1)}});
  untimed.set("external_annotations", Py::list({ann("START", "x", 1), ann("END", "x", 2)}));
  EXPECT_TRUE(read(untimed).stages.empty());
  // A mark of the wrong type is named with its place.
  Py bad = snapshot({}, {{entry("alloc", a, 10, 1)}});
  bad.set("external_annotations", Py::list({Py::dict({{"stage", 1}, {"name", "x"}, {"time_us", Py(T0)}})}));
  EXPECT_NE(refusal(pickle_dump(bad)).find("external_annotations[0]: 'stage' is an int, not a str"), std::string::npos)
      << refusal(pickle_dump(bad));
}

TEST(TorchSnapshot, ADeviceWithSegmentsButNoHistoryIsItsBlocksAtTheDump) {
  // Recording off (or `state` only): the blocks allocated at the dump, live all along.
  const std::uint64_t a = 0x7f0000000000;
  const Py top = snapshot({segment(0, a, 2 * MiB, {block(a, 512, 500, "active_allocated"),
                                                   block(a + 512, 512, 400, "active_pending_free"),
                                                   block(a + 1024, 2 * MiB - 1024, 0, "inactive")})},
                          {{}});
  const TorchSnapshot snap_d = read(top);
  const TorchDevice& d = snap_d.devices.at(0);
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(0, 500, 0)}));
  EXPECT_TRUE(d.incomplete);
  EXPECT_EQ(d.recorded_peak_reserved_bytes, 2 * MiB);
  EXPECT_TRUE(torch_snapshot_sim_input(read(top)).devices.size() == 1);
}

TEST(TorchSnapshot, UnknownActionsAreSkippedAndNamed) {
  const Py top = snapshot({}, {{entry("alloc", 4096, 10, 1), Py::dict({{"action", "empty_cache"}, {"size", 0}}),
                                entry("annotate", 4096, 10, 2), entry("free_requested", 4096, 10, 3)}});
  const TorchSnapshot s = read(top);
  EXPECT_EQ(s.unknown_actions, std::vector<std::string>{"empty_cache"});
  EXPECT_EQ(ops(s.devices.at(0).sequence), (std::vector<Op>{A(0, 10, 0), F(2000, 0)}));
}

// PyTorch's reserved bytes counted forward over a whole random run, against the reader's
// count backwards from the end state over every window the ring buffer could have kept.
TEST(TorchSnapshot, TheRecordedPeakIsExactWhateverPartOfTheRunTheWindowKept) {
  std::mt19937_64 rng(20240601);
  for (int run = 0; run < 20; ++run) {
    std::vector<Py> trace;
    std::vector<std::uint64_t> truth = {0};  // reserved before entry 0, then after each
    std::map<std::uint64_t, std::uint64_t> segments;  // cudaMalloc'd: address -> size
    std::uint64_t mapped = 0, next = 0x7f0000000000, reserved = 0;
    std::uint64_t live_addr = 0;
    for (int i = 0; i < 60; ++i) {
      const int pick = static_cast<int>(rng() % 5);
      if (pick == 0 || segments.empty()) {
        const std::uint64_t size = (1 + rng() % 10) * 2 * MiB;
        segments[next] = size;
        trace.push_back(entry("segment_alloc", next, size, i));
        next += size;
        reserved += size;
      } else if (pick == 1) {
        auto it = segments.begin();
        std::advance(it, static_cast<long>(rng() % segments.size()));
        trace.push_back(entry("segment_free", it->first, it->second, i));
        reserved -= it->second;
        segments.erase(it);
      } else if (pick == 2 || mapped == 0) {
        mapped += 20 * MiB;
        reserved += 20 * MiB;
        trace.push_back(entry("segment_map", 0x7e0000000000 + mapped, 20 * MiB, i));
      } else if (pick == 3) {
        mapped -= 20 * MiB;
        reserved -= 20 * MiB;
        trace.push_back(entry("segment_unmap", 0x7e0000000000 + mapped, 20 * MiB, i));
      } else {  // block entries between them: no reserved bytes change
        if (live_addr == 0) {
          live_addr = 0x100000 + static_cast<std::uint64_t>(i) * 4096;
          trace.push_back(entry("alloc", live_addr, 1000, i));
        } else {
          trace.push_back(entry("free_requested", live_addr, 1000, i));
          live_addr = 0;
        }
      }
      truth.push_back(reserved);
    }
    std::vector<Py> at_dump;
    for (const auto& [address, size] : segments) at_dump.push_back(segment(0, address, size, {}));
    if (mapped) at_dump.push_back(segment(0, 0x7e0000000000, mapped, {}, 0, true));
    for (std::size_t k = 0; k < trace.size(); k += 7) {  // the window keeps entries k..
      const std::vector<Py> window(trace.begin() + static_cast<long>(k), trace.end());
      const TorchSnapshot snap_d = read(snapshot(at_dump, {window}));
      const TorchDevice& d = snap_d.devices.at(0);
      SCOPED_TRACE("run " + std::to_string(run) + ", window from entry " + std::to_string(k));
      EXPECT_EQ(d.recorded_reserved_start_bytes, truth[k]);
      EXPECT_EQ(d.recorded_peak_reserved_bytes, *std::max_element(truth.begin() + static_cast<long>(k), truth.end()));
      EXPECT_EQ(d.recorded_reserved_end_bytes, reserved);
      EXPECT_EQ(d.incomplete, truth[k] > 0 || d.blocks_before_window > 0);
    }
  }
}

// ---- a MemPool's snapshot ------------------------------------------------------------------

TEST(TorchSnapshot, AMemPoolsSnapshotIsItsSegmentsAndReservedFromThemOnly) {
  // MemPool.snapshot(): torch.cuda.memory_snapshot(pool.id), a list of the pool's segments.
  const std::string bytes = data("mempool_p4.pickle");
  EXPECT_TRUE(TorchSnapshotReader::accepts(bytes.substr(0, 4096)));
  const TorchSnapshot s = TorchSnapshotReader::read(bytes, "mempool.pickle");
  ASSERT_TRUE(s.pool.has_value());
  EXPECT_EQ(*s.pool, (std::pair<std::int64_t, std::int64_t>{1, 0}));
  EXPECT_EQ(s.note, "reserved from pool (1,0)'s segments only: a MemPool snapshot (MemPool.snapshot(), no trace: the "
                    "blocks allocated at the dump)");
  ASSERT_EQ(s.devices.size(), 1u);
  const TorchDevice& d = s.devices[0];
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(0, 4000, 0)}));
  EXPECT_EQ(d.recorded_reserved_start_bytes, 22 * MiB);
  EXPECT_EQ(d.recorded_reserved_end_bytes, 22 * MiB);
  EXPECT_EQ(d.recorded_peak_reserved_bytes, 22 * MiB);
  EXPECT_TRUE(d.reserved.empty());
  EXPECT_TRUE(d.incomplete);
  EXPECT_TRUE(d.missing_actions.empty());
  EXPECT_FALSE(d.expandable_segments);
  EXPECT_EQ(torch_snapshot_sim_input(s).devices.size(), 1u);

  // torch.cuda.memory_snapshot() of every pool: segments only, no pool named.
  const Py all = Py::list({segment(0, 0x7f0000000000, 2 * MiB, {block(0x7f0000000000, 512, 100, "active_allocated")})});
  EXPECT_TRUE(TorchSnapshotReader::accepts(pickle_dump(all, 2)));
  const TorchSnapshot every = read(all, 2);
  EXPECT_FALSE(every.pool.has_value());
  EXPECT_EQ(every.note, "segments only (torch.cuda.memory_snapshot(), no trace): the blocks allocated at the dump");
  EXPECT_EQ(every.devices.at(0).recorded_peak_reserved_bytes, 2 * MiB);
  // No segments at all (a pool that holds none), and a dict without device_traces.
  EXPECT_TRUE(read(Py::list()).devices.empty());
  const TorchSnapshot no_traces = read(Py::dict({{"segments", Py::list({segment(0, 0, 2 * MiB, {})})}}));
  EXPECT_EQ(no_traces.note, "segments only (no device_traces, no trace): the blocks allocated at the dump");
  EXPECT_EQ(no_traces.devices.at(0).recorded_reserved_end_bytes, 2 * MiB);
  // A whole snapshot names no pool and has no note.
  const TorchSnapshot whole = read(window_snapshot());
  EXPECT_FALSE(whole.pool.has_value());
  EXPECT_TRUE(whole.note.empty());
}

TEST(TorchSnapshot, AMemPoolsSegmentsWithTheWholeDevicesTraceReadOnlyThePoolsEntries) {
  // _cuda_memorySnapshot(pool.id) dumped whole: the pool's segments, device 0's whole trace.
  const TorchSnapshot s = TorchSnapshotReader::read(data("mempool_traces_p4.pickle"), "mempool_traces.pickle");
  ASSERT_TRUE(s.pool.has_value());
  EXPECT_EQ(s.note, "reserved from pool (1,0)'s segments only: a MemPool snapshot; of the device traces (the whole "
                    "devices') only the entries within its segments are read (4 left out; a segment of the pool "
                    "given back within the window is not seen)");
  const TorchDevice& d = s.devices.at(0);
  EXPECT_EQ(d.entries, 5u);
  // The clock from the pool's first entry; the default pool's block is not in the sequence.
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(0, 4000, 0), A(2000, 3 * MiB, 1), F(3000, 1)}));
  EXPECT_EQ(step_bytes(d), (std::vector<std::uint64_t>{22 * MiB}));
  EXPECT_EQ(d.recorded_reserved_start_bytes, 2 * MiB);
  EXPECT_EQ(d.recorded_peak_reserved_bytes, 22 * MiB);
  EXPECT_EQ(d.reserved.at(0).op, 1u);
  EXPECT_TRUE(d.incomplete);  // the pool held 2 MiB when the window began
  EXPECT_TRUE(s.missing_actions.empty());

  // A device whose entries are all another pool's is not the pool's.
  const std::uint64_t p = 0x7f3000000000;
  const Py top = snapshot({with_field(segment(0, p, 2 * MiB, {}), "segment_pool_id", Py::tuple({2, 0}))},
                          {{entry("alloc", p, 64, 1)}, {entry("alloc", 0x7f9000000000, 64, 2)}});
  const TorchSnapshot two = read(top);
  ASSERT_EQ(two.devices.size(), 1u);
  EXPECT_EQ(two.devices[0].sequence.device, 0);
  EXPECT_NE(two.note.find("(1 left out;"), std::string::npos) << two.note;
}

// ---- windows recorded with skip_actions ----------------------------------------------------

TEST(TorchSnapshot, AWindowRecordedWithSkipActionsGivesAFigureAndSaysWhatItLacks) {
  // skip_actions=['free_requested', 'segment_free'], by Python: completions are the frees,
  // and the 20 MiB segment gone at the dump was given back unrecorded.
  const TorchSnapshot s = TorchSnapshotReader::read(data("skip_actions_p4.pickle"), "skip_actions.pickle");
  const TorchDevice& d = s.devices.at(0);
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(1000, 1000, 0), A(3000, 5 * MiB, 1), F(4000, 1), F(5000, 0)}));
  EXPECT_EQ(d.missing_actions, (std::vector<std::string>{"free_requested", "segment_free"}));
  EXPECT_EQ(s.missing_actions, d.missing_actions);
  // Walked back from the dump's 2 MiB: the 20 MiB segment_alloc finds nothing to take off
  // (its segment_free left out came after it): zero, then the 2 MiB one, below zero again.
  // The least PyTorch can have reserved at each moment; the peak at least the 20 MiB segment.
  EXPECT_EQ(step_bytes(d), (std::vector<std::uint64_t>{0, 2 * MiB}));
  EXPECT_EQ(d.recorded_reserved_start_bytes, 0u);
  EXPECT_EQ(d.recorded_peak_reserved_bytes, 20 * MiB);
  EXPECT_EQ(d.recorded_reserved_end_bytes, 2 * MiB);
  EXPECT_TRUE(d.incomplete);
  EXPECT_EQ(d.lacks, "device 0's window lacks free_requested, segment_free entries (recorded with skip_actions?): no "
                     "free_requested entries: each free is its free_completed (after the block's streams); no "
                     "segment_free entries though it reserves segments the dump does not hold: reserved walked "
                     "back from the dump without them, never below zero, and its peak at least the largest segment "
                     "(the least they can have been)");
  EXPECT_EQ(d.lacks.find('\n'), std::string::npos);

  const std::uint64_t a = 0x7f0000000000;
  {  // skip_actions=['alloc']: frees, no allocation to replay; the blocks at the dump are the sequence.
    const Py top = snapshot({segment(0, a, 2 * MiB, {block(a, 512, 500, "active_allocated"),
                                                     block(a + 512, 2 * MiB - 512, 0, "inactive")})},
                            {{entry("free_requested", a + 512, 100, 1), entry("free_completed", a + 512, 100, 2),
                              entry("segment_alloc", a, 2 * MiB, 3)}});
    const TorchSnapshot r = read(top);
    const TorchDevice& dev = r.devices.at(0);
    EXPECT_EQ(ops(dev.sequence), (std::vector<Op>{A(0, 500, 0)}));
    EXPECT_EQ(dev.missing_actions, std::vector<std::string>{"alloc"});
    EXPECT_EQ(dev.lacks, "device 0's window lacks alloc entries (recorded with skip_actions?): no alloc entries, so "
                         "nothing to replay: its 2 free entries make no allocation, the sequence is the blocks "
                         "allocated at the dump (1)");
    EXPECT_EQ(dev.recorded_peak_reserved_bytes, 2 * MiB);  // reserved from the segment entries still
    EXPECT_EQ(dev.recorded_reserved_start_bytes, 0u);
    EXPECT_TRUE(dev.incomplete);
  }
  {  // skip_actions=['free_completed']: the requests are the frees.
    const TorchSnapshot r = read(snapshot({}, {{entry("alloc", a, 100, 1), entry("free_requested", a, 100, 2)}}));
    EXPECT_EQ(ops(r.devices.at(0).sequence), (std::vector<Op>{A(0, 100, 0), F(1000, 0)}));
    EXPECT_EQ(r.devices.at(0).missing_actions, std::vector<std::string>{"free_completed"});
    EXPECT_FALSE(r.devices.at(0).incomplete);
  }
  {  // skip_actions=['segment_alloc']: the walk back from the dump counts no segment as new.
    const Py top = snapshot({segment(0, a, 2 * MiB, {})},
                            {{entry("alloc", a, 100, 1), entry("segment_free", a + 2 * MiB, 20 * MiB, 2)}});
    const TorchSnapshot r = read(top);
    const TorchDevice& dev = r.devices.at(0);
    EXPECT_EQ(dev.missing_actions, std::vector<std::string>{"segment_alloc"});
    EXPECT_EQ(step_bytes(dev), (std::vector<std::uint64_t>{2 * MiB}));
    EXPECT_EQ(dev.recorded_reserved_start_bytes, 22 * MiB);
    EXPECT_NE(dev.lacks.find("the most it can have been"), std::string::npos) << dev.lacks;
  }
  {  // skip_actions=['segment_unmap'] on expandable segments: mapped, gone at the dump.
    const std::uint64_t e = 0x7e0000000000;
    const Py top = snapshot({}, {{entry("segment_map", e, 20 * MiB, 1), entry("alloc", e, MiB, 2),
                                  entry("free_requested", e, MiB, 3), entry("free_completed", e, MiB, 4)}});
    const TorchSnapshot r = read(top);
    const TorchDevice& dev = r.devices.at(0);
    EXPECT_EQ(dev.missing_actions, std::vector<std::string>{"segment_unmap"});
    EXPECT_EQ(step_bytes(dev), (std::vector<std::uint64_t>{0}));
    EXPECT_EQ(dev.recorded_peak_reserved_bytes, 20 * MiB);
    EXPECT_EQ(dev.recorded_reserved_end_bytes, 0u);
    EXPECT_TRUE(dev.expandable_segments);
  }
  {  // Two devices: the snapshot's kinds together, in one order.
    const TorchSnapshot r = read(snapshot({}, {{entry("alloc", a, 100, 1), entry("free_requested", a, 100, 2)},
                                               {entry("alloc", a, 100, 3), entry("free_completed", a, 100, 4)}}));
    EXPECT_EQ(r.missing_actions, (std::vector<std::string>{"free_requested", "free_completed"}));
  }
  // A whole window lacks nothing.
  EXPECT_TRUE(read(window_snapshot()).missing_actions.empty());
  EXPECT_TRUE(read(window_snapshot()).devices.at(0).lacks.empty());
}

TEST(TorchSnapshot, TheReservedBytesHangTogetherOnEveryFormat) {
  // What the fuzz target checks, on each of Python's files: the last step is the dump's,
  // no step above the peak, the start not above it.
  for (const char* name : {"window_p4.pickle", "full_p4.pickle", "training_p4.pickle", "mempool_p4.pickle",
                           "mempool_traces_p4.pickle", "skip_actions_p4.pickle", "expandable_p4.pickle"}) {
    SCOPED_TRACE(name);
    const TorchSnapshot s = TorchSnapshotReader::read(data(name), name);
    for (const TorchDevice& d : s.devices) {
      if (!d.reserved.empty()) {
        EXPECT_EQ(d.reserved.back().bytes, d.recorded_reserved_end_bytes);
      }
      for (const TorchReservedStep& r : d.reserved) EXPECT_LE(r.bytes, d.recorded_peak_reserved_bytes);
      EXPECT_LE(d.recorded_reserved_start_bytes, d.recorded_peak_reserved_bytes);
      EXPECT_EQ(d.lacks.empty(), d.missing_actions.empty());
    }
  }
}

// ---- expandable segments, as Python writes them ---------------------------------------------

TEST(TorchSnapshot, ExpandableSegmentsOfPythonsPickleCountMappedBytes) {
  const std::string bytes = data("expandable_p4.pickle");
  ASSERT_TRUE(TorchSnapshotReader::accepts(bytes));
  const TorchSnapshot s = TorchSnapshotReader::read(bytes, "expandable.pickle");
  const TorchDevice& d = s.devices.at(0);
  EXPECT_TRUE(d.expandable_segments);
  EXPECT_EQ(ops(d.sequence), (std::vector<Op>{A(1000, 12 * MiB, 0), A(3000, 16 * MiB, 1), F(4000, 0)}));
  EXPECT_EQ(step_bytes(d), (std::vector<std::uint64_t>{20 * MiB, 40 * MiB, 28 * MiB}));
  ASSERT_EQ(d.reserved.size(), 3u);
  EXPECT_EQ(d.reserved[0].action, TorchReservedStep::Action::segment_map);
  EXPECT_EQ(d.reserved[2].action, TorchReservedStep::Action::segment_unmap);
  EXPECT_EQ(d.reserved[2].size, 12 * MiB);
  EXPECT_EQ(d.recorded_reserved_start_bytes, 0u);
  EXPECT_EQ(d.recorded_peak_reserved_bytes, 40 * MiB);
  EXPECT_EQ(d.recorded_reserved_end_bytes, 28 * MiB);
  EXPECT_FALSE(d.incomplete);
  EXPECT_TRUE(d.missing_actions.empty());
  EXPECT_TRUE(s.note.empty());
  // A window segment_map-only does not lack segment_unmap while the dump holds what it mapped.
  EXPECT_FALSE(device(TorchSnapshotReader::read(data("full_p4.pickle"), "full.pickle"), 0).expandable_segments);
  EXPECT_TRUE(device(TorchSnapshotReader::read(data("full_p4.pickle"), "full.pickle"), 1).expandable_segments);
}

// ---- luma's own snapshot export, read back -------------------------------------------------

TEST(TorchSnapshot, LumasMemvizExportReadsAsTheTraceItCameFrom) {
  // tests/data/golden_small.memviz.pickle is `luma export --format memviz` of
  // golden_small.trace (core/io/pickle_writer.h: protocol 2, BINPUT memo).
  const std::string dir = std::string(LUMA_DATA_DIR);
  const std::string bytes = slurp(dir + "/golden_small.memviz.pickle");
  ASSERT_TRUE(TorchSnapshotReader::accepts(bytes.substr(0, 4096)));
  const TorchSnapshot s = TorchSnapshotReader::read(bytes, "golden_small.memviz.pickle");
  const SimInput from_trace = read_sim_input(dir + "/golden_small.trace");
  const SimInput from_snapshot = torch_snapshot_sim_input(s);
  ASSERT_EQ(from_snapshot.devices.size(), from_trace.devices.size());
  for (std::size_t i = 0; i < from_trace.devices.size(); ++i) {
    const SimSequence& t = from_trace.devices[i];
    const SimSequence& p = from_snapshot.devices[i];
    EXPECT_EQ(p.device, t.device);
    ASSERT_EQ(p.ops.size(), t.ops.size()) << "device " << t.device;
    for (std::size_t j = 0; j < t.ops.size(); ++j) {
      EXPECT_EQ(p.ops[j].bytes, t.ops[j].bytes) << j;
      EXPECT_EQ(p.ops[j].id, t.ops[j].id) << j;
      EXPECT_EQ(p.ops[j].is_free, t.ops[j].is_free) << j;
    }
    EXPECT_EQ(p.peak_live, t.peak_live);
  }
  // Reserved: device 0 grew to 2 MiB + 20 MiB then gave the 20 MiB back; device 1 40 MiB.
  EXPECT_EQ(device(s, 0).recorded_peak_reserved_bytes, 22 * MiB);
  EXPECT_EQ(device(s, 0).recorded_reserved_end_bytes, 2 * MiB);
  EXPECT_EQ(device(s, 1).recorded_peak_reserved_bytes, 40 * MiB);
  EXPECT_FALSE(device(s, 0).incomplete);
  EXPECT_FALSE(device(s, 1).incomplete);
}

// ---- detection ----------------------------------------------------------------------------

TEST(TorchSnapshot, AcceptsSnapshotsByContentOnly) {
  for (int protocol = 2; protocol <= 5; ++protocol)
    EXPECT_TRUE(TorchSnapshotReader::accepts(pickle_dump(window_snapshot(), protocol))) << protocol;
  // device_traces first is a snapshot too.
  EXPECT_TRUE(TorchSnapshotReader::accepts(
      pickle_dump(Py::dict({{"device_traces", Py::list()}, {"segments", Py::list()}}), 4)));
  // Not snapshots: other pickles, other formats, too short.
  EXPECT_FALSE(TorchSnapshotReader::accepts(pickle_dump(Py::list({"segments"}), 4)));
  EXPECT_FALSE(TorchSnapshotReader::accepts(pickle_dump(Py::dict({{"segment", 1}}), 4)));
  EXPECT_FALSE(TorchSnapshotReader::accepts("id,lower,upper,size\n0,0,1,8\n"));
  EXPECT_FALSE(TorchSnapshotReader::accepts("Thread,Time,Action,Pointer,Size,Stream\n"));
  EXPECT_FALSE(TorchSnapshotReader::accepts(slurp(std::string(LUMA_DATA_DIR) + "/golden_small.trace").substr(0, 4096)));
  EXPECT_FALSE(TorchSnapshotReader::accepts(""));
  EXPECT_FALSE(TorchSnapshotReader::accepts("\x80\x04"));
  EXPECT_FALSE(TorchSnapshotReader::accepts(std::string("\x80\x01}", 3)));
  EXPECT_FALSE(TorchSnapshotReader::accepts(std::string("\x80\x02" "cbuiltins\neval\n", 17)));
  // The rule's limit: a dict with the string "segments" early is accepted, whatever its
  // role; reading it then says what is missing.
  const std::string lookalike = pickle_dump(Py::dict({{"x", "segments"}}), 2);
  EXPECT_TRUE(TorchSnapshotReader::accepts(lookalike));
  EXPECT_NE(refusal(lookalike).find("no 'segments' key"), std::string::npos);
}

// ---- refusals -----------------------------------------------------------------------------

TEST(TorchSnapshot, RefusesAPickleThatNamesOrCallsAnObjectWithTheOffset) {
  // The opcodes of torch.save'd tensors and of an exploit, inside an otherwise good snapshot.
  const std::string good = pickle_dump(window_snapshot(), 2);
  const std::string global = "\x80\x02}(X\x08\x00\x00\x00" "segments" "cos\nsystem\n" "]u."s;
  std::string why = refusal(global);
  EXPECT_NE(why.find("test.pickle: byte 17: opcode GLOBAL (0x63)"), std::string::npos) << why;
  const std::string reduce = std::string("\x80\x04") + "}(\x8c\x08segments" "\x8c\x02os\x8c\x06system\x93" "R" "u.";
  why = refusal(reduce);
  EXPECT_NE(why.find("byte 26: opcode STACK_GLOBAL"), std::string::npos) << why;
  why = refusal(good.substr(0, good.size() - 1) + "R.");
  EXPECT_NE(why.find("REDUCE (0x52)"), std::string::npos) << why;
  EXPECT_NE(why.find("byte " + std::to_string(good.size() - 1)), std::string::npos) << why;
}

TEST(TorchSnapshot, EveryTruncationIsAnErrorNamingTheFile) {
  const std::string good = pickle_dump(window_snapshot(), 4);
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::string why = refusal(good.substr(0, n));
    EXPECT_EQ(why.rfind("test.pickle: ", 0), 0u) << n << ": " << why;
  }
}

TEST(TorchSnapshot, WrongTypesAndMissingFieldsAreNamedWithTheirPlace) {
  auto with_entry = [](Py e) { return pickle_dump(snapshot({}, {{entry("alloc", 4096, 8, 1), e}}), 4); };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with_entry(Py::dict({{"action", "alloc"}, {"addr", "0x1000"}, {"size", 8}})),
       "device_traces[0][1]: 'addr' is a str, not an int"},
      {with_entry(Py::dict({{"action", "alloc"}, {"addr", 8192}, {"size", -8}})),
       "device_traces[0][1]: 'size' is -8, below zero"},
      {with_entry(Py::dict({{"action", "alloc"}, {"size", 8}})), "device_traces[0][1]: 'addr' is missing"},
      {with_entry(Py::dict({{"addr", 8192}})), "device_traces[0][1]: 'action' is missing"},
      {with_entry(Py::dict({{"action", 3}})), "device_traces[0][1]: 'action' is an int, not a str"},
      {with_entry(Py::list()), "device_traces[0][1]: is a list, not a dict"},
      {with_entry(Py::dict({{"action", "alloc"}, {"addr", 8192}, {"size", 8}, {"frames", 5}})),
       "device_traces[0][1]: 'frames' is an int, not a list"},
      {with_entry(Py::dict({{"action", "alloc"}, {"addr", 8192}, {"size", 8}, {"frames", Py::list({"f"})}})),
       "device_traces[0][1]: a frame is a str, not a dict"},
      {with_entry(Py::dict({{"action", "alloc"}, {"addr", 8192}, {"size", 8}, {"time_us", Py(1.5)}})),
       "'time_us' is a float, not an int"},
      {with_entry(entry("alloc", 4096, 8, 2)), "device_traces[0][1]: alloc at 0x1000, which is allocated and not "
                                               "freed since device_traces[0][0]"},
      {pickle_dump(Py::dict({{"segments", 1}, {"device_traces", Py::list()}}), 4),
       "the snapshot: 'segments' is an int, not a list"},
      {pickle_dump(Py::dict({{"segments", Py::list({Py::dict({{"device", 0}, {"address", 0}})})},
                             {"device_traces", Py::list()}}),
                   4),
       "segments[0]: 'total_size' is missing"},
      {pickle_dump(snapshot({segment(0, 0, 2 * MiB, {Py::dict({{"size", 8}, {"state", 1}})})}, {}), 4),
       "segments[0].blocks[0]: 'state' is an int, not a str"},
      {pickle_dump(snapshot({segment(70000, 0, 2 * MiB, {})}, {}), 4), "'device' is 70000, not a device number"},
      {pickle_dump(Py::dict({{"segments", Py::list()}, {"device_traces", Py::list({Py::dict()})}}), 4),
       "device_traces[0]: 'device_traces' is a dict, not a list"},
      {pickle_dump(Py::list({Py::list()}), 4), "test.pickle: the pickle holds a list, not a dict"},
      {pickle_dump(Py::dict({{"device_traces", Py::list()}}), 4), "no 'segments' key"},
      {pickle_dump(snapshot({}, {{entry("segment_alloc", 0, 2 * MiB, 1), entry("segment_free", 0, 2 * MiB, 2),
                                  entry("segment_alloc", 4 * MiB, 4 * MiB, 3)}}),
                   4),
       "device_traces[0][2]: PyTorch's reserved bytes, walked back from the segments at the dump (0 B), go below "
       "zero"},
      // The fields of newer versions: segment_pool_id, is_expandable; a MemPool's list.
      {pickle_dump(snapshot({with_field(segment(0, 0, 2 * MiB, {}), "segment_pool_id", "pool")}, {}), 4),
       "segments[0]: 'segment_pool_id' is a str, not a pair of ints"},
      {pickle_dump(snapshot({segment(0, 0, 2 * MiB, {}),
                             with_field(segment(0, 4 * MiB, 2 * MiB, {}), "segment_pool_id", Py::tuple({1, 0, 2}))},
                            {}),
                   4),
       "segments[1]: 'segment_pool_id' is a tuple of 3, not a pair of ints"},
      {pickle_dump(snapshot({with_field(segment(0, 0, 2 * MiB, {}), "segment_pool_id", Py::tuple({1, "0"}))}, {}), 4),
       "segments[0]: 'segment_pool_id' is a tuple of 2, not a pair of ints"},
      {pickle_dump(snapshot({with_field(segment(0, 0, 2 * MiB, {}), "is_expandable", 1)}, {}), 4),
       "segments[0]: 'is_expandable' is an int, not a bool"},
      {pickle_dump(Py::list({segment(0, 0, 2 * MiB, {}), "segment"}), 4), "segments[1]: is a str, not a dict"},
      {pickle_dump(snapshot({}, {{entry("alloc", 64, 8, 1), entry("free_requested", 64, 8, 2),
                                  entry("free_requested", 64, 8, 3)}}),
                   4),
       "device_traces[0][2]: free_requested at 0x40, which device_traces[0][1] freed already"},
  };
  for (const auto& [bytes, expected] : cases) {
    const std::string why = refusal(bytes);
    EXPECT_NE(why.find(expected), std::string::npos) << "expected: " << expected << "\n got: " << why;
    EXPECT_EQ(why.rfind("test.pickle: ", 0), 0u) << why;
  }
}

TEST(TorchSnapshot, HugeLengthsAndDeepNestingAreRefusedWithoutExhaustingAnything) {
  std::string why = refusal(std::string("\x80\x02}(X\xff\xff\xff\xff", 9) + "segments");
  EXPECT_NE(why.find("test.pickle: byte 4: BINUNICODE (0x58) needs 4294967295 more bytes"), std::string::npos) << why;
  why = refusal(std::string("\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f}", 12));
  EXPECT_NE(why.find("FRAME (0x95) of 9223372036854775807 bytes"), std::string::npos) << why;
  // A frames list nested 100000 deep.
  std::string deep = std::string("\x80\x04}(\x8c\x08segments]\x8c\x0d" "device_traces") + std::string(100000, ']') +
                     std::string(99999, 'a') + "u.";
  why = refusal(deep);
  EXPECT_NE(why.find("nest more than 64 containers deep"), std::string::npos) << why;
  // A budget for the values, whatever the file says.
  PickleLimits tight;
  tight.max_bytes = 64 * 1024;
  EXPECT_NO_THROW((void)TorchSnapshotReader::read(pickle_dump(window_snapshot(), 4), "w.pickle", tight));
  try {
    (void)TorchSnapshotReader::read(std::string("\x80\x04](") + std::string(100000, ']') + "e.", "w.pickle", tight);
    ADD_FAILURE() << "no refusal";
  } catch (const PlanInputError& e) {
    EXPECT_NE(std::string(e.what()).find("w.pickle: byte "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more than 65536 bytes of memory"), std::string::npos) << e.what();
  }
}

TEST(TorchSnapshot, ReadingAFileNamesIt) {
  const std::string dir = ::testing::TempDir();
  EXPECT_THROW((void)TorchSnapshotReader::read_file(dir + "/no-such-snapshot.pickle"), PlanInputError);
  EXPECT_THROW((void)TorchSnapshotReader::read_file(dir), PlanInputError);
  const std::string path = dir + "/luma-torch-snapshot-test.pickle";
  {
    std::ofstream out(path, std::ios::binary);
    out << pickle_dump(window_snapshot(), 5);
  }
  const TorchSnapshot s = TorchSnapshotReader::read_file(path);
  expect_window_device(s, s.devices.at(0));
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
  }
  try {
    (void)TorchSnapshotReader::read_file(path);
    ADD_FAILURE() << "an empty file was read";
  } catch (const PlanInputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": empty file");
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace luma::core
