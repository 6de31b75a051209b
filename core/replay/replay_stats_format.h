// replay_stats_format.h - plan replay's statistics as text (lines for the exit report) and
// as JSON (an object the shim can put under the "plan" key of its statistics JSON), and one
// line describing a divergence (for the log line at the moment it happens).
//
// Pure functions of their arguments: no I/O, no locks, no globals, nothing with a static
// destructor (the shim formats at exit, after static destructors ran).
#pragma once

#include <string>
#include <vector>

#include "replay/replay_stats.h"

namespace luma::core {

// "allocation 37 asked for 4100 bytes where the plan has 4096": one line, no newline.
std::string describe_divergence(const Divergence& divergence);

// "luma: plan replay (plan.json): ..." then one line per device.
std::string format_replay_text(const ReplaySummary& summary, const std::vector<ReplayStats>& devices);

// {"file": ..., "accepted": ..., "refused": ..., "served_from_plan": ..., "divergences": ...,
//  "devices": [{"device": 0, "served_from_plan": true, ...}]} (no trailing newline).
std::string format_replay_json(const ReplaySummary& summary, const std::vector<ReplayStats>& devices);

}  // namespace luma::core
