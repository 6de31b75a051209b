// memviz_export.cpp - the snapshot PyTorch's memory viewer opens
// (torch.cuda.memory._dump_snapshot's schema, ../shared/notes/reference-systems.md):
// {segments, device_traces, allocator_settings}. Segments and their blocks are the state
// at the end of the trace; device_traces list every event per device. One pass for the
// final state, one per device for its trace, so memory stays in proportion to the live
// state, not to the number of events. An RMM log has no completion events (its frees are
// immediate), so it gets a free_completed right after each free_requested: PyTorch's
// viewer frees a block only at free / free_completed.
#include <map>
#include <set>
#include <sstream>

#include "exports.h"
#include "pickle_writer.h"
#include "trace/trace_format.h"

namespace luma::tools {

namespace {

struct Segment {
  int device = 0;
  std::uint64_t size = 0, stream = 0;
};
struct Block {
  std::uint64_t size = 0, requested = 0;
  bool pending = false;  // freed, fences not yet completed
  std::uint32_t stack = 0;
};

void frames(PickleWriter& p, RecordedRun& run, Symbolizer* sym, std::uint32_t stack) {
  p.begin_list();
  for (std::uint64_t a : run.stack(stack)) {
    p.begin_dict();
    p.text("filename");
    if (sym) {
      const Frame& f = sym->frame(a);
      p.text(f.file.empty() ? "??" : f.file);
      p.text("line");
      p.integer(f.line);
      p.text("name");
      p.text(f.function);
    } else {
      p.text("??");
      p.text("line");
      p.integer(0);
      p.text("name");
      std::ostringstream s;
      s << "0x" << std::hex << a;
      p.text(s.str());
    }
    p.end_dict();
  }
  p.end_list();
}

std::string_view action(core::EventKind k) {
  switch (k) {
    case core::EventKind::alloc: return "alloc";
    case core::EventKind::free_requested: return "free_requested";
    case core::EventKind::free_completed: return "free_completed";
    case core::EventKind::segment_reserve: return "segment_alloc";
    case core::EventKind::segment_release: return "segment_free";
    case core::EventKind::oom: return "oom";
    case core::EventKind::empty_cache: return "";  // no such action in the viewer
  }
  return "";
}

}  // namespace

void export_memviz(RecordedRun& run, std::ostream& out, Symbolizer* sym) {
  std::map<std::uint64_t, Segment> segments;
  std::map<std::uint64_t, Block> blocks;
  std::set<int> devices;
  const bool add_completions = run.frees_complete_at_once();
  run.read([&](const core::TraceEvent& e) {
    devices.insert(e.device);
    switch (e.kind) {
      case core::EventKind::segment_reserve: segments[e.address] = {e.device, e.size, e.stream}; break;
      case core::EventKind::segment_release: segments.erase(e.address); break;
      case core::EventKind::alloc: blocks[e.address] = {e.size, e.requested, false, e.stack}; break;
      case core::EventKind::free_requested: {
        auto it = blocks.find(e.address);
        if (it != blocks.end()) it->second.pending = true;
        break;
      }
      case core::EventKind::free_completed: blocks.erase(e.address); break;
      default: break;
    }
  });
  if (add_completions) std::erase_if(blocks, [](const auto& b) { return b.second.pending; });
  for (const auto& d : run.header().devices) devices.insert(static_cast<int>(d.index));

  PickleWriter p(out);
  p.begin_dict();
  p.text("segments");
  p.begin_list();
  for (const auto& [base, s] : segments) {
    // Blocks inside the segment; the gaps between them are inactive (free) blocks.
    std::uint64_t allocated = 0, active = 0, requested = 0;
    auto first = blocks.lower_bound(base);
    auto last = blocks.lower_bound(base + s.size);
    for (auto it = first; it != last; ++it) {
      active += it->second.size;
      if (!it->second.pending) {
        allocated += it->second.size;
        requested += it->second.requested;
      }
    }
    p.begin_dict();
    p.text("device"); p.integer(s.device);
    p.text("address"); p.unsigned_integer(base);
    p.text("total_size"); p.unsigned_integer(s.size);
    p.text("allocated_size"); p.unsigned_integer(allocated);
    p.text("active_size"); p.unsigned_integer(active);
    p.text("requested_size"); p.unsigned_integer(requested);
    p.text("stream"); p.unsigned_integer(s.stream);
    p.text("segment_type"); p.text(s.size <= kSmallSegmentBytes ? "small" : "large");
    p.text("segment_pool_id"); p.pair(0, 0);
    p.text("is_expandable"); p.integer(0);
    p.text("frames"); p.begin_list(); p.end_list();
    p.text("blocks");
    p.begin_list();
    std::uint64_t at = base;
    auto gap = [&](std::uint64_t to) {
      if (to <= at) return;
      p.begin_dict();
      p.text("address"); p.unsigned_integer(at);
      p.text("size"); p.unsigned_integer(to - at);
      p.text("requested_size"); p.integer(0);
      p.text("state"); p.text("inactive");
      p.text("frames"); p.begin_list(); p.end_list();
      p.end_dict();
    };
    for (auto it = first; it != last; ++it) {
      gap(it->first);
      p.begin_dict();
      p.text("address"); p.unsigned_integer(it->first);
      p.text("size"); p.unsigned_integer(it->second.size);
      p.text("requested_size"); p.unsigned_integer(it->second.requested);
      p.text("state"); p.text(it->second.pending ? "active_pending_free" : "active_allocated");
      p.text("frames"); frames(p, run, sym, it->second.stack);
      p.end_dict();
      at = std::max(at, it->first + it->second.size);
    }
    gap(base + s.size);
    p.end_list();
    p.end_dict();
  }
  p.end_list();

  p.text("device_traces");
  p.begin_list();
  const int max_device = devices.empty() ? -1 : *devices.rbegin();
  for (int d = 0; d <= max_device; ++d) {
    p.begin_list();
    if (devices.count(d)) {
      run.read(
          [&](const core::TraceEvent& e) {
            if (e.device != d) return;
            const std::string_view a = action(e.kind);
            if (a.empty()) return;
            auto entry = [&](std::string_view name) {
              p.begin_dict();
              p.text("action"); p.text(name);
              p.text("addr"); p.unsigned_integer(e.address);
              p.text("size"); p.unsigned_integer(e.kind == core::EventKind::oom ? e.requested : e.size);
              p.text("stream"); p.unsigned_integer(e.stream);
              p.text("time_us"); p.unsigned_integer(e.time_ns / 1000);
              p.text("frames"); frames(p, run, sym, e.stack);
              p.end_dict();
            };
            entry(a);
            if (e.kind == core::EventKind::free_requested && add_completions)
              entry(action(core::EventKind::free_completed));
          },
          false);
    }
    p.end_list();
  }
  p.end_list();

  // The settings in force, "key:value,..." as recorded; numbers become ints.
  p.text("allocator_settings");
  p.begin_dict();
  std::istringstream settings(run.header().settings);
  std::string kv;
  while (std::getline(settings, kv, ',')) {
    const auto colon = kv.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = kv.substr(0, colon), value = kv.substr(colon + 1);
    p.text(key);
    const bool numeric = !value.empty() && value.size() < 19 &&
                         value.find_first_not_of("0123456789") == std::string::npos;
    if (numeric) p.integer(std::stoll(value)); else p.text(value);
  }
  p.end_dict();
  p.end_dict();
  p.finish();
}

}  // namespace luma::tools
