// free_path_test.cpp - the one rule for the free path (core/free_path): every fact alone,
// their order of precedence, reuse turned off, and the names `--free-path` takes.
#include "free_path/free_path.h"

#include <gtest/gtest.h>

#include <string>

namespace luma::core {
namespace {

FreePathFacts with(std::initializer_list<FreePathFact> facts, bool allowed = true) {
  FreePathFacts f;
  f.reuse_allowed = allowed;
  for (FreePathFact x : facts) f.add(x);
  return f;
}

TEST(FreePath, NothingSeenIsReuseAtOnce) {
  EXPECT_EQ(decide_free_path(with({})).path, FreePath::at_once);
}

TEST(FreePath, AThreadOrABlockingStreamKeepsTheLegacyStreamsOrder) {
  for (FreePathFact f : {FreePathFact::second_thread, FreePathFact::blocking_stream}) {
    const FreePathDecision d = decide_free_path(with({f}));
    EXPECT_EQ(d.path, FreePath::legacy) << free_path_fact_text(f);
    EXPECT_EQ(std::string(d.why), free_path_fact_text(f));
  }
  EXPECT_EQ(decide_free_path(with({FreePathFact::second_thread, FreePathFact::blocking_stream})).path,
            FreePath::legacy);
}

TEST(FreePath, AContextAnUnorderedStreamOrACaptureFencesWhateverElseWasSeen) {
  for (FreePathFact f : {FreePathFact::second_context, FreePathFact::unordered_stream, FreePathFact::capture}) {
    EXPECT_EQ(decide_free_path(with({f})).path, FreePath::fenced) << free_path_fact_text(f);
    const FreePathDecision d = decide_free_path(with({FreePathFact::second_thread, f}));
    EXPECT_EQ(d.path, FreePath::fenced) << free_path_fact_text(f);
    EXPECT_EQ(std::string(d.why), free_path_fact_text(f));
  }
}

TEST(FreePath, ReuseOffIsFencedFromTheStart) {
  const FreePathDecision d = decide_free_path(with({}, false));
  EXPECT_EQ(d.path, FreePath::fenced);
  EXPECT_NE(std::string(d.why).find("stream_ordered_reuse"), std::string::npos);
}

TEST(FreePath, FactsAccumulateAndEachIsHeldOnce) {
  FreePathFacts f;
  for (unsigned i = 0; i < kFreePathFactCount; ++i) {
    const auto fact = static_cast<FreePathFact>(i);
    EXPECT_FALSE(f.has(fact));
    f.add(fact);
    f.add(fact);
    EXPECT_TRUE(f.has(fact));
  }
  EXPECT_EQ(f.seen, (1u << kFreePathFactCount) - 1);
}

TEST(FreePath, NamesRoundTripAndOthersAreRefused) {
  for (FreePath p : {FreePath::at_once, FreePath::legacy, FreePath::fenced})
    EXPECT_EQ(parse_free_path(free_path_name(p)), p);
  EXPECT_EQ(parse_free_path("at_once"), std::nullopt);
  EXPECT_EQ(parse_free_path(""), std::nullopt);
}

}  // namespace
}  // namespace luma::core
