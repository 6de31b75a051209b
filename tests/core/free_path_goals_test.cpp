// free_path_goals_test.cpp - the memory goals (docs/placement.md, "Goals on every path") on
// every sequence of the repository, on each free path libluma.so takes, with the defaults
// and with expandable segments. Replayed through core/simulate, which gives what
// libluma.so gives on these paths (tests/integration/simulate_equivalence.py runs both).
//
// Sequences: the recorded torch_train, the synthetic training runs (training_sequence.h),
// the decoding and mixture-of-experts runs (inference_sequence.h). Paths:
// - one thread: every free reusable at once;
// - two threads: at once, then the legacy stream's barrier from a second thread's first
//   call: the recorded one (torch_train), the backward on a second thread (training), a
//   second thread from the first free on (inference: a server's request thread);
// - own stream: a non-blocking stream of the program's own from the start, every fence
//   done 100 us of recorded time after it is recorded (the fenced path with a latency).
// Goals: defaults peak <= 1.10 x peak live, X <= 1.05, at most 2 driver allocations per 100
// allocations; expandable segments peak <= 1.03 x and never above the defaults on the same
// sequence and path, X <= 1.03, at most 1 driver allocation per 50; two threads hold at
// most the one-thread peak + 0.01 x. Where a goal is not reached, kShortfalls holds what
// the library gives (and docs/placement.md why); a shortfall that is met now fails too, so
// the table and the document stay true.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "inference_sequence.h"
#include "simulate/sim_sequence.h"
#include "simulate/simulation.h"
#include "training_sequence.h"

namespace luma::core {
namespace {

namespace fs = std::filesystem;

struct Named {
  std::string name;
  SimSequence seq;               // facts cleared: the path adds its own
  std::size_t second_thread_op;  // where the two-thread path's second thread appears
};

SimSequence torch_train() {
  const fs::path out = fs::temp_directory_path() / ("luma-goals-" + std::to_string(getpid()) + ".csv");
  const std::string cmd = "gzip -dc '" + (fs::path(LUMA_DATA_DIR) / "torch_train.rmm.csv.gz").string() + "' > '" +
                          out.string() + "'";
  if (std::system(cmd.c_str()) != 0) return SimSequence{};
  SimInput in = read_sim_input(out.string());
  fs::remove(out);
  return in.devices.empty() ? SimSequence{} : in.devices[0];
}

std::size_t first_free(const SimSequence& s) {
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].is_free) return i;
  return 0;
}

const std::vector<Named>& sequences() {
  static const std::vector<Named> all = [] {
    std::vector<Named> v;
    SimSequence torch = torch_train();
    std::size_t second = 0;
    for (const SimFact& f : torch.facts)
      if (f.fact == FreePathFact::second_thread) {
        second = f.op;
        break;
      }
    torch.facts.clear();
    v.push_back({"torch_train", std::move(torch), second});
    for (const testing::TrainingModel& m : testing::training_models()) {
      SimSequence s = testing::TrainingSequence(m).make();
      const std::vector<int> threads = testing::backward_on_thread_2(s);
      std::size_t at = 0;
      while (at < threads.size() && threads[at] != 2) ++at;
      s.facts.clear();
      v.push_back({m.name, std::move(s), at});
    }
    for (const testing::DecodingModel& m : testing::decoding_models()) {
      SimSequence s = testing::make_decoding(m);
      s.facts.clear();
      const std::size_t at = first_free(s);
      v.push_back({m.name, std::move(s), at});
    }
    for (const testing::MoeModel& m : testing::moe_models()) {
      SimSequence s = testing::make_moe(m);
      s.facts.clear();
      const std::size_t at = first_free(s);
      v.push_back({m.name, std::move(s), at});
    }
    return v;
  }();
  return all;
}

enum class Path { one_thread, two_threads, own_stream };
const char* path_name(Path p) {
  return p == Path::one_thread ? "one thread" : p == Path::two_threads ? "two threads" : "own stream";
}

struct Figures {
  double peak = 0;    // peak reserved / peak live
  double allocs = 0;  // driver allocations per 100 allocations
  double x = 0;       // X on limits 0.01 x peak live apart
};

Figures measure(const Named& n, Path p, bool expandable) {
  SimSequence s = n.seq;
  SimOptions o;
  o.settings.allocator.expandable_segments = expandable;
  if (p == Path::two_threads) s.facts.push_back({n.second_thread_op, FreePathFact::second_thread, "a second thread"});
  if (p == Path::own_stream) {
    s.facts.push_back({0, FreePathFact::unordered_stream, "a stream of its own"});
    o.fence_latency_ns = 100'000;
  }
  const SimResult r = simulate(s, o);
  EXPECT_TRUE(r.completed) << n.name << ", " << path_name(p);
  EXPECT_TRUE(r.check_errors.empty()) << n.name << ": " << (r.check_errors.empty() ? "" : r.check_errors[0]);
  const LimitScan m = scan_limits(s, o, 0.01);
  EXPECT_NE(m.bound, 0u) << n.name;
  return {double(r.peak_reserved) / double(s.peak_live), 100.0 * double(r.reserves) / double(s.allocations),
          double(m.bound) / double(s.peak_live)};
}

// A goal not reached: the figure the library gives (the bound asserted instead of the goal).
// Each is explained in docs/placement.md, "Goals on every path".
struct Shortfall {
  const char* sequence;
  Path path;
  bool expandable;
  const char* goal;  // "peak", "x", "allocs", "not above defaults", "second thread"
  double bound;
};
const Shortfall kShortfalls[] = {
    // torch_train: X: completing is not monotone in the limit near it; fenced: blocks wait.
    {"torch_train", Path::one_thread, false, "x", 1.0601},
    {"torch_train", Path::two_threads, false, "x", 1.0601},
    {"torch_train", Path::own_stream, false, "peak", 1.1023},
    {"torch_train", Path::two_threads, false, "second thread", 0.0162},
    // gpt2-like: expandable segments off the at-once path hold blocks back while the pool grows.
    {"gpt2-like", Path::two_threads, true, "not above defaults", 0.0027},
    {"gpt2-like", Path::own_stream, true, "not above defaults", 0.0173},
    // bert-like: expandable segments off the at-once path hold blocks back while the pool grows.
    {"bert-like", Path::own_stream, true, "peak", 1.0431},
    {"bert-like", Path::own_stream, true, "x", 1.0501},
    {"bert-like", Path::own_stream, true, "not above defaults", 0.0285},
    {"bert-like", Path::two_threads, true, "second thread", 0.0131},
    // classifier-fp32: rests of segments rounded to 2 MiB pages that no large request fits.
    {"classifier-fp32", Path::one_thread, false, "x", 1.0801},
    {"classifier-fp32", Path::two_threads, false, "x", 1.0901},
    {"classifier-fp32", Path::two_threads, true, "peak", 1.0396},
    {"classifier-fp32", Path::two_threads, true, "x", 1.0601},
    {"classifier-fp32", Path::own_stream, false, "x", 1.0701},
    {"classifier-fp32", Path::own_stream, true, "peak", 1.0674},
    {"classifier-fp32", Path::own_stream, true, "x", 1.0701},
    {"classifier-fp32", Path::own_stream, true, "not above defaults", 0.0022},
    {"classifier-fp32", Path::two_threads, false, "second thread", 0.0207},
    {"classifier-fp32", Path::two_threads, true, "second thread", 0.0176},
    // gpt2-size: batch shapes differ per step; the largest tensors fit no earlier free segment.
    {"gpt2-size", Path::two_threads, true, "not above defaults", 0.0170},
    {"gpt2-size", Path::own_stream, false, "allocs", 2.0841},
    {"gpt2-size", Path::own_stream, true, "peak", 1.0313},
    {"gpt2-size", Path::own_stream, true, "x", 1.0401},
    {"gpt2-size", Path::own_stream, true, "not above defaults", 0.0235},
    {"gpt2-size", Path::two_threads, true, "second thread", 0.0237},
    // decoding: caches grow by concatenation; each freed cache is one token short of the next.
    {"decoding", Path::one_thread, false, "peak", 1.1394},
    {"decoding", Path::one_thread, false, "x", 1.0701},
    {"decoding", Path::one_thread, true, "peak", 1.0968},
    {"decoding", Path::one_thread, true, "x", 1.1201},
    {"decoding", Path::two_threads, false, "peak", 1.1950},
    {"decoding", Path::two_threads, false, "x", 1.0701},
    {"decoding", Path::two_threads, true, "peak", 1.0968},
    {"decoding", Path::two_threads, true, "x", 1.1201},
    {"decoding", Path::own_stream, false, "peak", 1.1950},
    {"decoding", Path::own_stream, false, "x", 1.0701},
    {"decoding", Path::own_stream, true, "peak", 1.0968},
    {"decoding", Path::own_stream, true, "x", 1.1201},
    {"decoding", Path::two_threads, false, "second thread", 0.0558},
    // moe-routing: X: tight placement near a limit fragments more than the unlimited run;
    // expandable: driver allocations as routing moves memory between pools.
    {"moe-routing", Path::one_thread, false, "x", 1.0701},
    {"moe-routing", Path::one_thread, true, "allocs", 3.0060},
    {"moe-routing", Path::two_threads, false, "x", 1.0701},
    {"moe-routing", Path::two_threads, true, "allocs", 3.0376},
    {"moe-routing", Path::own_stream, false, "x", 1.0701},
    {"moe-routing", Path::own_stream, true, "allocs", 3.0218},
};

const Shortfall* shortfall(const std::string& seq, Path p, bool expandable, const std::string& goal) {
  for (const Shortfall& s : kShortfalls)
    if (seq == s.sequence && p == s.path && expandable == s.expandable && goal == s.goal) return &s;
  return nullptr;
}

// value <= goal, or, for a shortfall, goal < value <= its bound.
void expect_goal(const std::string& seq, Path p, bool expandable, const std::string& goal, double value,
                 double target) {
  const std::string where = seq + ", " + path_name(p) + (expandable ? ", expandable" : ", defaults") + ": " + goal;
  if (const Shortfall* s = shortfall(seq, p, expandable, goal)) {
    EXPECT_LE(value, s->bound + 1e-9) << where << " (shortfall bound " << s->bound << ")";
    EXPECT_GT(value, target + 1e-9) << where << " meets its goal " << target
                                    << " now: remove it from kShortfalls and docs/placement.md";
  } else {
    EXPECT_LE(value, target + 1e-9) << where << " (goal " << target << ")";
    if (value > target + 1e-9)
      std::printf("not in kShortfalls: {\"%s\", Path::%s, %s, \"%s\", %.4f},\n", seq.c_str(),
                  p == Path::one_thread ? "one_thread" : p == Path::two_threads ? "two_threads" : "own_stream",
                  expandable ? "true" : "false", goal.c_str(), value);
  }
}

class Goals : public ::testing::TestWithParam<std::string> {};

TEST_P(Goals, OnEveryPath) {
  const Named* n = nullptr;
  for (const Named& s : sequences())
    if (s.name == GetParam()) n = &s;
  ASSERT_NE(n, nullptr);
  ASSERT_GT(n->seq.allocations, 0u) << n->name;
  std::map<std::pair<Path, bool>, Figures> f;
  for (Path p : {Path::one_thread, Path::two_threads, Path::own_stream})
    for (bool e : {false, true}) f[{p, e}] = measure(*n, p, e);
  for (Path p : {Path::one_thread, Path::two_threads, Path::own_stream}) {
    const Figures& d = f[{p, false}];
    const Figures& e = f[{p, true}];
    std::printf("| %s | %s | %.3f, %.3f, %.2f | %.3f, %.3f, %.2f |\n", n->name.c_str(), path_name(p), d.peak, d.x,
                d.allocs, e.peak, e.x, e.allocs);
    expect_goal(n->name, p, false, "peak", d.peak, 1.10);
    expect_goal(n->name, p, false, "x", d.x, 1.05);
    expect_goal(n->name, p, false, "allocs", d.allocs, 2.0);
    expect_goal(n->name, p, true, "peak", e.peak, 1.03);
    expect_goal(n->name, p, true, "x", e.x, 1.03);
    expect_goal(n->name, p, true, "allocs", e.allocs, 2.0);
    expect_goal(n->name, p, true, "not above defaults", e.peak - d.peak, 0.0);
  }
  for (bool e : {false, true})
    expect_goal(n->name, Path::two_threads, e, "second thread",
                f[{Path::two_threads, e}].peak - f[{Path::one_thread, e}].peak, 0.01);
}

INSTANTIATE_TEST_SUITE_P(EverySequence, Goals,
                         ::testing::Values("torch_train", "gpt2-like", "bert-like", "classifier-fp32", "gpt2-size",
                                           "decoding", "moe-routing"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// Every sequence the doubles make is one of the above (a new one is measured too).
TEST(Goals, CoverEverySequence) {
  std::size_t n = 1 + testing::training_models().size() + testing::decoding_models().size() +
                  testing::moe_models().size();
  EXPECT_EQ(sequences().size(), n);
  EXPECT_EQ(n, 7u) << "a sequence was added: add it to EverySequence";
}

}  // namespace
}  // namespace luma::core
