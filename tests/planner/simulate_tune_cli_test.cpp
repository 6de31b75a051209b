// simulate_tune_cli_test.cpp - `luma simulate --tune` end to end (LUMA_EXE): on small RMM
// logs written here whose best setting is known by construction (one 128 MiB segment
// serves 40 allocations of 3 MiB with one driver allocation; expandable segments reuse the
// pages of scattered free blocks, where a segment pinned by a live block cannot), every
// LUMA_CONF key is searched or named as kept fixed, the front is a Pareto front, X equals
// `luma simulate --min-limit`'s, the answer is the same every time and on any number of
// threads, --limit recommends a setting that completes under it, several runs (a snapshot
// among them) are judged together, bad options are named; and on the shipped torch_train
// sequence it recommends no worse than the defaults.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "luma_cli.h"
#include "settings/config.h"

namespace {

using namespace luma::test;

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

// 40 blocks of 3 MiB live at once: below every min_large_alloc searched, so they share
// large segments; 120 MiB fit one 128 MiB segment, and no setting needs fewer than one
// driver allocation.
fs::path one_segment_log() {
  std::vector<RmmOp> ops;
  for (std::uint32_t i = 0; i < 40; ++i) ops.push_back(alloc(i, 3 * MiB));
  for (std::uint32_t i = 0; i < 40; ++i) ops.push_back(release(i));
  return rmm_log("one_segment.csv", ops);
}

// Six blocks of 5 MiB, then all but the 4th and the 6th freed, then 18 MiB: no free block
// of the segments holds 18 MiB and the live blocks pin them, so ordinary segments grow
// past peak live; expandable segments map the 18 MiB over the freed pages (peak live).
fs::path scattered_log() {
  std::vector<RmmOp> ops;
  for (std::uint32_t i = 0; i < 6; ++i) ops.push_back(alloc(i, 5 * MiB));
  for (std::uint32_t i : {0u, 1u, 2u, 4u}) ops.push_back(release(i));
  ops.push_back(alloc(10, 18 * MiB));
  return rmm_log("scattered.csv", ops);
}

nlohmann::json tune(const std::string& args) { return json_of(run_luma("simulate --tune " + args + " --json", false)); }

TEST(SimulateTune, ALargerLargeSegmentSavesDriverAllocations) {
  const nlohmann::json j = tune(one_segment_log().string() + " --objective calls");
  const std::string conf = j["recommended_conf"];
  EXPECT_NE(conf.find("large_segment:128M"), std::string::npos) << conf;
  const nlohmann::json& run = j["runs"][0];
  EXPECT_EQ(run["recommended"]["driver_allocations"], 1);
  EXPECT_GT(run["default"]["driver_allocations"].get<int>(), 1);
  EXPECT_EQ(run["recommended"]["conf"], conf);
  EXPECT_EQ(j["tune"]["objective"], "calls");
  // The recommendation, replayed by plain simulate, gives the figures --tune reports.
  const nlohmann::json again =
      json_of(run_luma("simulate " + one_segment_log().string() + " --conf " + conf + " --repeat 3 --json", false));
  EXPECT_EQ(again["devices"][0]["runs"][0]["driver_allocations"], 1);
  EXPECT_EQ(again["devices"][0]["runs"][0]["peak_reserved_bytes"], run["recommended"]["peak_reserved_bytes"]);
}

TEST(SimulateTune, ExpandableSegmentsLowerThePeakOfScatteredFreeBlocks) {
  const fs::path log = scattered_log();
  // One copy of the window (in the warm copies the pages freed apart are mapped already).
  const nlohmann::json j = tune(log.string() + " --repeat 1");
  EXPECT_EQ(j["recommended_conf"], "expandable_segments:true");
  const nlohmann::json& run = j["runs"][0];
  EXPECT_EQ(run["recommended"]["peak_reserved_bytes"], run["peak_live_bytes"]);  // no allocator holds less
  EXPECT_GT(run["default"]["peak_reserved_bytes"].get<std::uint64_t>(), run["peak_live_bytes"].get<std::uint64_t>());
  EXPECT_GT(j["gain"]["peak_reserved"].get<double>(), 0.0);
  EXPECT_EQ(j["recommended"]["worst_peak_reserved_over_peak_live"], 1.0);

  const LumaRun text = run_luma("simulate --tune --repeat 1 " + log.string());
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("recommended: LUMA_CONF=expandable_segments:true\n"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("Pareto front: peak reserved against driver allocations per 100 allocations"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("gain over the defaults: peak reserved -"), std::string::npos) << text.output;
  // Every user setting outside the search is named, with why.
  EXPECT_NE(text.output.find("kept fixed:"), std::string::npos) << text.output;
  for (const char* key : {"memory_limit", "free_sync", "alignment", "release_on_oom", "caching", "memory_fraction"})
    EXPECT_NE(text.output.find(std::string("\n  ") + key + " "), std::string::npos) << key << "\n" << text.output;
}

// Every LUMA_CONF key is either searched or named as kept fixed (a key added to the
// settings must be placed in one or the other).
TEST(SimulateTune, EveryUserSettingIsSearchedOrKeptFixedWithAReason) {
  const nlohmann::json j = tune(scattered_log().string());
  std::set<std::string> named;
  for (const nlohmann::json& k : j["tune"]["searched"]) EXPECT_TRUE(named.insert(k["key"]).second) << k.dump();
  for (const nlohmann::json& k : j["tune"]["fixed"]) {
    EXPECT_TRUE(named.insert(k["key"]).second) << k.dump();
    EXPECT_FALSE(k["why"].get<std::string>().empty()) << k.dump();
  }
  std::set<std::string> keys;
  for (const std::string& k : luma::core::settings_keys())
    if (k.size() < 3 || k.substr(k.size() - 3) != "_mb") keys.insert(k);
  EXPECT_EQ(named, keys);
}

TEST(SimulateTune, TheFrontIsAParetoFrontHoldingTheRecommendation) {
  for (const fs::path& log : {scattered_log(), one_segment_log()}) {
    const nlohmann::json j = tune(log.string());
    const nlohmann::json& front = j["front"];
    ASSERT_GE(front.size(), 1u);
    int recommended = 0;
    for (std::size_t a = 0; a < front.size(); ++a) {
      recommended += front[a]["recommended"].get<bool>();
      EXPECT_TRUE(front[a]["completes"].get<bool>());
      for (std::size_t b = 0; b < front.size(); ++b) {
        if (a == b) continue;
        const double pa = front[a]["worst_peak_reserved_over_peak_live"];
        const double pb = front[b]["worst_peak_reserved_over_peak_live"];
        const double ca = front[a]["worst_driver_allocations_per_100"], cb = front[b]["worst_driver_allocations_per_100"];
        EXPECT_FALSE(pa <= pb && ca <= cb) << "front point " << a << " dominates or equals " << b << ": " << front.dump();
      }
    }
    EXPECT_EQ(recommended, 1) << front.dump();
    // The objective's best is the least peak of the front.
    EXPECT_EQ(front[0]["recommended"], true) << front.dump();
  }
}

TEST(SimulateTune, XForTheDefaultsAndTheRecommendationIsMinLimits) {
  const fs::path log = scattered_log();
  const nlohmann::json j = tune(log.string() + " --limit-step 0.01 --repeat 1");
  const nlohmann::json& run = j["runs"][0];
  const nlohmann::json def =
      json_of(run_luma("simulate " + log.string() + " --min-limit --limit-step 0.01 --json", false));
  EXPECT_EQ(run["default"]["x"]["bound_bytes"], def["devices"][0]["runs"][0]["limit_scan"]["bound_bytes"]);
  EXPECT_EQ(run["default"]["x"]["least_completing_bytes"],
            def["devices"][0]["runs"][0]["limit_scan"]["least_completing_bytes"]);
  EXPECT_EQ(run["default"]["x"]["step_bytes"], def["devices"][0]["runs"][0]["limit_scan"]["step_bytes"]);
  const std::string conf = j["recommended_conf"];
  const nlohmann::json rec =
      json_of(run_luma("simulate " + log.string() + " --conf " + conf + " --min-limit --limit-step 0.01 --json", false));
  EXPECT_EQ(run["recommended"]["x"]["bound_bytes"], rec["devices"][0]["runs"][0]["limit_scan"]["bound_bytes"]);
  // Here expandable segments need no more than peak live at any limit.
  EXPECT_EQ(run["recommended"]["x"]["bound_bytes"], run["peak_live_bytes"]);
  EXPECT_GT(j["gain"]["x"].get<double>(), 0.0);
}

// A step that alternates two huge requests: the defaults give a segment back and reserve
// another at every one of them (release before growth, huge blocks kept whole), in every
// copy; --tune's peak objective, with the driver budget, recommends a setting whose warm
// copies make no driver call at the same peak.
fs::path churning_log() {
  std::vector<RmmOp> ops;
  std::uint32_t id = 0;
  for (int i = 0; i < 20; ++i)
    for (std::uint64_t bytes : {200 * MiB, 330 * MiB}) {
      ops.push_back(alloc(id, bytes));
      ops.push_back(release(id++));
    }
  return rmm_log("churning.csv", ops);
}

TEST(SimulateTune, TheRecommendationSpendsNoMoreThanTheDriverBudgetPerWarmCopy) {
  const nlohmann::json j = tune(churning_log().string());
  EXPECT_EQ(j["tune"]["repeat"], 3);
  EXPECT_EQ(j["tune"]["driver_budget_ns_per_copy"], 1000000);
  const nlohmann::json& run = j["runs"][0];
  EXPECT_GT(run["default"]["warm_driver_time_per_copy_ns"].get<std::uint64_t>(), 1000000u) << run.dump();
  EXPECT_GT(run["default"]["warm_driver_allocations_per_100"].get<double>(), 50.0) << run.dump();
  EXPECT_EQ(run["recommended"]["warm_driver_time_per_copy_ns"], 0) << run.dump();
  EXPECT_LE(run["recommended"]["peak_reserved_bytes"].get<std::uint64_t>(),
            run["default"]["peak_reserved_bytes"].get<std::uint64_t>());
  EXPECT_FALSE(j["recommended"]["over_driver_budget"].get<bool>());
  // The warm figures are plain simulate's with the same copies.
  const nlohmann::json again = json_of(run_luma("simulate " + churning_log().string() + " --conf '" +
                                                    j["recommended_conf"].get<std::string>() + "' --repeat 3 --json",
                                                false));
  EXPECT_EQ(again["devices"][0]["runs"][0]["warm_copies"]["driver_time_estimated_ns"], 0);
  // A budget of 0 ns and the driver-time objective agree here: no warm driver call.
  EXPECT_EQ(tune(churning_log().string() + " --driver-budget 0")["runs"][0]["recommended"]["warm_driver_time_per_copy_ns"], 0);
  EXPECT_EQ(tune(churning_log().string() + " --objective driver-time")["tune"]["objective"], "driver-time");
}

TEST(SimulateTune, TheAnswerIsTheSameEveryTimeOnAnyNumberOfThreads) {
  const std::string logs = scattered_log().string() + " " + one_segment_log().string();
  const LumaRun a = run_luma("simulate --tune " + logs);
  const LumaRun b = run_luma("simulate --tune " + logs);
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  const LumaRun one = run_luma("simulate --tune " + logs + " --json --jobs 1", false);
  const LumaRun three = run_luma("simulate --tune " + logs + " --json --jobs 3", false);
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(one.output, three.output);
}

TEST(SimulateTune, ALimitRecommendsASettingThatCompletesUnderIt) {
  const fs::path log = scattered_log();
  // The defaults run out between 1.1 and 1.65 x peak live (30 MiB) here.
  const nlohmann::json j = tune(log.string() + " --limit 40M");
  EXPECT_EQ(j["tune"]["limit_bytes"], 40 * MiB);
  const std::string conf = j["recommended_conf"];
  EXPECT_NE(conf.find("memory_limit:40M"), std::string::npos) << conf;
  const nlohmann::json& run = j["runs"][0];
  EXPECT_EQ(run["default"]["completed"], false);
  EXPECT_EQ(run["recommended"]["completed"], true);
  EXPECT_LE(run["recommended"]["peak_reserved_bytes"].get<std::uint64_t>(), 40 * MiB);
  for (const nlohmann::json& p : j["front"]) EXPECT_TRUE(p["completes"].get<bool>()) << p.dump();
  // Plain simulate agrees: under the recommendation (its limit included) the run completes.
  const nlohmann::json again = json_of(run_luma("simulate " + log.string() + " --conf " + conf + " --repeat 3 --json", false));
  EXPECT_EQ(again["devices"][0]["runs"][0]["completed"], true);
  // Below peak live nothing can complete: said, exit 1.
  const LumaRun none = run_luma("simulate --tune " + log.string() + " --limit 20M");
  EXPECT_EQ(none.code, 1) << none.output;
  EXPECT_NE(none.output.find("no setting searched completes every run under memory_limit:20M"), std::string::npos)
      << none.output;
}

TEST(SimulateTune, SeveralRunsAreJudgedByTheWorstAndEachGetsItsFigures) {
  const fs::path a = scattered_log(), b = one_segment_log();
  const nlohmann::json j = tune(a.string() + " " + b.string() + " --objective calls");
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["input"], a.string());
  EXPECT_EQ(j["runs"][1]["input"], b.string());
  const std::string conf = j["recommended_conf"];
  // Each run's figures for the recommendation are what plain simulate gives it.
  double worst = 0;
  for (const nlohmann::json& run : j["runs"]) {
    const nlohmann::json s =
        json_of(run_luma("simulate " + run["input"].get<std::string>() + " --conf '" + conf + "' --repeat 3 --json", false));
    EXPECT_EQ(run["recommended"]["driver_allocations"], s["devices"][0]["runs"][0]["driver_allocations"]);
    EXPECT_EQ(run["recommended"]["peak_reserved_bytes"], s["devices"][0]["runs"][0]["peak_reserved_bytes"]);
    worst = std::max(worst, run["recommended"]["driver_allocations_per_100"].get<double>());
  }
  EXPECT_EQ(j["recommended"]["worst_driver_allocations_per_100"].get<double>(), worst);
  // Each run's own optimum is no better on the two together than the joint recommendation.
  for (const fs::path& alone : {a, b}) {
    const std::string own = tune(alone.string() + " --objective calls")["recommended_conf"];
    double own_worst = 0;
    for (const fs::path& run : {a, b}) {
      const nlohmann::json s = json_of(run_luma("simulate " + run.string() + " --conf '" + own + "' --repeat 3 --json", false));
      own_worst = std::max(own_worst, 100.0 * s["devices"][0]["runs"][0]["driver_allocations"].get<double>() /
                                          s["devices"][0]["runs"][0]["allocations_served"].get<double>());
    }
    EXPECT_LE(worst, own_worst) << own;
  }
  const LumaRun text = run_luma("simulate --tune " + a.string() + " " + b.string());
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("run 2: " + b.string()), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("over the 2 runs (the worst run's figure)"), std::string::npos) << text.output;
}

TEST(SimulateTune, ASnapshotIsARunLikeAnyOther) {
  const std::string data = std::string(LUMA_SNAPSHOT_DATA_DIR);
  // make_snapshots.py's second device: 25 MiB live; PyTorch reserved 40 MiB at the most.
  // Its side stream puts it on the fenced path, as libluma.so would take it.
  const nlohmann::json j = tune(data + "/full_p4.pickle --device 1");
  ASSERT_EQ(j["runs"].size(), 1u);
  const nlohmann::json& run = j["runs"][0];
  EXPECT_EQ(run["format"], "PyTorch memory snapshot");
  EXPECT_EQ(run["device"], 1);
  EXPECT_EQ(run["recorded_peak_reserved_bytes"], 40 * MiB);
  EXPECT_EQ(run["free_paths"][0]["path"], "fenced");
  // With a log: a window that did not see its run's start is said. (Its peak live is
  // 3,877 B against a 2 MiB segment: a coarse step keeps X's scan short.)
  const std::string window = data + "/window_p4.pickle";
  const nlohmann::json both = tune(window + " " + scattered_log().string() + " --limit-step 0.5");
  ASSERT_EQ(both["runs"].size(), 2u);
  EXPECT_EQ(both["runs"][0]["incomplete"], true);
  EXPECT_EQ(both["runs"][0]["blocks_before_window"], 2);
  EXPECT_TRUE(both["runs"][1]["recorded_peak_reserved_bytes"].is_null());
  const LumaRun text = run_luma("simulate --tune " + window + " --limit-step 0.5");
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("the trace is incomplete: 2 blocks were live when the recording window began"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("PyTorch's recorded peak reserved (B)"), std::string::npos) << text.output;
}

TEST(SimulateTune, BadOptionsAreUsageErrorsNamingThem) {
  const std::string log = scattered_log().string();
  const struct {
    std::string args, named;
  } cases[] = {
      {"--tune " + log + " --objective fastest", "--objective"},
      {"--tune " + log + " --limit lots", "--limit"},
      {"--tune " + log + " --limit 0", "--limit"},
      {"--tune " + log + " --conf large_segment:64M", "--conf"},
      {"--tune " + log + " --min-limit", "--min-limit"},
      {"--tune " + log + " --jobs 0", "--jobs"},
      {log + " --limit 1G", "--limit needs --tune"},
      {log + " --objective calls", "--objective needs --tune"},
      {log + " " + log, "--tune"},
  };
  for (const auto& c : cases) {
    const LumaRun r = run_luma("simulate " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.named), std::string::npos) << c.args << ": " << r.output;
  }
  const LumaRun missing = run_luma("simulate --tune " + log + " " + scratch("missing.csv").string());
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_NE(missing.output.find("missing.csv"), std::string::npos) << missing.output;
}

// The whole search on a real recorded run: it finishes (the time is for docs/simulate.md,
// not asserted) and recommends no worse than the defaults under the objective.
TEST(SimulateTune, OnTorchTrainItRecommendsNoWorseThanTheDefaults) {
  const nlohmann::json j = tune(torch_train().string());
  EXPECT_EQ(j["runs"][0]["allocations"], 30612);
  // The objective: within the driver budget first, then the least peak.
  const bool rec_over = j["recommended"]["over_driver_budget"], def_over = j["default"]["over_driver_budget"];
  EXPECT_LE(rec_over, def_over);
  if (rec_over == def_over) {
    EXPECT_LE(j["recommended"]["worst_peak_reserved_over_peak_live"].get<double>(),
              j["default"]["worst_peak_reserved_over_peak_live"].get<double>());
  }
  EXPECT_NE(j["runs"][0]["default"]["x"]["bound_bytes"], 0);
  EXPECT_NE(j["runs"][0]["recommended"]["x"]["bound_bytes"], 0);
  EXPECT_GE(j["tune"]["settings_tried"].get<int>(), 100);
  const std::string conf = j["recommended_conf"];
  const nlohmann::json again =
      json_of(run_luma("simulate " + torch_train().string() + " --conf '" + conf + "' --repeat 3 --json", false));
  EXPECT_EQ(again["devices"][0]["runs"][0]["peak_reserved_bytes"], j["runs"][0]["recommended"]["peak_reserved_bytes"]);
}

}  // namespace
