// fence_slack.h - fence-aware planning: keep a freed buffer's bytes out of reuse for the
// next few allocations of its device, so that the fence covering its free (recorded by
// replay at the first allocation after the free, core/replay/plan_replay.h) has had time to
// complete when a planned buffer takes those bytes, and replay does not wait for it.
//
// The unit is the device's own allocations, because that is replay's clock: allocation k
// is served at its planned offset, and the fence of a free is recorded at the next
// allocation. With slack L, a buffer freed just before allocation j keeps its bytes until
// allocation j + L: allocations j .. j + L - 1 never take them. L = 0 is the plain plan.
// docs/planner.md ("Fence-aware plans") gives the reasons and the measurements.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/lifetime.h"

namespace luma::core {

// Every lifetime freed inside the input (upper below the last allocation of its device)
// gets its upper moved to the lower of the L-th allocation of its device after the
// first one at or after its free (or past that device's last allocation, when there are
// fewer). A lifetime live to the end keeps its upper. Order, ids and sizes are kept.
std::vector<Lifetime> with_fence_slack(std::vector<Lifetime> lifetimes, std::uint64_t slack);

// Selective slack, for loops where giving every free the slack costs more arena than
// the budget allows (a step that frees everything and starts with a large allocation):
// a free gets the slack only where keeping its bytes costs (almost) no live bytes above the
// run's own peak and crosses no quiet point. Frees are taken in time order; a free is kept over
// the allocations of its window (as with_fence_slack would keep it) when
//   - at each of those allocations, the bytes live with every slack granted so far stay
//     at most the peak live bytes of the input (its lower bound) plus 1/64 of it
//     (planner::kSelectivePeakAllowanceDivisor), and
//   - none of those allocations comes at a quiet point: when no more bytes are held than
//     the fewest held at any allocation of the second half of the device's allocations
//     (a loop's steady low, such as the start of a training step, after the warm-up).
//     Keeping bytes there is what costs a step's worth of arena, and it is where a
//     periodic plan cuts its period (periodic.h): a kept free across it would be live
//     across the cut and planned over the whole window.
// Otherwise the free keeps its upper (replay then fences it at the next allocation).
// `kept` (optional) receives how many frees got the slack.
std::vector<Lifetime> with_selective_fence_slack(std::vector<Lifetime> lifetimes, std::uint64_t slack,
                                                 std::uint64_t* kept = nullptr);

// The smallest gap, in allocations of its device, between a free and the first allocation
// placed on any of the freed bytes (counted from the first allocation after the free: 0 =
// that very allocation reuses them), over all buffers of `lifetimes` placed at `offsets`
// (one device); UINT64_MAX when no bytes are ever reused. A plan made with slack L has a
// gap of at least L. (The check the tests make, and what `luma plan` prints.)
std::uint64_t min_reuse_gap(const std::vector<Lifetime>& lifetimes, const std::vector<std::uint64_t>& offsets);

}  // namespace luma::core
