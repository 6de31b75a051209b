// stats_format_test.cpp - the statistics as a memory_summary-style table and as JSON:
// rows, units and widths of the table; names, values, PyTorch keys and caller extras of
// the JSON, which must parse.
#include "stats/stats_format.h"

#include <sstream>

#include <gtest/gtest.h>

#include "allocator_test_util.h"
#include <nlohmann/json.hpp>

#include "allocator/caching_allocator.h"
#include "host_device.h"

namespace luma::core {
namespace {

DeviceStats sample_stats(int device) {
  HostDevice dev;
  CachingAllocator a(dev, device, testing::pytorch_placement());
  void* big = a.allocate(30 * MiB).ptr;
  void* small = a.allocate(1000).ptr;
  a.allocate(3 * MiB);
  a.free(big);
  a.free(small);
  a.allocate(2000);
  DeviceStats s = a.stats();
  a.release_all();
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(FormatBytes, PicksTheLargestUnit) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(20 * MiB), "20.0 MiB");
  EXPECT_EQ(format_bytes(3 * GiB), "3.0 GiB");
}

TEST(StatsText, HasEveryRowOfTheSummaryInFixedWidth) {
  const std::string text = format_stats_text({sample_stats(0), sample_stats(1)}, {StatsExtra::text("free_sync", "event")});
  for (const char* row : {"Allocated memory", "Active memory", "Requested memory", "GPU reserved memory",
                          "Non-releasable memory", "Allocations", "Active allocs", "GPU reserved segments",
                          "Non-releasable allocs", "from large pool", "from small pool", "Cur Usage",
                          "Peak Usage", "Tot Alloc", "Tot Freed", "Real driver allocations",
                          "Real driver frees", "cache absorbed", "cudaMalloc retries", "CUDA OOMs"})
    EXPECT_NE(text.find(row), std::string::npos) << row;
  EXPECT_NE(text.find("device ID 0"), std::string::npos);
  EXPECT_NE(text.find("device ID 1"), std::string::npos);
  EXPECT_EQ(text.rfind("free_sync: event\n", 0), 0u);
  for (const std::string& line : lines_of(text)) {
    if (line.rfind("free_sync", 0) == 0) continue;
    EXPECT_EQ(line.size(), 77u) << "'" << line << "'";
  }
}

TEST(StatsText, ShowsValuesInHumanUnits) {
  const DeviceStats s = sample_stats(0);
  const std::string text = format_stats_text({s});
  // Reserved: 2 MiB small + 30 MiB + 20 MiB large = 52 MiB, shown in KiB as PyTorch does (its unit steps up only at 768 units).
  bool found = false;
  for (const std::string& line : lines_of(text))
    if (line.rfind("| GPU reserved memory", 0) == 0) {
      found = true;
      EXPECT_NE(line.find(" 53248 KiB"), std::string::npos) << line;
    }
  EXPECT_TRUE(found);
  // Allocations: 4 allocated, 2 freed, 2 current.
  for (const std::string& line : lines_of(text))
    if (line.rfind("| Allocations ", 0) == 0) {
      EXPECT_EQ(line, "| Allocations           |       2    |       3    |       4    |       2    |");
    }
  EXPECT_NE(text.find("Allocation calls the cache absorbed"), std::string::npos);
}

TEST(StatsText, SaysSoWhenThereIsNoDevice) {
  EXPECT_NE(format_stats_text({}).find("no device"), std::string::npos);
}

// The allocations luma forwards: a row per path that had a call, none when no path had.
TEST(ForwardedText, ListsThePathsThatHadCalls) {
  const std::vector<ForwardedPathStats> paths = {
      {"stream-ordered pool", 50, 3 * MiB, 49}, {"managed", 0, 0, 0}, {"pinned host", 0, 0, 2}};
  const std::string t = format_forwarded_text(paths);
  EXPECT_NE(t.find("Forwarded allocation paths"), std::string::npos) << t;
  EXPECT_NE(t.find("stream-ordered pool"), std::string::npos) << t;
  EXPECT_NE(t.find("3.0 MiB"), std::string::npos) << t;
  EXPECT_NE(t.find("pinned host"), std::string::npos) << t;  // a free alone is a call
  EXPECT_EQ(t.find("managed"), std::string::npos) << t;
  EXPECT_EQ(format_forwarded_text({{"managed", 0, 0, 0}}), "");
}

TEST(ForwardedJson, EveryPathWithItsCounters) {
  const nlohmann::json j = nlohmann::json::parse(
      format_forwarded_json({{"a \"quoted\" path", 2, 4096, 1}, {"managed", 0, 0, 0}}));
  ASSERT_EQ(j.size(), 2u) << j.dump();
  EXPECT_EQ(j[0]["path"], "a \"quoted\" path");
  EXPECT_EQ(j[0]["alloc_calls"], 2);
  EXPECT_EQ(j[0]["alloc_bytes"], 4096);
  EXPECT_EQ(j[0]["free_calls"], 1);
  EXPECT_EQ(j[1]["alloc_calls"], 0);
  EXPECT_EQ(nlohmann::json::parse(format_forwarded_json({})), nlohmann::json::array());
}

TEST(StatsJson, KeepsReferenceNamesAndPyTorchKeys) {
  const DeviceStats s = sample_stats(2);
  const std::string text = format_stats_json(
      {s}, {StatsExtra::text("free_sync", "ev\"ent\n"), StatsExtra::number("pid", 4242), StatsExtra::flag("caching", true)});
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  EXPECT_EQ(j["free_sync"], "ev\"ent\n");
  EXPECT_EQ(j["pid"], 4242);
  EXPECT_EQ(j["caching"], true);
  ASSERT_EQ(j["devices"].size(), 1u);
  const auto& d = j["devices"][0];
  const ReferenceStats r = reference_view(s);
  EXPECT_EQ(d["device"], 2);
  EXPECT_EQ(d["allocated_bytes"], r.allocated_bytes);
  EXPECT_EQ(d["reserved_bytes"], r.reserved_bytes);
  EXPECT_EQ(d["peak_bytes"], r.peak_bytes);
  EXPECT_EQ(d["live_blocks"], r.live_blocks);
  EXPECT_EQ(d["free_blocks"], r.free_blocks);
  EXPECT_EQ(d["segments"], r.segments);
  EXPECT_EQ(d["cuda_malloc_calls"], r.cuda_malloc_calls);
  EXPECT_EQ(d["cuda_free_calls"], r.cuda_free_calls);
  EXPECT_EQ(d["alloc_calls"], s.alloc_calls);
  EXPECT_EQ(d["cache_absorbed_calls"], s.alloc_calls - s.num_device_alloc);
  const auto& m = d["memory_stats"];
  EXPECT_EQ(m["allocated_bytes.all.current"], s.allocated_bytes.all.current);
  EXPECT_EQ(m["allocated_bytes.small_pool.peak"], s.allocated_bytes.pool[0].peak);
  EXPECT_EQ(m["reserved_bytes.large_pool.allocated"], s.reserved_bytes.pool[1].allocated);
  EXPECT_EQ(m["inactive_split_bytes.all.freed"], s.inactive_split_bytes.all.freed);
  EXPECT_EQ(m["segment.all.current"], s.segment.all.current);
  EXPECT_EQ(m["num_device_alloc"], s.num_device_alloc);
  EXPECT_EQ(m["num_ooms"], 0);
  EXPECT_EQ(m.size(), 9u * 3u * 4u + 4u);
}

TEST(StatsJson, ManyDevicesAndNoneAreValid) {
  nlohmann::json j = nlohmann::json::parse(format_stats_json({sample_stats(0), sample_stats(1)}));
  EXPECT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][1]["device"], 1);
  j = nlohmann::json::parse(format_stats_json({}));
  EXPECT_TRUE(j["devices"].empty());
}

// Every call counter of stats.h reaches both outputs with its own value: the JSON under its
// name, the text on its labelled line (or in the header, for the two labelled "").
TEST(StatsCounters, EveryCallCounterIsInTheJsonAndTheText) {
  DeviceStats s;
  std::uint64_t v = 1000;
#define LUMA_SET(name, ...) s.name = v++;
  LUMA_CALL_COUNTERS(LUMA_SET)
#undef LUMA_SET
  const auto j = nlohmann::json::parse(format_stats_json({s}, {}));
  const std::string text = format_stats_text({s}, {});
  v = 1000;
#define LUMA_CHECK(name, line, label)                                                   \
  EXPECT_EQ(j["devices"][0][#name].get<std::uint64_t>(), v) << #name;                   \
  if (std::string_view(label).empty()) {                                                \
    EXPECT_NE(text.find(": " + std::to_string(v)), std::string::npos) << #name;         \
  } else {                                                                              \
    const std::size_t at = text.find(label);                                            \
    ASSERT_NE(at, std::string::npos) << #name;                                          \
    const std::string line_text = text.substr(at, text.find('\n', at) - at);           \
    EXPECT_NE(line_text.find(" " + std::to_string(v) + " |"), std::string::npos) << line_text; \
  }                                                                                     \
  ++v;
  LUMA_CALL_COUNTERS(LUMA_CHECK)
#undef LUMA_CHECK
  EXPECT_EQ(j["devices"][0]["memory_stats"]["num_ooms"].get<std::uint64_t>(), s.num_ooms);
}

}  // namespace
}  // namespace luma::core
