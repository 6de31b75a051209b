// fake_call_cost.h - what some driver calls cost the calling thread on a real GPU, imitated
// by the stand-in driver (a TEST DOUBLE): with LUMA_FAKE_CALL_COST set, cuEventRecord,
// cuEventQuery, cuStreamQuery and cuCtxRecordEvent spin for about as long as the real call
// takes, so that a benchmark counting those calls (tests/bench/bench_streams) weighs them as
// a GPU would. Unset (the default), every call is free, so unit tests stay fast. README.md
// gives the values and where they come from. Every call of the table is also counted
// (LUMA_FAKE_COUNTERS' "calls"), so tests can see which fence design a run used and how
// many pages it mapped.
#pragma once

#include <cstdint>

namespace luma::fake {

// call, its driver name, nanoseconds per call on a real GPU, and nanoseconds more per
// stream of the context the call covers (the estimates of README.md, "Call costs"). The
// virtual memory calls cost nothing here (0): they are only counted, so that tests see
// how many pages a run mapped and unmapped.
#define LUMA_FAKE_CALL_COSTS(X)                         \
  X(event_record, "cuEventRecord", 270, 0)               \
  X(event_query, "cuEventQuery", 270, 0)                 \
  X(stream_query, "cuStreamQuery", 290, 0)               \
  X(ctx_record_event, "cuCtxRecordEvent", 290, 0)        \
  X(mem_create, "cuMemCreate", 0, 0)                     \
  X(mem_release, "cuMemRelease", 0, 0)                   \
  X(mem_map, "cuMemMap", 0, 0)                           \
  X(mem_unmap, "cuMemUnmap", 0, 0)                       \
  X(mem_set_access, "cuMemSetAccess", 0, 0)              \
  X(mem_address_reserve, "cuMemAddressReserve", 0, 0)    \
  X(mem_address_free, "cuMemAddressFree", 0, 0)

enum class CostedCall : std::uint8_t {
#define LUMA_FAKE_COST_ENUM(name, driver_name, ns, per_stream_ns) name,
  LUMA_FAKE_CALL_COSTS(LUMA_FAKE_COST_ENUM)
#undef LUMA_FAKE_COST_ENUM
};

// How many times each call of the table was made since load (or luma_fake_reset), and its
// driver name: the stand-in's exit report lists them.
std::uint64_t costed_calls(CostedCall call) noexcept;
const char* costed_call_name(CostedCall call) noexcept;
inline constexpr int kCostedCallCount = 0
#define LUMA_FAKE_COST_COUNT(name, driver_name, ns, per_stream_ns) +1
    LUMA_FAKE_CALL_COSTS(LUMA_FAKE_COST_COUNT)
#undef LUMA_FAKE_COST_COUNT
    ;
void reset_costed_calls() noexcept;

// Makes the call it is declared in last at least the call's cost, scaled by
// LUMA_FAKE_CALL_COST (read once): "realistic" = 100, or a percentage of the table ("50",
// "200"); unset, empty or "0": nothing. The stand-in's own work counts towards the cost
// (the destructor spins only for what is left): its locks and lookups stand for the
// driver's, so adding them on top would weigh the calls more than a GPU does. Counts the
// call whatever the setting.
class CallCost {
 public:
  // `streams`: how many streams the call covers (its per-stream cost is paid for each).
  explicit CallCost(CostedCall call, std::uint64_t streams = 0) noexcept;
  ~CallCost();
  CallCost(const CallCost&) = delete;
  CallCost& operator=(const CallCost&) = delete;

 private:
  std::int64_t until_ns_ = 0;  // steady_clock time to spin to; 0: costs nothing
};

}  // namespace luma::fake
