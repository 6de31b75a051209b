// plan_files.h - the files `luma plan` writes: the plan JSON, MiniMalloc's CSV with an
// offset column, and an SVG picture. Each throws std::runtime_error naming the path when it
// cannot write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exports/device_plan.h"

namespace luma::tools {

// `fingerprint`: the run the input recorded (luma traces only), written for plan replay.
void write_plan_json(const std::string& path, const std::string& input,
                     const std::vector<DevicePlan>& plans,
                     const core::RunFingerprint* fingerprint = nullptr);
void write_plan_csv(const std::string& path, const std::vector<DevicePlan>& plans);
// What the SVG draws: at most `max_buffers` rectangles per device (the largest buffers),
// and only buffers live at some point of [from, to] (event indices, the lifetimes'
// lower/upper), the picture's time axis cut to that window.
struct SvgOptions {
  std::size_t max_buffers = 100000;  // beyond this a viewer crawls
  std::optional<std::uint64_t> from, to;
};
void write_plan_svg(const std::string& path, const std::vector<DevicePlan>& plans,
                    const SvgOptions& options = {});

}  // namespace luma::tools
