// replay_e2e_test.cpp - a program run on its captured plan, end to end, as a user would:
// the test workload's `train` mode (tests/programs/modes_train.cpp) recorded under
// LD_PRELOAD=libluma.so with LUMA_TRACE, planned with `luma plan`, then run again with
// LUMA_PLAN. Judged by the program's own output (per-step checksums; it checks its
// weights after every step), the stand-in driver's counters of real allocations
// (LUMA_FAKE_COUNTERS), luma's JSON statistics ("plan") and the address of every
// allocation (LUMA_TEST_ADDR_LOG) against the plan's offsets.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "subprocess.h"

namespace luma::integration {
namespace {

using nlohmann::json;

struct Paths {
  std::string lib = setting("LUMA_IT_LIB");
  std::string fake_dir = setting("LUMA_IT_FAKE_DIR");
  std::string luma = setting("LUMA_IT_LUMA");
  std::string prog(const std::string& flavour) const {
    const std::string name = "LUMA_IT_PROG_" + flavour;
    return setting(name.c_str());
  }
};

const Paths& paths() {
  static const Paths p;
  return p;
}

#define NEED(x) \
  if ((x).empty()) GTEST_SKIP() << #x " not built"

std::string describe(const Result& r) {
  return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.signal) +
         "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

// One run of `prog train` under luma.
struct TrainRun {
  Result result;
  json stats;     // luma's JSON statistics
  json counters;  // the stand-in's counters
  std::vector<std::uint64_t> addresses;  // every allocation's address, in order
};

struct TrainOptions {
  std::string flavour = "shared";
  int steps = 5;
  std::string plan;   // LUMA_PLAN ("": none)
  std::string trace;  // LUMA_TRACE ("": none)
  int diverge_at = -1;
  std::vector<std::string> args = {"train"};
  std::vector<std::string> wrapper;  // e.g. {"setarch", "-R"}
};

json parse_or_null(const std::string& text) {
  if (text.empty()) return nullptr;
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

TrainRun train(const std::string& dir, const TrainOptions& o) {
  static int serial = 0;
  const std::string tag = dir + "/run" + std::to_string(++serial);
  Env env = clean_env({{"LD_PRELOAD", paths().lib},
                       {"LD_LIBRARY_PATH", paths().fake_dir},
                       {"LUMA_STATS", "json"},
                       {"LUMA_STATS_FILE", tag + ".stats.json"},
                       {"LUMA_FAKE_COUNTERS", tag + ".counters.json"},
                       {"LUMA_TEST_ADDR_LOG", tag + ".addresses"},
                       {"LUMA_TEST_STEPS", std::to_string(o.steps)}});
  if (!o.plan.empty()) env["LUMA_PLAN"] = o.plan;
  if (!o.trace.empty()) env["LUMA_TRACE"] = o.trace;
  if (o.diverge_at >= 0) env["LUMA_TEST_DIVERGE_AT"] = std::to_string(o.diverge_at);
  std::vector<std::string> argv = o.wrapper;
  argv.push_back(paths().prog(o.flavour));
  argv.insert(argv.end(), o.args.begin(), o.args.end());
  TrainRun r;
  r.result = run(argv, env);
  r.stats = parse_or_null(read_file(tag + ".stats.json"));
  r.counters = parse_or_null(read_file(tag + ".counters.json"));
  std::istringstream in(read_file(tag + ".addresses"));
  for (std::uint64_t a = 0; in >> a;) r.addresses.push_back(a);
  return r;
}

// The program's own results: every line but the last (which holds the addresses' hash
// and the time per step), i.e. each step's checksum.
std::string results(const Result& r) {
  std::string out = r.out;
  const std::size_t last = out.rfind("train: ", out.size() >= 2 ? out.size() - 2 : 0);
  if (last != std::string::npos) out.resize(last);
  return out;
}

std::uint64_t real_allocations(const TrainRun& r, int device) {
  return r.counters["devices"][device]["mem_alloc_calls"].get<std::uint64_t>();
}

const json& plan_device(const TrainRun& r, int device) {
  static const json none;
  if (!r.stats.is_object() || !r.stats.contains("plan")) return none;
  for (const json& d : r.stats["plan"]["devices"])
    if (d.value("device", -1) == device) return d;
  return none;
}

// Captures `steps` steps of `flavour` and plans them (periodic or not); returns the plan.
std::string capture_and_plan(const std::string& dir, const std::string& flavour, int steps,
                             bool periodic, TrainRun* capture = nullptr) {
  TrainOptions o;
  o.flavour = flavour;
  o.steps = steps;
  o.trace = dir + "/capture.trace";
  TrainRun c = train(dir, o);
  EXPECT_EQ(c.result.exit_code, 0) << describe(c.result);
  const std::string plan = dir + (periodic ? "/periodic.json" : "/plan.json");
  std::vector<std::string> argv = {paths().luma, "plan", "-o", plan};
  if (periodic) argv.push_back("--periodic");
  argv.push_back(o.trace);
  Result p = run(argv, clean_env());
  EXPECT_EQ(p.exit_code, 0) << describe(p);
  if (capture != nullptr) *capture = std::move(c);
  return plan;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) ++n;
  return n;
}

// ---- capture, plan, replay, for every kind of program ---------------------------------

class ReplayFlavour : public ::testing::TestWithParam<const char*> {};

TEST_P(ReplayFlavour, ReplayGivesTheSameResultsFromOneRealAllocationAtThePlannedOffsets) {
  NEED(paths().luma);
  NEED(paths().prog(GetParam()));
  const std::string dir = temp_dir();
  TrainRun capture;
  const std::string plan = capture_and_plan(dir, GetParam(), 5, false, &capture);
  ASSERT_GT(real_allocations(capture, 0), 1u) << "the caching run should need several segments";

  TrainOptions o;
  o.flavour = GetParam();
  o.plan = plan;
  TrainRun a = train(dir, o);
  TrainRun b = train(dir, o);
  for (const TrainRun* r : {&a, &b}) {
    ASSERT_EQ(r->result.exit_code, 0) << describe(r->result);
    EXPECT_EQ(results(r->result), results(capture.result));
    EXPECT_EQ(real_allocations(*r, 0), 1u) << r->counters.dump();
    EXPECT_EQ(real_allocations(*r, 1), 0u) << r->counters.dump();
    ASSERT_TRUE(r->stats.contains("plan")) << r->stats.dump();
    EXPECT_EQ(r->stats["plan"]["accepted"], true);
    EXPECT_EQ(r->stats["plan"]["served_from_plan"], true);
    EXPECT_EQ(r->stats["plan"]["divergences"], 0);
    const json& d = plan_device(*r, 0);
    EXPECT_EQ(d["served"], d["planned_allocations"]) << d.dump();
    EXPECT_EQ(d["real_allocations"], 1);
    EXPECT_EQ(r->result.err.find("warning"), std::string::npos) << r->result.err;
  }

  // The k-th allocation at the k-th planned offset: address - offset is one base (the
  // arena's), in both runs; the offsets are the same in both runs.
  const json p = json::parse(read_file(plan));
  const json& allocations = p["devices"][0]["allocations"];
  ASSERT_EQ(a.addresses.size(), allocations.size());
  ASSERT_EQ(b.addresses.size(), allocations.size());
  for (const TrainRun* r : {&a, &b}) {
    const std::uint64_t base = r->addresses[0] - allocations[0]["offset"].get<std::uint64_t>();
    for (std::size_t k = 0; k < allocations.size(); ++k)
      ASSERT_EQ(r->addresses[k] - base, allocations[k]["offset"].get<std::uint64_t>())
          << "allocation " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKind, ReplayFlavour,
                         ::testing::Values("static", "shared", "dlopen", "driver"));

// With address-space randomization off (as for a debugger, or `setarch -R`), two replayed
// runs hand the program the very same addresses: the one real allocation lands at the same
// place, and every block is at its planned offset from it.
TEST(PlanReplay, TwoReplayedRunsGiveIdenticalAddresses) {
  NEED(paths().luma);
  NEED(paths().prog("shared"));
  const std::string dir = temp_dir();
  const std::string plan = capture_and_plan(dir, "shared", 5, false);
  Result probe = run({"setarch", "-R", "true"}, clean_env());
  if (probe.exit_code != 0) GTEST_SKIP() << "setarch -R is not available here: " << describe(probe);
  TrainOptions o;
  o.plan = plan;
  o.wrapper = {"setarch", "-R"};
  TrainRun a = train(dir, o);
  TrainRun b = train(dir, o);
  ASSERT_EQ(a.result.exit_code, 0) << describe(a.result);
  ASSERT_EQ(b.result.exit_code, 0) << describe(b.result);
  EXPECT_EQ(plan_device(a, 0)["served"], plan_device(a, 0)["planned_allocations"]);
  ASSERT_FALSE(a.addresses.empty());
  EXPECT_EQ(a.addresses, b.addresses);
}

// ---- divergence ------------------------------------------------------------------------

TEST(PlanReplay, ADivergenceInTheMiddleFallsBackToTheCacheWithDataIntact) {
  NEED(paths().luma);
  NEED(paths().prog("shared"));
  const std::string dir = temp_dir();
  TrainRun capture;
  const std::string plan = capture_and_plan(dir, "shared", 5, false, &capture);
  TrainOptions o;
  o.plan = plan;
  o.diverge_at = 2;  // step 2 asks for 4 KiB more in its first activation
  TrainRun r = train(dir, o);
  // The program checks its weights (placed from the plan before the divergence) after
  // every step and the checksums cover every activation: same results, nothing corrupted.
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(results(r.result), results(capture.result));
  // One line, naming the sequence number and the reason. Allocation 17: 3 weights, then
  // 7 per step, so step 2's first activation.
  EXPECT_EQ(count_lines_with(r.result.err, "LUMA_PLAN"), 1) << r.result.err;
  EXPECT_NE(r.result.err.find("device 0 left its plan: allocation 17 asked for 5096 bytes "
                              "where the plan has 1000"),
            std::string::npos)
      << r.result.err;
  EXPECT_EQ(r.stats["plan"]["divergences"], 1);
  EXPECT_EQ(r.stats["plan"]["served_from_plan"], false);
  const json& d = plan_device(r, 0);
  EXPECT_EQ(d["served"], 17);
  EXPECT_EQ(d["first_divergence"]["reason"], "size_mismatch") << d.dump();
  EXPECT_EQ(d["first_divergence"]["sequence"], 17) << d.dump();
  EXPECT_GT(d["cache_allocations"].get<int>(), 0);
  // The arena plus the cache's own segments, all counted.
  EXPECT_EQ(real_allocations(r, 0), d["real_allocations"].get<std::uint64_t>());
  EXPECT_GT(real_allocations(r, 0), 1u);
  // The statistics count the divergence and the program's memory was all given back.
  EXPECT_EQ(r.stats["devices"][0]["live_blocks"], 0) << r.stats.dump();
}

TEST(PlanReplay, MoreAllocationsThanPlannedFallBackAtTheFirstUnplannedOne) {
  NEED(paths().luma);
  NEED(paths().prog("shared"));
  const std::string dir = temp_dir();
  const std::string plan = capture_and_plan(dir, "shared", 3, false);
  TrainOptions o;
  o.plan = plan;
  o.steps = 6;
  TrainRun r = train(dir, o);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(count_lines_with(r.result.err, "LUMA_PLAN"), 1) << r.result.err;
  EXPECT_NE(r.result.err.find("allocation 24 is beyond the plan's 24 allocations"),
            std::string::npos)
      << r.result.err;
  EXPECT_EQ(plan_device(r, 0)["first_divergence"]["reason"], "beyond_plan");
}

// ---- a plan for another run ------------------------------------------------------------

TEST(PlanReplay, APlanForAnotherProgramIsRefusedWithOneClearLine) {
  NEED(paths().luma);
  NEED(paths().prog("shared"));
  NEED(paths().prog("driver"));
  const std::string dir = temp_dir();
  const std::string plan = capture_and_plan(dir, "shared", 3, false);

  TrainOptions other;
  other.flavour = "driver";  // another executable
  other.plan = plan;
  other.steps = 3;
  TrainRun r = train(dir, other);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(count_lines_with(r.result.err, "LUMA_PLAN"), 1) << r.result.err;
  EXPECT_NE(r.result.err.find("refused '" + plan + "': made for another run (the plan was made "
                              "for executable 'prog_shared', this is 'prog_driver')"),
            std::string::npos)
      << r.result.err;
  EXPECT_EQ(r.stats["plan"]["accepted"], false);
  EXPECT_GT(real_allocations(r, 0), 1u);  // the caching allocator served it

  TrainOptions args;  // the same executable with other arguments
  args.plan = plan;
  args.args = {"loop", "10", "4096"};
  TrainRun l = train(dir, args);
  ASSERT_EQ(l.result.exit_code, 0) << describe(l.result);
  EXPECT_EQ(count_lines_with(l.result.err, "LUMA_PLAN"), 1) << l.result.err;
  EXPECT_NE(l.result.err.find("made for another run"), std::string::npos) << l.result.err;
  EXPECT_EQ(l.stats["plan"]["accepted"], false);
}

TEST(PlanReplay, AnUnreadablePlanIsOneLineAndTheProgramRunsOn) {
  NEED(paths().prog("shared"));
  const std::string dir = temp_dir();
  TrainOptions o;
  o.plan = dir + "/no-such-plan.json";
  o.steps = 2;
  TrainRun r = train(dir, o);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(count_lines_with(r.result.err, "LUMA_PLAN"), 1) << r.result.err;
  EXPECT_NE(r.result.err.find("no-such-plan.json"), std::string::npos) << r.result.err;
  EXPECT_EQ(r.stats["plan"]["accepted"], false);
  EXPECT_EQ(r.stats["devices"][0]["alloc_calls"], 3 + 7 * 2);
}

// ---- a periodic plan serves any number of iterations ------------------------------------

TEST(PlanReplay, APeriodicPlanServesTenTimesTheCapturedSteps) {
  NEED(paths().luma);
  NEED(paths().prog("shared"));
  const std::string dir = temp_dir();
  const std::string plan = capture_and_plan(dir, "shared", 5, true);
  TrainOptions o;
  o.plan = plan;
  o.steps = 50;
  TrainRun r = train(dir, o);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  TrainOptions cached;  // the same 50 steps on the caching allocator: the same results
  cached.steps = 50;
  TrainRun c = train(dir, cached);
  ASSERT_EQ(c.result.exit_code, 0) << describe(c.result);
  EXPECT_EQ(results(r.result), results(c.result));
  EXPECT_EQ(real_allocations(r, 0), 1u) << r.counters.dump();
  EXPECT_EQ(r.stats["plan"]["served_from_plan"], true) << r.stats["plan"].dump();
  const json& d = plan_device(r, 0);
  EXPECT_EQ(d["served"], 3 + 7 * 50) << d.dump();
  EXPECT_GT(d["period"].get<int>(), 0);
  // Iterations of the plan's period (two steps in a fence-aware plan, docs/planner.md):
  // at least 45 steps' worth.
  EXPECT_GE(d["iterations"].get<int>() * d["period"].get<int>(), 45 * 7) << d.dump();
  // Peak reserved: the arena alone, no more than the caching allocator's.
  EXPECT_LE(r.stats["devices"][0]["peak_reserved_bytes"].get<std::uint64_t>(),
            c.stats["devices"][0]["peak_reserved_bytes"].get<std::uint64_t>());
}

// The two-stream loop (prog train-streams): no slack for every free fits its budget, so
// `luma plan` keeps only the temporaries' bytes (selective fence slack, docs/planner.md);
// the plan is within 1 % of the run's lower bound and replays the program with the same
// results, waiting for no fence.
TEST(PlanReplay, TwoStreamLoopGetsASelectiveFenceAwarePlanAtTheLowerBound) {
  NEED(paths().luma);
  NEED(paths().prog("shared"));
  const std::string dir = temp_dir();
  TrainOptions o;
  o.args = {"train-streams"};
  o.trace = dir + "/capture.trace";
  const TrainRun c = train(dir, o);
  ASSERT_EQ(c.result.exit_code, 0) << describe(c.result);
  const std::string plan = dir + "/plan.json";
  const Result p = run({paths().luma, "plan", "--periodic", "-o", plan, o.trace}, clean_env());
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  EXPECT_NE(p.out.find("where that costs at most 1/64 of the peak"), std::string::npos) << p.out;
  const json d = json::parse(read_file(plan))["devices"][0];
  EXPECT_EQ(d["fence_slack"]["selective"], true) << d["fence_slack"].dump();
  EXPECT_LE(d["fence_slack"]["arena_over_run_lower_bound"].get<double>(), 1.01) << d["fence_slack"].dump();

  auto steps_only = [](const std::string& out) {  // each step's checksum line
    std::string kept;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (line.find(": step ") != std::string::npos) kept += line + "\n";
    return kept;
  };
  o.trace.clear();
  o.steps = 12;
  const TrainRun bare = train(dir, o);
  o.plan = plan;
  const TrainRun r = train(dir, o);
  ASSERT_EQ(r.result.exit_code, 0) << describe(r.result);
  EXPECT_EQ(count_lines_with(r.result.out, ": step "), 12);
  EXPECT_EQ(steps_only(r.result.out), steps_only(bare.result.out));
  EXPECT_EQ(real_allocations(r, 0), 1u) << r.counters.dump();
  EXPECT_EQ(r.stats["plan"]["divergences"], 0) << r.stats["plan"].dump();
  // Each step's frees are reused only after the step synchronized its streams: the fence
  // of a temporary (recorded at the allocation after its free) and of the step's last
  // frees (the legacy stream idle, the streams idle) are done when their bytes come back.
  EXPECT_EQ(plan_device(r, 0)["fence_waits"], 0) << plan_device(r, 0).dump();
}

// ---- luma run --plan -------------------------------------------------------------------

TEST(PlanReplay, LumaRunWithAPlanServesTheProgramFromIt) {
  NEED(paths().luma);
  NEED(paths().prog("shared"));
  const std::string dir = temp_dir();
  const std::string plan = capture_and_plan(dir, "shared", 3, false);
  Env env = clean_env({{"LD_LIBRARY_PATH", paths().fake_dir},
                       {"LUMA_TEST_STEPS", "3"},
                       {"LUMA_FAKE_COUNTERS", dir + "/run.counters.json"}});
  Result r = run({paths().luma, "run", "--plan", plan, "--trace", dir + "/replayed.trace", "--",
                  paths().prog("shared"), "train"},
                 env);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("served from the plan: yes"), std::string::npos) << r.err;
  const json counters = json::parse(read_file(dir + "/run.counters.json"));
  EXPECT_EQ(counters["devices"][0]["mem_alloc_calls"], 1);
  // A replayed run is traced too, and plans again to the same arena.
  Result p = run({paths().luma, "plan", "-o", dir + "/again.json", dir + "/replayed.trace"},
                 clean_env());
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  EXPECT_EQ(json::parse(read_file(dir + "/again.json"))["devices"][0]["arena"],
            json::parse(read_file(plan))["devices"][0]["arena"]);
}

}  // namespace
}  // namespace luma::integration
