// progress.h - a one-line progress bar on stderr for reading large inputs; silent when
// stderr is not a terminal (pipes, CI logs, tests), so output files never contain it.
#pragma once

#include <cstdint>
#include <string>

namespace luma::tools {

class ProgressBar {
 public:
  // `label` names what is being read. Draws only if stderr is a tty.
  explicit ProgressBar(std::string label);
  ~ProgressBar();  // clears the line
  void update(std::uint64_t done, std::uint64_t total);
  bool enabled() const noexcept { return enabled_; }

 private:
  std::string label_;
  bool enabled_ = false;
  int last_percent_ = -1;
};

}  // namespace luma::tools
