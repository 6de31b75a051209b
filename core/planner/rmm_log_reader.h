// rmm_log_reader.h - RMM's logging_resource_adaptor CSV: header
// `Thread,Time,Action,Pointer,Size,Stream`. Time is the row's index among allocate/free
// rows; a pointer reused after its free is a new buffer; a buffer never freed lives to the
// end of the log; "allocate failure" rows are ignored; freeing an unknown pointer is an
// error naming its line.
#pragma once

#include "planner/lifetime_reader.h"

namespace luma::core {

class RmmLogReader final : public LifetimeReader {
 public:
  std::string_view format_name() const override { return "RMM log"; }
  std::string_view expected_start() const override {
    return "Thread,Time,Action,Pointer,Size,Stream";
  }
  bool accepts(std::string_view head) const override;
  std::vector<Lifetime> read(std::istream& in, const std::string& source) const override;
};

}  // namespace luma::core
