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

// Spins for the call's cost scaled by LUMA_FAKE_CALL_COST (read once): "realistic" = 100,
// or a percentage of the table ("50", "200"); unset, empty or "0": returns at once.
void pay_call_cost(CostedCall call);

}  // namespace luma::fake
