// plan_svg.cpp - a picture of the plan: time across, offset up, one rectangle per buffer,
// the lower bound as a dashed line; one panel per device. Very large plans draw only their
// largest buffers (100,000 by default; `--svg-max-buffers`), and `--svg-from/--svg-to`
// draw a window of the run, so the file stays viewable; the panel's title says how many
// of how many buffers it shows.
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "io/output_file.h"
#include "exports/memory_svg.h"
#include "exports/plan_files.h"

namespace luma::tools {

namespace {

constexpr double kWidth = 1000, kHeight = 500, kMargin = 70, kGapBetweenPanels = 40;

// Text inside an element: a buffer id is the input's own text and may hold < & " '.

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

void write_plan_svg(const std::string& path, const std::vector<DevicePlan>& plans,
                    const SvgOptions& options) {
  const std::uint64_t from = options.from.value_or(0), to = options.to.value_or(UINT64_MAX);
  if (from > to) throw std::runtime_error("--svg-from is after --svg-to");
  core::OutputFile file(path);  // a failed write leaves no half-written SVG
  std::ostream& out = file.stream();
  double panel = kHeight + 2 * kMargin + kGapBetweenPanels;
  double total_h = panel * static_cast<double>(std::max<std::size_t>(plans.size(), 1));
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(kWidth + 2 * kMargin)
      << "\" height=\"" << num(total_h) << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (std::size_t p = 0; p < plans.size(); ++p) {
    const DevicePlan& dp = plans[p];
    const core::Plan& plan = dp.report.chosen;
    double top = static_cast<double>(p) * panel + kMargin;
    // The buffers to draw: live in the window, then the largest.
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < dp.lifetimes.size(); ++i) {
      const auto& lt = dp.lifetimes[i];
      if (lt.upper > lt.lower && lt.size != 0 && lt.upper > from && lt.lower <= to)
        order.push_back(i);
    }
    const std::size_t live = order.size();
    if (order.size() > options.max_buffers) {
      std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(options.max_buffers),
                       order.end(), [&](std::size_t a, std::size_t b) {
                         return dp.lifetimes[a].size > dp.lifetimes[b].size;
                       });
      order.resize(options.max_buffers);
    }
    std::uint64_t t0 = ~std::uint64_t{0}, t1 = 0;
    for (std::size_t i : order) {
      t0 = std::min(t0, std::max(dp.lifetimes[i].lower, from));
      t1 = std::max(t1, std::min(dp.lifetimes[i].upper, to));
    }
    if (order.empty()) t0 = t1 = 0;
    double span_t = t1 > t0 ? static_cast<double>(t1 - t0) : 1.0;
    double span_y = static_cast<double>(std::max({plan.arena, dp.report.lower_bound, std::uint64_t{1}}));
    auto x = [&](std::uint64_t t) { return kMargin + static_cast<double>(t - t0) / span_t * kWidth; };
    auto y = [&](std::uint64_t off) { return top + kHeight - static_cast<double>(off) / span_y * kHeight; };
    out << "<text x=\"" << num(kMargin) << "\" y=\"" << num(top - 25) << "\" font-size=\"14\">device "
        << dp.device << ": " << xml_escape(plan.strategy) << ", arena " << plan.arena << " B, lower bound "
        << dp.report.lower_bound << " B, arena/LB "
        << num(arena_ratio(plan.arena, dp.report.lower_bound)) << "; " << order.size() << " of "
        << dp.lifetimes.size() << " buffers drawn";
    if (order.size() < live) out << " (the largest)";
    if (options.from || options.to) out << ", window [" << from << ", " << t1 << "]";
    out << "</text>\n";
    out << "<rect x=\"" << num(kMargin) << "\" y=\"" << num(top) << "\" width=\"" << num(kWidth)
        << "\" height=\"" << num(kHeight) << "\" fill=\"#f6f6f6\" stroke=\"black\"/>\n";
    for (std::size_t i : order) {
      const auto& lt = dp.lifetimes[i];
      const std::uint64_t lo = std::max(lt.lower, t0), hi = std::min(lt.upper, t1);
      unsigned hue = static_cast<unsigned>((i * 2654435761u) % 360);
      double ry = y(plan.offsets[i] + lt.size);
      out << "<rect x=\"" << num(x(lo)) << "\" y=\"" << num(ry) << "\" width=\""
          << num(x(hi) - x(lo)) << "\" height=\"" << num(y(plan.offsets[i]) - ry)
          << "\" fill=\"hsl(" << hue << ",65%,62%)\" stroke=\"#333\" stroke-width=\"0.3\"><title>"
          << xml_escape(lt.id) << ": " << lt.size << " B at " << plan.offsets[i] << ", [" << lt.lower << ", "
          << lt.upper << ")</title></rect>\n";
    }
    double lb = y(dp.report.lower_bound);
    out << "<line x1=\"" << num(kMargin) << "\" y1=\"" << num(lb) << "\" x2=\"" << num(kMargin + kWidth)
        << "\" y2=\"" << num(lb) << "\" stroke=\"red\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n"
        << "<text x=\"" << num(kMargin + kWidth + 4) << "\" y=\"" << num(lb + 4)
        << "\" fill=\"red\">LB</text>\n";
    out << "<text x=\"" << num(kMargin + kWidth / 2) << "\" y=\"" << num(top + kHeight + 30)
        << "\" text-anchor=\"middle\">time (" << t0 << " .. " << t1 << ")</text>\n"
        << "<text x=\"" << num(kMargin - 10) << "\" y=\"" << num(top + kHeight)
        << "\" text-anchor=\"end\">0</text>\n"
        << "<text x=\"" << num(kMargin - 10) << "\" y=\"" << num(y(plan.arena) + 4)
        << "\" text-anchor=\"end\">" << plan.arena << "</text>\n"
        << "<text transform=\"translate(" << num(18) << "," << num(top + kHeight / 2)
        << ") rotate(-90)\" text-anchor=\"middle\">offset (bytes)</text>\n";
  }
  out << "</svg>\n";
  file.commit();
}

}  // namespace luma::tools
