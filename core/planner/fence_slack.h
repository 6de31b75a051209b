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

// The smallest gap, in allocations of its device, between a free and the first allocation
// placed on any of the freed bytes (counted from the first allocation after the free: 0 =
// that very allocation reuses them), over all buffers of `lifetimes` placed at `offsets`
// (one device); UINT64_MAX when no bytes are ever reused. A plan made with slack L has a
// gap of at least L. (The check the tests make, and what `luma plan` prints.)
std::uint64_t min_reuse_gap(const std::vector<Lifetime>& lifetimes, const std::vector<std::uint64_t>& offsets);

}  // namespace luma::core
