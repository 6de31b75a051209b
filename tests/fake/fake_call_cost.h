// fake_call_cost.h - what some driver calls cost the calling thread on a real GPU, imitated
// by the stand-in driver (a TEST DOUBLE): with LUMA_FAKE_CALL_COST set, cuEventRecord,
// cuEventQuery and cuStreamQuery spin for about as long as the real call takes, so that a
// benchmark counting those calls (tests/bench/bench_streams) weighs them as a GPU would.
// Unset (the default), every call is free, so unit tests stay fast. README.md gives the
// values and where they come from.
#pragma once

#include <cstdint>

namespace luma::fake {

// call, nanoseconds per call on a real GPU (the estimate of README.md, "Call costs").
#define LUMA_FAKE_CALL_COSTS(X) \
  X(event_record, 1000)         \
  X(event_query, 300)           \
  X(stream_query, 300)

enum class CostedCall : std::uint8_t {
#define LUMA_FAKE_COST_ENUM(name, ns) name,
  LUMA_FAKE_CALL_COSTS(LUMA_FAKE_COST_ENUM)
#undef LUMA_FAKE_COST_ENUM
};

// Makes the call it is declared in last at least the call's cost, scaled by
// LUMA_FAKE_CALL_COST (read once): "realistic" = 100, or a percentage of the table ("50",
// "200"); unset, empty or "0": nothing. The stand-in's own work counts towards the cost
// (the destructor spins only for what is left): its locks and lookups stand for the
// driver's, so adding them on top would weigh the calls more than a GPU does.
class CallCost {
 public:
  explicit CallCost(CostedCall call) noexcept;
  ~CallCost();
  CallCost(const CallCost&) = delete;
  CallCost& operator=(const CallCost&) = delete;

 private:
  std::int64_t until_ns_ = 0;  // steady_clock time to spin to; 0: costs nothing
};

}  // namespace luma::fake
