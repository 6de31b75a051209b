// trace_lifetime_reader.h - a luma trace (docs/trace-format.md) as planner input: one
// lifetime per alloc, from its event index to the index of its free_requested (or to the
// end of the trace when never freed), on the device it was made on. A trace that does not
// read gives a PlanInputError carrying the trace reader's message (file and byte offset).
#pragma once

#include "planner/input/lifetime_reader.h"

namespace luma::core {

class TraceLifetimeReader final : public LifetimeReader {
 public:
  std::string_view format_name() const override { return "luma trace"; }
  std::string_view expected_start() const override { return "LUMATRC\\x01"; }
  bool accepts(std::string_view head) const override;
  std::vector<Lifetime> read(std::istream& in, const std::string& source) const override;
};

}  // namespace luma::core
