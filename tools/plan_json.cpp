// plan_json.cpp - the plan as JSON: per device the arena, the lower bound, the strategy,
// the strategies tried, and per allocation its sequence number, name, size, offset and
// lifetime.
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "plan_files.h"

namespace luma::tools {

void write_plan_json(const std::string& path, const std::string& input,
                     const std::vector<DevicePlan>& plans) {
  nlohmann::ordered_json doc;
  doc["input"] = input;
  doc["devices"] = nlohmann::ordered_json::array();
  for (const DevicePlan& dp : plans) {
    const core::Plan& plan = dp.report.chosen;
    nlohmann::ordered_json dev;
    dev["device"] = dp.device;
    dev["arena"] = plan.arena;
    dev["lower_bound"] = dp.report.lower_bound;
    dev["arena_over_lower_bound"] = arena_ratio(plan.arena, dp.report.lower_bound);
    dev["strategy"] = plan.strategy;
    dev["strategies"] = nlohmann::ordered_json::array();
    for (const core::StrategyRun& run : dp.report.runs)
      dev["strategies"].push_back({{"strategy", run.plan.strategy},
                                   {"arena", run.plan.arena},
                                   {"seconds", run.seconds}});
    auto& allocs = dev["allocations"] = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < dp.lifetimes.size(); ++i) {
      const core::Lifetime& lt = dp.lifetimes[i];
      allocs.push_back({{"id", i},
                        {"name", lt.id},
                        {"size", lt.size},
                        {"offset", plan.offsets[i]},
                        {"lower", lt.lower},
                        {"upper", lt.upper}});
    }
    doc["devices"].push_back(std::move(dev));
  }
  std::ofstream out(path);
  out << doc.dump(1) << '\n';
  if (!out) throw std::runtime_error(path + ": cannot write the plan JSON");
}

}  // namespace luma::tools
