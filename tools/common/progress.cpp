// progress.cpp - the progress bar: redrawn only when the whole percentage changes (at most
// 101 times), fitted to the terminal's width, erased with spaces (no escape sequences, so
// it works on any terminal, TERM=dumb included).
#include "common/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace luma::tools {

namespace {
constexpr int kBarWidth = 40;     // the bar itself, when the terminal is wide enough
constexpr int kMinBarWidth = 10;  // narrower than this, the label is shortened instead
constexpr int kFixed = 8;         // " [", "] ", "100%"

// `text` cut to at most `width` characters, keeping its end (a path's file name).
std::string fit_left(const std::string& text, int width) {
  if (width <= 0) return {};
  if (static_cast<int>(text.size()) <= width) return text;
  if (width <= 3) return text.substr(text.size() - static_cast<std::size_t>(width));
  return "..." + text.substr(text.size() - static_cast<std::size_t>(width - 3));
}
}  // namespace

ProgressBar::ProgressBar(std::string label, std::uint64_t total, std::uint64_t min_total)
    : label_(std::move(label)), total_(total) {
  enabled_ = total_ != 0 && total_ >= min_total && ::isatty(2) == 1;
  if (!enabled_) return;
  winsize ws{};
  if (::ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) columns_ = ws.ws_col;
  // Too narrow for a bar and a percentage on one line: none rather than a wrapping mess.
  if (columns_ < kFixed + kMinBarWidth + 2) enabled_ = false;
}

ProgressBar::~ProgressBar() {
  if (enabled_ && drawn_ > 0) std::fprintf(stderr, "\r%*s\r", drawn_, "");
  std::fflush(stderr);
}

void ProgressBar::update(std::uint64_t done) {
  if (!enabled_) return;
  const int percent = static_cast<int>(std::min(done, total_) * 100 / total_);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  // One column short of the width: writing the last column makes some terminals wrap.
  const int room = columns_ - 1;
  const int bar = std::clamp(room - kFixed - static_cast<int>(label_.size()) - 1, kMinBarWidth,
                             kBarWidth);
  const std::string label = fit_left(label_, room - kFixed - bar - 1);
  const int filled = percent * bar / 100;
  const std::string line = label + " [" + std::string(static_cast<std::size_t>(filled), '#') +
                           std::string(static_cast<std::size_t>(bar - filled), ' ') + "] " +
                           std::to_string(percent) + "%";
  // Pad over a longer previous line, so nothing of it stays visible.
  const int pad = std::max(0, drawn_ - static_cast<int>(line.size()));
  std::fprintf(stderr, "\r%s%*s", line.c_str(), pad, "");
  drawn_ = std::max(drawn_, static_cast<int>(line.size()));
  std::fflush(stderr);
}

}  // namespace luma::tools
