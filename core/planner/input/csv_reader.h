// csv_reader.h - MiniMalloc's planner CSV: header `id,lower,upper,size[,alignment]`, one
// buffer per row, lifetime [lower, upper).
#pragma once

#include "planner/input/lifetime_reader.h"

namespace luma::core {

class PlannerCsvReader final : public LifetimeReader {
 public:
  std::string_view format_name() const override { return "planner CSV"; }
  std::string_view expected_start() const override { return "id,lower,upper,size[,alignment]"; }
  bool accepts(std::string_view head) const override;
  std::vector<Lifetime> read(std::istream& in, const std::string& source) const override;
};

}  // namespace luma::core
