// tlsf_replay.h - the plan tinygrad's memory planner would make: replay the lifetimes as a
// schedule of alloc/free events through the TLSF allocator.
// Events are sorted by (time, frees before allocs), ties in input order; sizes are rounded
// up to 256 B; the TLSF arena is twice the total rounded size. Deterministic.
#pragma once

#include <vector>

#include "planner/lifetime.h"
#include "planner/plan.h"

namespace luma::core {

// Buffers with an empty lifetime (lower == upper) are never live; they get offset 0.
Plan plan_tlsf_replay(const std::vector<Lifetime>& lifetimes);

}  // namespace luma::core
