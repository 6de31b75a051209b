// memory_svg.cpp - the picture of memory over a run (see memory_svg.h), in the style of
// `luma plan --svg` (plan_svg.cpp): white ground, sans-serif 12, plain SVG elements only.
#include "exports/memory_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "io/output_file.h"

namespace luma::tools {

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// The plot's box inside the picture; the legend to its right.
constexpr double kWidth = 1200, kHeight = 640;
constexpr double kLeft = 80, kRight = 880, kTop = 50, kBottom = 580;
constexpr double kLegendX = 900;

const char* const kSimColors[] = {"#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
const char* const kStageColors[] = {"#ffd966", "#a4c2f4", "#b6d7a8", "#ea9999", "#d5a6bd", "#f9cb9c", "#a2c4c9"};


std::string num(double v) { return fmt::format("{:.1f}", v); }

// 1, 2 or 5 x 10^k: the tick step for about `ticks` ticks over `span`.
double nice_step(double span, int ticks) {
  if (!(span > 0)) return 1;
  const double raw = span / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

struct Unit {
  double bytes;
  const char* name;
};

Unit unit_for(std::uint64_t top) {
  if (top >= (std::uint64_t{1} << 30)) return {double(std::uint64_t{1} << 30), "GiB"};
  if (top >= (std::uint64_t{1} << 20)) return {double(std::uint64_t{1} << 20), "MiB"};
  if (top >= 1024) return {1024.0, "KiB"};
  return {1.0, "B"};
}

std::string bytes_label(std::uint64_t b) {
  const Unit u = unit_for(b);
  return u.bytes == 1 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", double(b) / u.bytes, u.name);
}

std::string tick_label(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{:g}", v);
}

const char* color_of(const MemorySeries& s, std::size_t simulated_index) {
  switch (s.kind) {
    case MemorySeries::Kind::live: return "#1f77b4";
    case MemorySeries::Kind::recorded: return "#ff7f0e";
    case MemorySeries::Kind::simulated: break;
  }
  return kSimColors[simulated_index % std::size(kSimColors)];
}

}  // namespace

std::vector<MemoryPoint> downsample_max(const std::vector<MemoryPoint>& points, std::size_t max_points) {
  if (points.size() <= max_points || max_points == 0) return points;
  const double x0 = points.front().x, x1 = points.back().x;
  std::vector<MemoryPoint> out;
  out.reserve(max_points);
  if (!(x1 > x0)) {  // every point at one x: the largest
    out.push_back(*std::max_element(points.begin(), points.end(),
                                    [](const MemoryPoint& a, const MemoryPoint& b) { return a.bytes < b.bytes; }));
    return out;
  }
  const double width = (x1 - x0) / double(max_points);
  std::size_t current = SIZE_MAX;
  for (const MemoryPoint& p : points) {
    const std::size_t b = std::min(max_points - 1, static_cast<std::size_t>((p.x - x0) / width));
    if (b != current) {
      out.push_back(p);
      current = b;
    } else if (p.bytes > out.back().bytes) {
      out.back() = p;
    }
  }
  return out;
}

std::vector<MemoryStage> snapshot_stages(const core::TorchSnapshot& snapshot, int device, std::uint64_t end_ns) {
  std::vector<MemoryStage> out;
  for (const core::TorchStage& st : snapshot.stages) {
    if (st.device != -1 && st.device != device) continue;
    const std::uint64_t to = std::min(st.end_ns, end_ns);
    if (to < st.start_ns) continue;
    out.push_back({st.name, double(st.start_ns) / 1e9, double(to) / 1e9});
  }
  return out;
}

std::string memory_svg(const MemoryPicture& picture, std::size_t max_points) {
  // The ranges: x over every series and stage; y from 0 to the largest value.
  double x0 = INFINITY, x1 = -INFINITY;
  std::uint64_t top = 0;
  for (const MemorySeries& s : picture.series)
    for (const MemoryPoint& p : s.points) {
      if (!s.constant) {
        x0 = std::min(x0, p.x);
        x1 = std::max(x1, p.x);
      }
      top = std::max(top, p.bytes);
    }
  if (!std::isfinite(x0)) x0 = x1 = 0;
  if (!(x1 > x0)) x1 = x0 + 1;
  const Unit unit = unit_for(top);
  const double y_step = nice_step(std::max(double(top), 1.0) / unit.bytes, 6);
  const double y_top = std::max(y_step, std::ceil(double(top) / unit.bytes / y_step) * y_step);
  const auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kRight - kLeft); };
  const auto Y = [&](std::uint64_t b) { return kBottom - double(b) / unit.bytes / y_top * (kBottom - kTop); };

  std::string out;
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      num(kWidth), num(kHeight), num(kWidth), num(kHeight));
  out += fmt::format("<text x=\"{}\" y=\"28\" font-size=\"15\">{}</text>\n", num(kLeft), xml_escape(picture.title));

  // Stages: shaded bands behind the lines, ranges of one name merged where they touch on screen.
  std::map<std::string, std::size_t> stage_color;
  std::vector<std::string> stage_names;
  {
    std::map<std::string, std::vector<std::pair<double, double>>> by_name;
    for (const MemoryStage& st : picture.stages) {
      if (stage_color.try_emplace(st.name, stage_names.size()).second) stage_names.push_back(st.name);
      const double a = std::clamp(X(st.from), kLeft, kRight), b = std::clamp(X(st.to), kLeft, kRight);
      by_name[st.name].push_back({a, std::max(b, a + 0.5)});
    }
    out += "<g class=\"stages\" opacity=\"0.45\">\n";
    for (const std::string& name : stage_names) {
      auto& ranges = by_name[name];
      std::sort(ranges.begin(), ranges.end());
      std::vector<std::pair<double, double>> merged;
      for (const auto& r : ranges)
        if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
        else merged.push_back(r);
      const char* color = kStageColors[stage_color[name] % std::size(kStageColors)];
      for (const auto& [a, b] : merged)
        out += fmt::format("<rect class=\"stage\" data-stage=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
                           "fill=\"{}\"><title>{}</title></rect>\n",
                           xml_escape(name), num(a), num(kTop), fmt::format("{:.2f}", b - a), num(kBottom - kTop), color,
                           xml_escape(name));
    }
    out += "</g>\n";
  }

  // Axes, grid and ticks.
  out += "<g class=\"axes\" stroke=\"#000\">\n";
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>\n", num(kLeft), num(kBottom), num(kRight));
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", num(kLeft), num(kTop), num(kBottom));
  out += "</g>\n<g class=\"ticks\">\n";
  for (double v = 0; v <= y_top + y_step / 2; v += y_step) {
    const double y = kBottom - v / y_top * (kBottom - kTop);
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#ddd\"/>\n", num(kLeft), num(y), num(kRight));
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {}</text>\n", num(kLeft - 6), num(y + 4),
                       tick_label(v), unit.name);
  }
  const double x_step = nice_step(x1 - x0, 8);
  for (double v = std::ceil(x0 / x_step) * x_step; v <= x1 + x_step * 1e-9; v += x_step) {
    const double x = X(v);
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#000\"/>\n", num(x), num(kBottom),
                       num(kBottom + 5));
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(x), num(kBottom + 18),
                       tick_label(std::round(v / x_step) * x_step));
  }
  out += "</g>\n";
  out += fmt::format("<text class=\"x-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     num((kLeft + kRight) / 2), num(kBottom + 40),
                     picture.clock ? "time (s, recorded clock)" : "allocation number (no recorded clock)");
  out += fmt::format("<text class=\"y-label\" transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">bytes ({})</text>\n",
                     num((kTop + kBottom) / 2), unit.name);

  // The series, then their peaks on top.
  std::size_t simulated = 0;
  std::vector<const char*> colors;
  for (const MemorySeries& s : picture.series) {
    const char* color = color_of(s, simulated);
    if (s.kind == MemorySeries::Kind::simulated) ++simulated;
    colors.push_back(color);
    std::string pts;
    if (s.constant && !s.points.empty()) {
      pts = fmt::format("{},{} {},{}", num(kLeft), num(Y(s.points.front().bytes)), num(kRight), num(Y(s.points.front().bytes)));
    } else {
      for (const MemoryPoint& p : downsample_max(s.points, max_points)) {
        if (!pts.empty()) pts += ' ';
        pts += num(X(p.x)) + ',' + num(Y(p.bytes));
      }
    }
    out += fmt::format("<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"{} "
                       "points=\"{}\"/>\n",
                       xml_escape(s.label), color, s.kind == MemorySeries::Kind::live ? "1.5" : "1.2",
                       s.constant ? " stroke-dasharray=\"6,4\"" : "", pts);
  }
  // Peak labels moved down until they overlap no label placed before (peaks often meet).
  std::vector<std::pair<double, double>> placed;  // each label's left x and baseline
  for (std::size_t i = 0; i < picture.series.size(); ++i) {
    const MemorySeries& s = picture.series[i];
    if (s.points.empty()) continue;
    const MemoryPoint peak = *std::max_element(
        s.points.begin(), s.points.end(), [](const MemoryPoint& a, const MemoryPoint& b) { return a.bytes < b.bytes; });
    const double x = s.constant ? kRight : X(peak.x), y = Y(peak.bytes);
    out += fmt::format("<circle class=\"peak\" data-series=\"{}\" data-bytes=\"{}\" cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\" "
                       "stroke=\"#000\"><title>peak {}</title></circle>\n",
                       xml_escape(s.label), peak.bytes, num(x), num(y), colors[i], bytes_label(peak.bytes));
    const bool left = x > kRight - 100;
    const double lx = left ? x - 6 - 70 : x + 6;
    double ly = std::max(y - 6, kTop + 10);
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& [px, py] : placed)
        if (std::fabs(px - lx) < 80 && std::fabs(py - ly) < 13) {
          ly = py + 13;
          moved = true;
        }
    }
    placed.push_back({lx, ly});
    out += fmt::format("<text class=\"peak-label\" x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", num(lx), num(ly),
                       colors[i], bytes_label(peak.bytes));
  }

  // The legend: each series with its peak, then the stages.
  double ly = kTop + 6;
  out += "<g class=\"legend\">\n";
  for (std::size_t i = 0; i < picture.series.size(); ++i) {
    const MemorySeries& s = picture.series[i];
    std::uint64_t peak = 0;
    for (const MemoryPoint& p : s.points) peak = std::max(peak, p.bytes);
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"3\"{4}/>\n",
                       num(kLegendX), num(ly), num(kLegendX + 22), colors[i], s.constant ? " stroke-dasharray=\"6,4\"" : "");
    const std::string label = s.label.size() > 44 ? s.label.substr(0, 43) + "..." : s.label;
    out += fmt::format("<text x=\"{}\" y=\"{}\">{}<title>{}</title></text>\n", num(kLegendX + 28), num(ly + 4),
                       xml_escape(label), xml_escape(s.label));
    out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">peak {}</text>\n", num(kLegendX + 28), num(ly + 18),
                       bytes_label(peak));
    ly += 36;
  }
  if (!stage_names.empty()) {
    out += fmt::format("<text x=\"{}\" y=\"{}\">stages (shaded):</text>\n", num(kLegendX), num(ly + 4));
    ly += 18;
    for (const std::string& name : stage_names) {
      if (ly > kBottom) break;
      const char* color = kStageColors[stage_color[name] % std::size(kStageColors)];
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"22\" height=\"10\" fill=\"{}\" opacity=\"0.6\"/>\n",
                         num(kLegendX), num(ly - 5), color);
      out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", num(kLegendX + 28), num(ly + 4),
                         xml_escape(name.size() > 40 ? name.substr(0, 39) + "..." : name));
      ly += 16;
    }
  }
  out += "</g>\n</svg>\n";
  return out;
}

void write_memory_svg(const std::string& path, const MemoryPicture& picture) {
  core::write_output_file(path, memory_svg(picture));
}

}  // namespace luma::tools
