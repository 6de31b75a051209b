// plan_file_test.cpp - the plan file (core/plan/plan_file.h): what is written reads back the
// same, and every malformed input - bad JSON, wrong types, numbers out of range, offsets
// that break the alignment or leave the arena, inconsistent periodic layouts, truncation,
// deep nesting, random corruption, a file too large - ends in one PlanFileError that names
// the file and the field, never a crash.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "plan/plan_file.h"

namespace luma::core {
namespace {

namespace fs = std::filesystem;

PlanFile sample() {
  PlanFile p;
  p.input = "run.trace";
  p.fingerprint = RunFingerprint{"./train", {"--epochs", "1"}, {{0, "NVIDIA H100", 80ull << 30}, {1, "NVIDIA H100", 80ull << 30}}};
  DevicePlanFile d0;
  d0.device = 0;
  d0.arena = 3072;
  d0.lower_bound = 2048;
  d0.strategy = "greedy-size";
  d0.strategies = {{"tlsf", 4096, 0.5}, {"greedy-size", 3072, 0.25}};
  d0.allocations = {{"0", 1000, 1024, 0, 0, 5}, {"1", 2048, 2048, 1024, 1, 3}, {"2", 1, 256, 0, 6, 9}};
  DevicePlanFile d1;
  d1.device = 1;
  d1.arena = 512;
  d1.lower_bound = 512;
  d1.periodic = PeriodicLayout{1, 1, 0, 7, 256};
  d1.allocations = {{"a", 256, 256, 0, 0, 2}, {"b", 200, 256, 256, 1, 2}};
  p.devices = {d0, d1};
  return p;
}

TEST(PlanFile, WhatIsWrittenReadsBackTheSame) {
  const PlanFile p = sample();
  const PlanFile q = parse_plan_file(format_plan_file(p), "mem");
  EXPECT_EQ(q.input, "run.trace");
  ASSERT_TRUE(q.fingerprint);
  EXPECT_EQ(q.fingerprint->executable, "./train");
  EXPECT_EQ(q.fingerprint->arguments, (std::vector<std::string>{"--epochs", "1"}));
  ASSERT_EQ(q.fingerprint->devices.size(), 2u);
  EXPECT_EQ(q.fingerprint->devices[1].name, "NVIDIA H100");
  EXPECT_EQ(q.fingerprint->devices[1].total_bytes, 80ull << 30);
  ASSERT_EQ(q.devices.size(), 2u);
  const DevicePlanFile& d0 = q.devices[0];
  EXPECT_EQ(d0.arena, 3072u);
  EXPECT_EQ(d0.alignment, 256u);
  EXPECT_EQ(d0.lower_bound, 2048u);
  EXPECT_EQ(d0.strategy, "greedy-size");
  ASSERT_EQ(d0.strategies.size(), 2u);
  EXPECT_EQ(d0.strategies[0].arena, 4096u);
  EXPECT_DOUBLE_EQ(d0.strategies[1].seconds, 0.25);
  ASSERT_EQ(d0.allocations.size(), 3u);
  EXPECT_EQ(d0.allocations[0].requested, 1000u);
  EXPECT_EQ(d0.allocations[0].size, 1024u);
  EXPECT_EQ(d0.allocations[1].offset, 1024u);
  EXPECT_EQ(d0.allocations[2].lower, 6u);
  EXPECT_EQ(d0.allocations[2].upper, 9u);
  EXPECT_FALSE(d0.periodic);
  ASSERT_TRUE(q.devices[1].periodic);
  EXPECT_EQ(q.devices[1].periodic->warmup, 1u);
  EXPECT_EQ(q.devices[1].periodic->period, 1u);
  EXPECT_EQ(q.devices[1].periodic->captured_iterations, 7u);
  EXPECT_EQ(q.devices[1].periodic->boundary_bytes, 256u);
  EXPECT_EQ(q.devices[1].allocations[1].name, "b");
  EXPECT_EQ(q.find_device(1), &q.devices[1]);
  EXPECT_EQ(q.find_device(2), nullptr);
  // Formatting is deterministic: the reread plan writes the same text.
  EXPECT_EQ(format_plan_file(q), format_plan_file(p));
}

TEST(PlanFile, TheExistingLumaPlanFieldsAreKept) {
  const std::string text = format_plan_file(sample());
  for (const char* field : {"\"input\"", "\"devices\"", "\"device\"", "\"arena\"", "\"lower_bound\"",
                            "\"arena_over_lower_bound\"", "\"strategy\"", "\"strategies\"", "\"seconds\"",
                            "\"allocations\"", "\"id\"", "\"name\"", "\"size\"", "\"offset\"", "\"lower\"",
                            "\"upper\""})
    EXPECT_NE(text.find(field), std::string::npos) << field;
}

TEST(PlanFile, OptionalFieldsTakeTheirDefaults) {
  const PlanFile p = parse_plan_file(
      R"({"version": 1, "devices": [{"device": 2, "arena": 512, "alignment": 256,
          "allocations": [{"id": 0, "size": 512, "offset": 0}]}]})",
      "min");
  ASSERT_EQ(p.devices.size(), 1u);
  EXPECT_FALSE(p.fingerprint);
  const PlannedAllocation& a = p.devices[0].allocations[0];
  EXPECT_EQ(a.requested, 512u);  // the size, when the input did not know the request
  EXPECT_EQ(a.name, "0");
}

TEST(PlanFile, WritesAndReadsAFile) {
  const fs::path path = fs::temp_directory_path() / ("luma-plan-file-" + std::to_string(getpid()) + ".json");
  write_plan_file(path.string(), sample());
  const PlanFile q = read_plan_file(path.string());
  EXPECT_EQ(q.devices.size(), 2u);
  fs::remove(path);
  EXPECT_THROW(write_plan_file("/nonexistent-dir/x/plan.json", sample()), std::runtime_error);
}

TEST(PlanFile, ADirectoryIsNamedAsOne) {
  try {
    read_plan_file("/");
    FAIL() << "a directory was read as a plan";
  } catch (const PlanFileError& e) {
    EXPECT_NE(std::string(e.what()).find("/: cannot read the plan file: is a directory"), std::string::npos)
        << e.what();
  }
}

struct Malformed {
  const char* name;
  std::string text;
  const char* message;  // must appear in the error
};

// A valid document with one substitution applied.
std::string valid() { return format_plan_file(sample()); }
std::string with(const std::string& from, const std::string& to) {
  std::string s = valid();
  const std::size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

class PlanFileMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(PlanFileMalformed, IsOneClearError) {
  const Malformed& m = GetParam();
  try {
    parse_plan_file(m.text, "bad.json");
    FAIL() << m.name << ": no error";
  } catch (const PlanFileError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("bad.json: ", 0), 0u) << what;
    EXPECT_NE(what.find(m.message), std::string::npos) << m.name << ": " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlanFileMalformed,
    ::testing::Values(
        Malformed{"not_json", "luma", "not valid JSON"},
        Malformed{"empty", "", "not valid JSON"},
        Malformed{"truncated", valid().substr(0, valid().size() / 2), "not valid JSON"},
        Malformed{"array", "[]", "a plan file is a JSON object, this is an array"},
        Malformed{"no_version", R"({"devices": []})", "no 'version' field"},
        Malformed{"version_2", with("\"version\": 1", "\"version\": 2"), "version: plan format 2"},
        Malformed{"version_string", with("\"version\": 1", "\"version\": \"1\""), "version: must be a non-negative integer, not a string"},
        Malformed{"format", with("\"luma-plan\"", "\"other\""), "format: is 'other'"},
        Malformed{"no_devices", R"({"version": 1})", "the field 'devices' is missing"},
        Malformed{"devices_object", R"({"version": 1, "devices": {}})", "devices: must be an array, not an object"},
        Malformed{"device_negative", with("\"device\": 0", "\"device\": -1"), "devices[0].device: -1 is negative"},
        Malformed{"device_huge", with("\"device\": 0", "\"device\": 70000"), "devices[0].device: 70000 is larger than 65535"},
        Malformed{"device_twice", with("\"device\": 1", "\"device\": 0"), "devices[1].device: device 0 has a plan already"},
        Malformed{"alignment_odd", with("\"alignment\": 256", "\"alignment\": 384"), "devices[0].alignment: 384 is not a power of two"},
        Malformed{"alignment_csv", with("\"alignment\": 256", "\"alignment\": 1"), "cannot be replayed"},
        Malformed{"arena_string", with("\"arena\": 3072", "\"arena\": \"big\""), "devices[0].arena: must be a non-negative integer, not a string"},
        Malformed{"arena_huge", with("\"arena\": 3072", "\"arena\": 9223372036854775808"), "devices[0].arena: 9223372036854775808 is larger than"},
        Malformed{"arena_float", with("\"arena\": 3072", "\"arena\": 3072.5"), "not a fractional number"},
        Malformed{"arena_overflow", with("\"arena\": 3072", "\"arena\": 1e400"), "bad.json"},
        Malformed{"id_order", with("\"id\": 1", "\"id\": 5"), "devices[0].allocations[1].id: is 5, expected 1"},
        Malformed{"no_size", with("\"size\": 1024,", ""), "devices[0].allocations[0]: the field 'size' is missing"},
        Malformed{"size_zero", with("\"size\": 1024", "\"size\": 0"), "devices[0].allocations[0].size: is 0"},
        Malformed{"offset_misaligned", with("\"offset\": 1024", "\"offset\": 300"), "devices[0].allocations[1].offset: 300 is not a multiple of the device's alignment 256"},
        Malformed{"offset_beyond", with("\"offset\": 1024", "\"offset\": 2048"), "devices[0].allocations[1].offset: 2048 + size 2048 ends beyond the arena of 3072 bytes"},
        Malformed{"requested_big", with("\"requested\": 1000", "\"requested\": 2000"), "devices[0].allocations[0].requested: 2000 is more than the 1024 bytes placed"},
        Malformed{"requested_zero", with("\"requested\": 1000", "\"requested\": 0"), "requested: is 0"},
        Malformed{"lower_upper", with("\"upper\": 9", "\"upper\": 3"), "devices[0].allocations[2].upper: 3 is below lower 6"},
        Malformed{"name_number", with("\"name\": \"b\"", "\"name\": 7"), "devices[1].allocations[1].name: must be a string, not an integer"},
        Malformed{"allocation_array", with("\"allocations\": [", "\"allocations\": [[], "), "devices[0].allocations[0]: must be an object, not an array"},
        Malformed{"periodic_sum", with("\"period\": 1,", "\"period\": 5,"), "devices[1].periodic: warmup 1 + period 5 must equal the 2 allocations listed"},
        Malformed{"periodic_zero", with("\"period\": 1,", "\"period\": 0,"), "devices[1].periodic.period: is 0"},
        Malformed{"periodic_type", with("\"periodic\": {", "\"periodic\": [{"), "bad.json"},
        Malformed{"fingerprint_arg", with("\"--epochs\"", "3"), "fingerprint.arguments[0]: must be a string, not an integer"},
        Malformed{"fingerprint_exe", with("\"executable\": \"./train\"", "\"executable\": null"), "fingerprint.executable: must be a string, not null"},
        Malformed{"fingerprint_device_twice", with("\"index\": 1", "\"index\": 0"), "fingerprint.devices[1].index: device 0 is listed twice"},
        Malformed{"strategies_seconds", with("\"seconds\": 0.5", "\"seconds\": \"x\""), "devices[0].strategies[0].seconds: must be a number"}),
    [](const ::testing::TestParamInfo<Malformed>& i) { return std::string(i.param.name); });

TEST(PlanFile, DeepNestingIsAnErrorNotACrash) {
  std::string deep(200000, '[');
  deep += std::string(200000, ']');
  EXPECT_THROW(parse_plan_file(deep, "deep.json"), PlanFileError);
  std::string open_only(1000000, '[');
  EXPECT_THROW(parse_plan_file(open_only, "deep.json"), PlanFileError);
}

TEST(PlanFile, RandomCorruptionEitherReadsOrIsAPlanFileError) {
  const std::string base = valid();
  std::mt19937_64 rng(7);
  int errors = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = static_cast<char>(rng() % 128); break;
        case 1: s.erase(at, 1 + rng() % 8); break;
        default: s.insert(at, 1, "0123456789[]{},:\"-e."[rng() % 20]); break;
      }
      // push_back, not s = "x": GCC 12 at -O3 reports a false -Wrestrict for
      // assigning a literal here (GCC bug 105329).
      if (s.empty()) s.push_back('x');
    }
    try {
      parse_plan_file(s, "fuzz.json");
    } catch (const PlanFileError&) {
      ++errors;
    }  // anything else escapes and fails the test
  }
  EXPECT_GT(errors, 1000);
}

TEST(PlanFile, AMissingOrOversizedFileIsRefusedBeforeReading) {
  try {
    read_plan_file("/nonexistent/plan.json");
    FAIL();
  } catch (const PlanFileError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/plan.json: cannot open the plan file"), std::string::npos)
        << e.what();
  }
  // A sparse file just over the limit: refused by its size, nothing is read or allocated.
  const fs::path path = fs::temp_directory_path() / ("luma-plan-huge-" + std::to_string(getpid()) + ".json");
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(plan::kMaxPlanFileBytes + 1)), 0);
    ::close(fd);
  }
  try {
    read_plan_file(path.string());
    FAIL();
  } catch (const PlanFileError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

}  // namespace
}  // namespace luma::core
