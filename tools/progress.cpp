// progress.cpp - the progress bar: redrawn only when the whole percentage changes.
#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace luma::tools {

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)), enabled_(::isatty(2) == 1) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && last_percent_ >= 0) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_ || total == 0) return;
  const int percent = static_cast<int>(done * 100 / total);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  constexpr int kWidth = 40;
  const int filled = percent * kWidth / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled,
               "########################################", kWidth - filled, "", percent);
  std::fflush(stderr);
}

}  // namespace luma::tools
