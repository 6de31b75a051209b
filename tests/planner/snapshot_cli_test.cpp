// snapshot_cli_test.cpp - PyTorch memory snapshots as input to the luma program (LUMA_EXE):
// `luma simulate` (PyTorch's recorded peak reserved beside luma's, the allocations
// replayed), `luma stats` (the peaks, the call sites by name) and `luma plan`, on snapshots
// pickled here as Python pickles them (tests/torch_snapshot/py_pickler.h) and on a sample
// of tests/torch_snapshot/data/; a window that did not see the run's start said in one
// line and in JSON; damaged and foreign pickles refused naming the byte offset or field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "luma_cli.h"
#include "py_pickler.h"

namespace {

using namespace luma::test;

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::int64_t T0 = 1'700'000'000'000'000;  // time_us, as PyTorch writes it

std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// ---- snapshots shaped as torch/csrc/cuda/Module.cpp writes them --------------------------

Py frames(const char* file, const char* function, int line) {
  return Py::list({Py::dict({{"filename", file}, {"name", function}, {"line", line}})});
}
Py entry(const char* action, std::uint64_t addr, std::uint64_t size, std::int64_t t, Py stack = Py()) {
  Py e = Py::dict({{"action", action}, {"addr", Py(addr)}, {"size", Py(size)}, {"stream", 0}, {"time_us", Py(T0 + t)}});
  if (!std::holds_alternative<Py::None>(*stack.data)) e.set("frames", stack);
  return e;
}
Py block(std::uint64_t address, std::uint64_t size, std::uint64_t requested, const char* state, Py stack = Py::list()) {
  return Py::dict({{"address", Py(address)},
                   {"size", Py(size)},
                   {"requested_size", Py(requested)},
                   {"state", state},
                   {"frames", stack}});
}
Py segment(std::uint64_t address, std::uint64_t total, std::vector<Py> blocks) {
  return Py::dict({{"device", 0},
                   {"address", Py(address)},
                   {"total_size", Py(total)},
                   {"stream", 0},
                   {"segment_type", total > 2 * MiB ? "large" : "small"},
                   {"is_expandable", Py(false)},
                   {"frames", Py::list()},
                   {"blocks", Py::list(std::move(blocks))}});
}
Py snapshot(std::vector<Py> segments, std::vector<Py> trace) {
  return Py::dict({{"segments", Py::list(std::move(segments))},
                   {"device_traces", Py::list({Py::list(std::move(trace))})},
                   {"allocator_settings", Py::dict({{"PYTORCH_CUDA_ALLOC_CONF", ""}})}});
}

fs::path write(const std::string& name, const std::string& bytes) {
  const fs::path p = scratch(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

// A complete window: every segment reserved in it; four allocations, three freed.
struct Complete {
  fs::path path;
  std::uint64_t recorded_peak = 0;  // PyTorch's reserved bytes at their most, counted forward
  std::uint64_t peak_live = 0;
};

Complete complete_snapshot(int protocol = 4) {
  const std::uint64_t a = 0x7f0000000000, b = 0x7f0010000000, c = 0x7f0020000000;
  const Py site = frames("model.py", "forward", 12), other = frames("train.py", "step", 40);
  // PyTorch's reserved bytes, counted forward over the segment entries as they are made.
  Complete out;
  std::uint64_t reserved = 0;
  auto seg = [&](const char* action, std::uint64_t addr, std::uint64_t size, std::int64_t t) {
    reserved = std::string(action) == "segment_alloc" ? reserved + size : reserved - size;
    out.recorded_peak = std::max(out.recorded_peak, reserved);
    return entry(action, addr, size, t);
  };
  std::vector<Py> trace = {
      seg("segment_alloc", a, 20 * MiB, 1),          entry("alloc", a, 4 * MiB, 2, site),
      entry("alloc", a + 4 * MiB, 6 * MiB, 3, site), seg("segment_alloc", b, 2 * MiB, 4),
      entry("alloc", b, 1000, 5, other),             entry("free_requested", a, 4 * MiB, 6),
      entry("free_completed", a, 4 * MiB, 7),        seg("segment_alloc", c, 40 * MiB, 8),
      entry("alloc", c, 30 * MiB, 9, other),         entry("free_requested", c, 30 * MiB, 10),
      entry("free_completed", c, 30 * MiB, 11),      seg("segment_free", c, 40 * MiB, 12),
      entry("free_requested", a + 4 * MiB, 6 * MiB, 13), entry("free_completed", a + 4 * MiB, 6 * MiB, 14)};
  out.peak_live = 6 * MiB + 1000 + 30 * MiB;
  const Py top = snapshot({segment(a, 20 * MiB, {block(a, 20 * MiB, 0, "inactive")}),
                           segment(b, 2 * MiB, {block(b, 1024, 1000, "active_allocated", other),
                                                block(b + 1024, 2 * MiB - 1024, 0, "inactive")})},
                          std::move(trace));
  out.path = write("complete_p" + std::to_string(protocol) + ".pickle", pickle_dump(top, protocol));
  return out;
}

// A window that began late: a block it frees without having seen it allocated, a block
// allocated all along (at the dump, never in the window), a 4 MiB segment reserved before.
fs::path late_window_snapshot() {
  const std::uint64_t s1 = 0x7f0000000000, s2 = 0x7f0000400000;
  const Py setup = frames("train.py", "setup", 7);
  const Py top = snapshot(
      {segment(s1, 4 * MiB,
               {block(s1, 1024, 777, "active_allocated", setup), block(s1 + 1024, 4 * MiB - 1024, 0, "inactive")}),
       segment(s2, 2 * MiB, {block(s2, 2 * MiB, 0, "inactive")})},
      {entry("free_requested", s1 + 1024, 1000, 1), entry("free_completed", s1 + 1024, 1000, 2),
       entry("segment_alloc", s2, 2 * MiB, 3), entry("alloc", s2, 100, 4, frames("train.py", "step", 9)),
       entry("free_requested", s2, 100, 5), entry("free_completed", s2, 100, 6)});
  return write("late.pickle", pickle_dump(top));
}

const char* kIncomplete =
    "the trace is incomplete: 2 blocks were live when the recording window began; replayed from that state";

// ---- luma simulate -----------------------------------------------------------------------

TEST(SnapshotCli, SimulateReplaysTheSnapshotBesidePyTorchsRecordedPeak) {
  const Complete s = complete_snapshot();
  const nlohmann::json j = json_of(run_luma("simulate " + s.path.string() + " --json", false));
  EXPECT_EQ(j["format"], "PyTorch memory snapshot");
  ASSERT_EQ(j["devices"].size(), 1u);
  const nlohmann::json& d = j["devices"][0];
  EXPECT_EQ(d["allocations"], 4);
  EXPECT_EQ(d["frees"], 3);
  EXPECT_EQ(d["recorded_peak_reserved_bytes"].get<std::uint64_t>(), s.recorded_peak);
  EXPECT_EQ(s.recorded_peak, 62 * MiB);
  EXPECT_EQ(d["peak_live_bytes"].get<std::uint64_t>(), s.peak_live);
  EXPECT_EQ(d["incomplete"], false);
  EXPECT_EQ(d["blocks_before_window"], 0);
  EXPECT_EQ(d["has_clock"], true);
  EXPECT_EQ(d["runs"][0]["completed"], true);
  EXPECT_EQ(d["runs"][0]["allocations_served"], 4);
  EXPECT_GE(d["runs"][0]["peak_reserved_bytes"].get<std::uint64_t>(), s.peak_live);

  const LumaRun text = run_luma("simulate " + s.path.string());
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("PyTorch memory snapshot, device 0: 4 allocations"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("PyTorch's recorded peak reserved " + grouped(s.recorded_peak) + " B"), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("x PyTorch's recorded peak"), std::string::npos) << text.output;
  EXPECT_EQ(text.output.find("incomplete"), std::string::npos) << text.output;

  // The other formats have no recorded peak: null, not 0.
  const fs::path log = rmm_log("one.csv", {alloc(0, 4096), release(0)});
  const nlohmann::json rmm = json_of(run_luma("simulate " + log.string() + " --json", false));
  EXPECT_TRUE(rmm["devices"][0]["recorded_peak_reserved_bytes"].is_null());
  EXPECT_TRUE(rmm["devices"][0]["incomplete"].is_null());
}

TEST(SnapshotCli, EveryPickleProtocolAndPythonsOwnPicklesRead) {
  for (int protocol = 2; protocol <= 5; ++protocol) {
    const Complete s = complete_snapshot(protocol);
    const nlohmann::json j = json_of(run_luma("simulate " + s.path.string() + " --json", false));
    EXPECT_EQ(j["devices"][0]["recorded_peak_reserved_bytes"].get<std::uint64_t>(), s.recorded_peak) << protocol;
  }
  // make_snapshots.py's window: 24 MiB reserved when it began, 26 MiB at the most.
  const std::string sample = std::string(LUMA_SNAPSHOT_DATA_DIR) + "/window_p4.pickle";
  const nlohmann::json j = json_of(run_luma("simulate " + sample + " --json", false));
  EXPECT_EQ(j["devices"][0]["recorded_peak_reserved_bytes"], 26 * MiB);
  EXPECT_EQ(j["devices"][0]["incomplete"], true);
  EXPECT_EQ(j["devices"][0]["blocks_before_window"], 2);
  // A pipe is read once.
  const nlohmann::json piped =
      json_of(shell("cat " + sample + " | " + LUMA_EXE + " simulate /dev/stdin --json", false));
  EXPECT_EQ(piped["devices"][0]["recorded_peak_reserved_bytes"], 26 * MiB);
}

TEST(SnapshotCli, AWindowThatMissedTheRunsStartIsSaid) {
  const fs::path late = late_window_snapshot();
  LumaRun r = run_luma("simulate " + late.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(kIncomplete), std::string::npos) << r.output;
  const nlohmann::json j = json_of(run_luma("simulate " + late.string() + " --json", false));
  EXPECT_EQ(j["devices"][0]["incomplete"], true);
  EXPECT_EQ(j["devices"][0]["blocks_before_window"], 2);
  EXPECT_EQ(j["devices"][0]["allocations"], 3);  // the two live at its start, and its own
  EXPECT_EQ(j["devices"][0]["recorded_peak_reserved_bytes"], 6 * MiB);

  r = run_luma("stats " + late.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(kIncomplete), std::string::npos) << r.output;
  const nlohmann::json stats = json_of(run_luma("stats " + late.string() + " --json", false));
  const nlohmann::json& d = stats["runs"][0]["devices"][0];
  EXPECT_EQ(d["incomplete"], true);
  EXPECT_EQ(d["blocks_before_window"], 2);
  EXPECT_EQ(d["reserved_before_window_bytes"], 4 * MiB);
  EXPECT_EQ(d["peak_reserved_bytes"], 6 * MiB);
  // The segments reserved before the window are not in it: their free blocks are unknown.
  EXPECT_TRUE(d["at_peak_reserved"]["fragmentation"].is_null()) << d.dump();

  r = run_luma("plan " + late.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(kIncomplete), std::string::npos) << r.output;
}

// ---- luma stats and luma plan ------------------------------------------------------------

TEST(SnapshotCli, StatsSummarizesTheSnapshotWithItsFramesAsCallSites) {
  const Complete s = complete_snapshot();
  const nlohmann::json j = json_of(run_luma("stats " + s.path.string() + " --json", false));
  const nlohmann::json& run = j["runs"][0];
  EXPECT_EQ(run["format"], "PyTorch memory snapshot");
  EXPECT_TRUE(run["pid"].is_null());
  const nlohmann::json& d = run["devices"][0];
  EXPECT_EQ(d["allocations"], 4);
  EXPECT_EQ(d["frees"], 3);
  EXPECT_EQ(d["peak_allocated_bytes"].get<std::uint64_t>(), s.peak_live);
  EXPECT_EQ(d["peak_reserved_bytes"].get<std::uint64_t>(), s.recorded_peak);
  EXPECT_EQ(d["segment_reserves"], 3);
  EXPECT_EQ(d["segment_releases"], 1);
  EXPECT_EQ(d["incomplete"], false);
  EXPECT_EQ(d["final_allocated_bytes"], 1000);
  // The complete window knows every segment: the free blocks at the peak are measured
  // (62 MiB reserved; 6 MiB + 30 MiB + 1000 B live).
  EXPECT_EQ(d["at_peak_reserved"]["reserved_bytes"].get<std::uint64_t>(), 62 * MiB);
  EXPECT_FALSE(d["at_peak_reserved"]["fragmentation"].is_null());
  const nlohmann::json& sites = d["top_callsites_total"];
  ASSERT_EQ(sites.size(), 2u) << sites.dump();
  EXPECT_EQ(sites[0]["bytes"].get<std::uint64_t>(), 30 * MiB + 1000);  // train.py:40, twice
  EXPECT_EQ(sites[0]["frames"][0]["file"], "train.py");
  EXPECT_EQ(sites[0]["frames"][0]["line"], 40);
  EXPECT_EQ(sites[1]["frames"][0]["function"], "forward");

  const LumaRun text = run_luma("stats " + s.path.string());
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("(PyTorch memory snapshot)"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("      model.py:12 forward"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("top allocating Python lines"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("peak reserved      62.00 MiB"), std::string::npos) << text.output;
}

TEST(SnapshotCli, PlanPlansTheSnapshotsAllocations) {
  const Complete s = complete_snapshot();
  const fs::path out = scratch("snapshot.plan.json");
  const LumaRun r = run_luma("plan " + s.path.string() + " -o " + out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("device 0: 4 buffers, lower bound " + std::to_string(s.peak_live) + " B"), std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(out));
}

// ---- damaged and foreign pickles -----------------------------------------------------------

TEST(SnapshotCli, DamagedOrForeignPicklesAreRefusedNamingTheOffsetOrField) {
  const Complete s = complete_snapshot();
  std::string bytes;
  {
    std::ifstream in(s.path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const fs::path cut = write("cut.pickle", bytes.substr(0, bytes.size() / 2));
  // A field of the wrong type.
  const Py bad_field = snapshot({}, {Py::dict({{"action", "alloc"}, {"addr", "0x10"}, {"size", 5}, {"stream", 0}})});
  const fs::path field = write("field.pickle", pickle_dump(bad_field));
  const fs::path foreign = write("list.pickle", pickle_dump(Py::list({1, 2, 3})));
  // An opcode that names a Python object (GLOBAL os.system): never run, refused.
  static constexpr char kGlobal[] = "\x80\x04" "cos\nsystem\n.";
  const fs::path opcode = write("global.pickle", std::string(kGlobal, sizeof kGlobal - 1));
  for (const char* command : {"simulate", "stats", "plan", "simulate --tune"}) {
    LumaRun r = run_luma(std::string(command) + " " + cut.string());
    EXPECT_EQ(r.code, 1) << command << ": " << r.output;
    EXPECT_NE(r.output.find("cut.pickle: byte "), std::string::npos) << command << ": " << r.output;
    r = run_luma(std::string(command) + " " + field.string());
    EXPECT_EQ(r.code, 1) << command << ": " << r.output;
    EXPECT_NE(r.output.find("device_traces[0][0]: 'addr' is a str, not an int"), std::string::npos)
        << command << ": " << r.output;
    r = run_luma(std::string(command) + " " + foreign.string());
    EXPECT_EQ(r.code, 1) << command << ": " << r.output;
    EXPECT_NE(r.output.find("not a PyTorch memory snapshot"), std::string::npos) << command << ": " << r.output;
    r = run_luma(std::string(command) + " " + opcode.string());
    EXPECT_EQ(r.code, 1) << command << ": " << r.output;
    EXPECT_NE(r.output.find("global.pickle: byte 2"), std::string::npos) << command << ": " << r.output;
  }
}

}  // namespace
