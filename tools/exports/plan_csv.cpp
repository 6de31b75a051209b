// plan_csv.cpp - MiniMalloc's output: the input rows with an offset column
// (`id,lower,upper,size,offset`), plus a device column when the plan covers several.
#include <stdexcept>

#include "io/output_file.h"
#include "exports/plan_files.h"

namespace luma::tools {

void write_plan_csv(const std::string& path, const std::vector<DevicePlan>& plans) {
  core::OutputFile file(path);  // a failed write leaves no half-written CSV
  std::ostream& out = file.stream();
  bool several = plans.size() > 1;
  out << "id,lower,upper,size,offset" << (several ? ",device" : "") << '\n';
  for (const DevicePlan& dp : plans) {
    for (std::size_t i = 0; i < dp.lifetimes.size(); ++i) {
      const core::Lifetime& lt = dp.lifetimes[i];
      out << lt.id << ',' << lt.lower << ',' << lt.upper << ',' << lt.size << ','
          << dp.report.chosen.offsets[i];
      if (several) out << ',' << dp.device;
      out << '\n';
    }
  }
  file.commit();
}

}  // namespace luma::tools
