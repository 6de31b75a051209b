// replay_stats_format.cpp - ReplayStats as text and JSON. Hand-written JSON through fmt,
// as stats_format.cpp does: nothing here may rely on a static object at exit.
#include "replay/replay_stats_format.h"

#include <string_view>

#include <fmt/format.h>

#include "stats/stats_format.h"

namespace luma::core {
namespace {

// fmt rather than "\"" + s: GCC 12 at -O3 reports a false -Wrestrict for a
// literal prepended to a std::string (GCC bug 105329).
std::string json_string(std::string_view s) { return fmt::format("\"{}\"", json_escape(s)); }

const char* yes_no(bool b) { return b ? "true" : "false"; }

// A device was served from its plan: it followed it and the plan served something.
bool served_from_plan(const ReplayStats& s) { return s.followed() && s.served > 0; }

bool all_served(const ReplaySummary& summary, const std::vector<ReplayStats>& devices) {
  if (!summary.accepted) return false;
  bool any = false;
  for (const ReplayStats& s : devices) {
    if (!s.followed()) return false;
    any = any || s.served > 0;
  }
  return any;
}

std::string how_far(const ReplayStats& s) {
  if (s.period > 0 && s.served > s.warmup)
    return fmt::format("{} allocations from the plan (warm-up {}, then {} full iteration(s) of a {}-allocation "
                       "period)",
                       s.served, s.warmup, s.iterations, s.period);
  return fmt::format("{} of {} planned allocations from the plan", s.served, s.planned_allocations);
}

}  // namespace

std::string describe_divergence(const Divergence& d) {
  switch (d.reason) {
    case DivergenceReason::none:
      return "no divergence";
    case DivergenceReason::size_mismatch:
      return fmt::format("allocation {} asked for {} bytes where the plan has {}", d.sequence, d.requested,
                         d.planned_requested);
    case DivergenceReason::beyond_plan:
      return fmt::format("allocation {} is beyond the plan's {} allocations", d.sequence, d.planned_allocations);
    case DivergenceReason::live_conflict:
      return fmt::format("allocation {} is planned on bytes that allocation {} still holds (freed later than "
                         "planned)",
                         d.sequence, d.conflicting_sequence);
    case DivergenceReason::arena_unavailable:
      if (d.device_error != 0)
        return fmt::format("allocation {}: the device failed the arena of {} ({} bytes) with error {}", d.sequence,
                           format_bytes(d.arena_bytes), d.arena_bytes, d.device_error);
      return fmt::format("allocation {}: the device has no room for the arena of {} ({} bytes)", d.sequence,
                         format_bytes(d.arena_bytes), d.arena_bytes);
    case DivergenceReason::context_lost:
      return fmt::format("allocation {}: the device's context was destroyed (the arena went with it)", d.sequence);
    case DivergenceReason::incompatible_plan:
      return fmt::format("allocation {}: the plan cannot be served: its alignment {} is below the {} the "
                         "allocator promises, or an allocation lies outside its arena, or its periodic "
                         "layout does not match its allocations",
                         d.sequence, d.plan_alignment, d.allocator_alignment);
  }
  return "unknown divergence";
}

std::string format_replay_text(const ReplaySummary& summary, const std::vector<ReplayStats>& devices) {
  std::string out;
  if (!summary.accepted) {
    out += fmt::format("luma: plan replay ({}): refused: {}; every device was served by the caching allocator\n",
                       summary.plan, summary.refused);
    return out;
  }
  out += fmt::format("luma: plan replay ({}): served from the plan: {}\n", summary.plan,
                     all_served(summary, devices) ? "yes" : "no");
  for (const ReplayStats& s : devices) {
    std::string line = fmt::format("  device {}: ", s.device);
    if (served_from_plan(s)) {
      line += "served from the plan: yes; " + how_far(s);
    } else if (s.followed()) {
      line += "served from the plan: no allocation was made";
    } else {
      line += fmt::format("served from the plan: {}, diverged at {}; {}; {} by the caching allocator",
                          s.served > 0 ? "partly" : "no", describe_divergence(s.first_divergence), how_far(s),
                          s.cache_allocations);
    }
    line += fmt::format("; real allocations {} (arena {}{})\n", s.real_allocations, format_bytes(s.arena_bytes),
                        s.arena_held ? "" : ", not held");
    out += line;
  }
  return out;
}

std::string format_replay_json(const ReplaySummary& summary, const std::vector<ReplayStats>& devices) {
  std::uint64_t divergences = 0;
  for (const ReplayStats& s : devices) divergences += s.divergences;
  std::string out = fmt::format(
      "{{\"file\": {}, \"accepted\": {}, \"refused\": {}, \"served_from_plan\": {}, \"divergences\": {}, "
      "\"devices\": [",
      json_string(summary.plan), yes_no(summary.accepted), json_string(summary.refused),
      yes_no(all_served(summary, devices)), divergences);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const ReplayStats& s = devices[i];
    if (i > 0) out += ", ";
    std::string first = "null";
    if (!s.followed())
      first = fmt::format("{{\"sequence\": {}, \"reason\": {}, \"message\": {}}}", s.first_divergence.sequence,
                          json_string(divergence_reason_name(s.first_divergence.reason)),
                          json_string(describe_divergence(s.first_divergence)));
    out += fmt::format(
        "{{\"device\": {}, \"served_from_plan\": {}, \"planned_allocations\": {}, \"warmup\": {}, \"period\": {}, "
        "\"arena_bytes\": {}, \"arena_held\": {}, \"served\": {}, \"iterations\": {}, \"divergences\": {}, "
        "\"first_divergence\": {}, \"arena_reservations\": {}, \"real_allocations\": {}, "
        "\"cache_allocations\": {}, \"fence_waits\": {}}}",
        s.device, yes_no(served_from_plan(s)), s.planned_allocations, s.warmup, s.period, s.arena_bytes,
        yes_no(s.arena_held), s.served, s.iterations, s.divergences, first, s.arena_reservations,
        s.real_allocations, s.cache_allocations, s.fence_waits);
  }
  out += "]}";
  return out;
}

}  // namespace luma::core
