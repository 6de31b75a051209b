// plan_json.cpp - the plan as JSON: the plan file of core/plan/plan_file.h (per device the
// arena, alignment, lower bound, strategy, the strategies tried, and per allocation its
// sequence number, name, requested bytes, size, offset and lifetime; the fingerprint of a
// traced run; the layout of a periodic plan). Written by core so that replay reads exactly
// what is written here.
#include <algorithm>

#include "plan/plan_file.h"
#include "exports/plan_files.h"

namespace luma::tools {

void write_plan_json(const std::string& path, const std::string& input,
                     const std::vector<DevicePlan>& plans, const core::RunFingerprint* fingerprint) {
  core::PlanFile file;
  file.input = input;
  if (fingerprint != nullptr) file.fingerprint = *fingerprint;
  for (const DevicePlan& dp : plans) {
    const core::Plan& plan = dp.report.chosen;
    core::DevicePlanFile dev;
    dev.device = dp.device;
    dev.arena = plan.arena;
    dev.lower_bound = dp.report.lower_bound;
    dev.strategy = plan.strategy;
    // The alignment every offset keeps: the smallest the lifetimes asked for (256 for a
    // trace or an RMM log; a planner CSV's may be 1, and such a plan cannot be replayed).
    if (!dp.lifetimes.empty()) {
      dev.alignment = ~std::uint64_t{0};
      for (const core::Lifetime& lt : dp.lifetimes) dev.alignment = std::min(dev.alignment, std::max<std::uint64_t>(lt.alignment, 1));
    }
    for (const core::StrategyRun& run : dp.report.runs)
      dev.strategies.push_back({run.plan.strategy, run.plan.arena, run.seconds});
    dev.periodic = dp.periodic;
    dev.fence_slack = dp.fence_slack;
    dev.allocations.reserve(dp.lifetimes.size());
    for (std::size_t i = 0; i < dp.lifetimes.size(); ++i) {
      const core::Lifetime& lt = dp.lifetimes[i];
      core::PlannedAllocation a;
      a.name = lt.id;
      a.requested = i < dp.requested.size() ? dp.requested[i] : lt.size;
      a.size = lt.size;
      a.offset = plan.offsets[i];
      a.lower = lt.lower;
      a.upper = lt.upper;
      dev.allocations.push_back(std::move(a));
    }
    file.devices.push_back(std::move(dev));
  }
  core::write_plan_file(path, file);
}

}  // namespace luma::tools
