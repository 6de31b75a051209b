// memory_svg.h - a picture of memory over a recorded run (`luma stats --svg`, `luma simulate
// --svg`): one line per series - the bytes live after each event, the bytes reserved as
// recorded (a PyTorch snapshot's; a luma trace's segments), and luma's reserved in a
// replay under each --conf - over the recorded clock (seconds) or, without one, the
// allocation number; each series' peak marked, a snapshot's stages shaded, the axes in
// GiB / MiB and seconds, a legend. A series of more than max_points events is drawn from
// max_points buckets of the x range, each bucket's largest value kept, so no peak is lost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "torch_snapshot/torch_snapshot.h"

namespace luma::tools {

struct MemoryPoint {
  double x = 0;             // seconds on the recorded clock, or the allocation number
  std::uint64_t bytes = 0;  // from this x on, until the next point
};

struct MemorySeries {
  enum class Kind { live, recorded, simulated };
  Kind kind = Kind::live;
  std::string label;                // the legend's text
  std::vector<MemoryPoint> points;  // in x order
  // Only a value, not a timeline (a recorded peak): drawn as a horizontal line across the
  // run at points.front().bytes, and said so in the legend by the caller's label.
  bool constant = false;
};

struct MemoryStage {
  std::string name;
  double from = 0, to = 0;  // on the picture's x axis (seconds)
};

struct MemoryPicture {
  std::string title;
  bool clock = false;  // x is seconds on the recorded clock; else the allocation number
  std::vector<MemorySeries> series;
  std::vector<MemoryStage> stages;  // shaded, one colour per name
};

inline constexpr std::size_t kMemorySvgPoints = 2000;

// The SVG text: <polyline class="series"> per series (data-series its label), a <circle
// class="peak"> at each one's peak, <rect class="stage"> per stage range.
// Text made safe inside an SVG (XML) element or attribute: < > & " ' escaped.
std::string xml_escape(const std::string& text);

std::string memory_svg(const MemoryPicture& picture, std::size_t max_points = kMemorySvgPoints);

// Writes memory_svg(picture) to `path` whole or not at all (core::OutputFile). Throws
// std::runtime_error naming the path.
void write_memory_svg(const std::string& path, const MemoryPicture& picture);

// At most max_points points: the x range cut into max_points buckets, each bucket's point
// with the most bytes kept (the first of equals), so the peak is always among them.
std::vector<MemoryPoint> downsample_max(const std::vector<MemoryPoint>& points, std::size_t max_points);

// A snapshot's stages on `device` (and those of every device), in seconds on the sequences'
// clock; a stage without an END lasts to `end_ns`.
std::vector<MemoryStage> snapshot_stages(const core::TorchSnapshot& snapshot, int device, std::uint64_t end_ns);

}  // namespace luma::tools
