// plan_file.h - the plan file (`luma plan -o`, read by plan replay): per device the arena,
// its alignment and the planned allocations in sequence order, plus the fingerprint of the
// run it was made from and, for periodic plans, the warm-up and period lengths.
// The format is specified in docs/plan-replay.md.
//
// The reader validates everything replay relies on and turns any problem into one
// PlanFileError naming the file, the field (devices[i].allocations[k].offset) and what is
// wrong; it never crashes and never allocates more than the file's size warrants (the file
// itself is bounded by plan::kMaxPlanFileBytes). Unknown fields are ignored, so a newer
// luma can add some without breaking an older reader.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "plan/plan_constants.h"
#include "plan/plan_fingerprint.h"

namespace luma::core {

class PlanFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One planned allocation: the k-th allocation of its device (k = its index in the list).
struct PlannedAllocation {
  std::string name;             // the input's name for it (trace: its sequence number)
  std::uint64_t requested = 0;  // bytes the program asked for: replay matches on this
  std::uint64_t size = 0;       // bytes placed at offset (>= requested)
  std::uint64_t offset = 0;     // from the arena base; a multiple of the device's alignment
  std::uint64_t lower = 0;      // the lifetime the planner used, [lower, upper): trace event
  std::uint64_t upper = 0;      // indices, or allocation indices of the cyclic model (periodic)
};

// A periodic plan: allocations [0, warmup) once, then [warmup, warmup + period) again and
// again; allocation k >= warmup is served at the slot warmup + (k - warmup) % period.
struct PeriodicLayout {
  std::uint64_t warmup = 0;
  std::uint64_t period = 0;
  std::uint64_t detected_warmup = 0;      // shortest warm-up the search found (<= warmup)
  std::uint64_t captured_iterations = 0;  // full periods after warmup in the planned trace
  std::uint64_t boundary_bytes = 0;       // bytes live across the period boundary
};

// A fence-aware plan (core/planner/fence_slack.h): every freed buffer's bytes were kept out
// of reuse for `allocations` allocations of the device after its free, so that replay finds
// the free's fence completed instead of waiting for it. Replay uses `allocations` to record
// each burst's fence that many allocations before its bytes are needed (plan_replay.h);
// a wrong value costs waits, never safety.
struct FenceSlackLayout {
  std::uint64_t allocations = 0;        // the slack L
  std::uint64_t run_lower_bound = 0;    // peak live bytes of the run itself (no slack): the
                                        // arena's true lower bound, which slack costs above
  bool selective = false;               // only some frees got the slack (fence_slack.h,
                                        // with_selective_fence_slack); replay is the same
};

struct StrategyResult {
  std::string strategy;
  std::uint64_t arena = 0;
  double seconds = 0;
};

struct DevicePlanFile {
  int device = 0;
  std::uint64_t arena = 0;  // bytes: the one reservation replay makes
  std::uint64_t alignment = plan::kMinReplayAlignment;
  std::uint64_t lower_bound = 0;
  std::string strategy;
  std::vector<StrategyResult> strategies;
  std::optional<PeriodicLayout> periodic;
  std::optional<FenceSlackLayout> fence_slack;
  std::vector<PlannedAllocation> allocations;
};

struct PlanFile {
  std::string input;                         // what the plan was made from
  std::optional<RunFingerprint> fingerprint;  // only plans made from a luma trace have one
  std::vector<DevicePlanFile> devices;

  // The plan of one device, or nullptr.
  const DevicePlanFile* find_device(int device) const noexcept;
};

// Reads and validates a plan file. Throws PlanFileError.
PlanFile read_plan_file(const std::string& path);
// The same for text in memory; `source` names it in messages.
PlanFile parse_plan_file(std::string_view text, const std::string& source);

// The JSON text of a plan (what write_plan_file writes).
std::string format_plan_file(const PlanFile& plan);
// Writes the plan; throws std::runtime_error naming the path when it cannot.
void write_plan_file(const std::string& path, const PlanFile& plan);

// arena / lower bound; 1 when both are 0, 0 when only the lower bound is (as `luma plan`
// prints it).
double arena_over_lower_bound(std::uint64_t arena, std::uint64_t lower_bound) noexcept;

}  // namespace luma::core
