// progress.h - a one-line progress bar on stderr while a large trace is read (or other long
// work: the replays of `luma simulate --tune`); silent when stderr is not a terminal
// (pipes, files, CI logs, tests), so output files never contain it, and for inputs small
// enough to read in a blink (kProgressMinBytes).
// Must never write to stdout, wrap past the terminal's width, or leave its line behind.
#pragma once

#include <cstdint>
#include <string>

namespace luma::tools {

// Below this many bytes a trace reads in well under a tenth of a second: no bar.
inline constexpr std::uint64_t kProgressMinBytes = 16u << 20;

class ProgressBar {
 public:
  // `label` names what is being read; `total` is its size in bytes. Draws only if stderr
  // is a terminal and total >= min_total (work counted in other units, as the replays of
  // `luma simulate --tune`, gives its own threshold).
  ProgressBar(std::string label, std::uint64_t total, std::uint64_t min_total = kProgressMinBytes);
  ~ProgressBar();  // erases the line (also when the read ends in an error)
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(std::uint64_t done);
  bool enabled() const noexcept { return enabled_; }

 private:
  std::string label_;
  std::uint64_t total_ = 0;
  bool enabled_ = false;
  int columns_ = 80;  // the terminal's width (80 when it does not say)
  int drawn_ = 0;     // characters on the line now
  int last_percent_ = -1;
};

}  // namespace luma::tools
