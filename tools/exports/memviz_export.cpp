// memviz_export.cpp - the snapshot PyTorch's memory viewer opens (MemoryViz.js and
// `python -m torch.cuda._memory_viz`), with the fields, types and units PyTorch's own
// torch.cuda.memory._snapshot() writes (docs/memviz.md lists them and what luma puts in
// each): {segments, device_traces, allocator_settings}. Segments and their blocks are the
// state at the end of the (possibly windowed) trace; device_traces list the events per
// device. One pass for the final state, one per device for its trace, so memory stays in
// proportion to the live state, not to the number of events.
//
// What the viewer needs that a luma trace does not say directly:
// - Segments and completions for an RMM log. It has neither (its frees are immediate,
//   its pointers are read as buffer numbers): each buffer becomes its own segment, laid
//   out one after another from 4 GiB (the viewer draws a block only inside a segment),
//   reserved right before its alloc and released right after its free, which completes
//   at once. A luma trace's frees still pending when the trace ends complete at its
//   last event: the process exited and its memory went with it
//   (PyTorch's viewer frees a block only at free_completed; without them every last block
//   is drawn "waiting" and the timeline never comes down).
// - Sizes: PyTorch records the requested size on alloc and free entries (the rounded
//   size is the block's `size` in the segments); a free's is its alloc's.
// - Frames on every entry (Python frames first, then native: FrameWriter): a free carries
//   its alloc's call site, a segment the call site of the
//   allocation it was reserved for (the next alloc of the same thread), as PyTorch
//   records the allocating context when no other is known.
// - time_us: microseconds since 1970, the header's wall-clock start plus the event time.
// - oom's device_free: the device's total memory (header) less what luma had reserved
//   then; the trace does not hold the driver's figure.
// - Expandable segments: the trace has one event per page mapped or unmapped
//   (is_mapped_pages, core/base/event.h), and a block may span many pages. As PyTorch
//   does, each contiguous mapped range of a device is one segment with is_expandable,
//   and the pages' entries are segment_map / segment_unmap, which the viewer merges into
//   (splits from) such a range. The viewer merges only ranges of one stream, and luma's
//   ranges serve every stream (a page's recorded stream is that of the call that grew
//   it): pages are given stream 0, in the segments and in the entries.
#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "exports/exports.h"
#include "io/memviz_layout.h"
#include "io/pickle_writer.h"
#include "trace/trace_format.h"

namespace luma::tools {

namespace {

using core::PickleWriter;
using core::memviz::action_name;

// An event's call site: its native stack id and its Python stack id (0: none of either).
using SiteKey = std::uint64_t;
SiteKey site_of(const core::TraceEvent& e) {
  return SiteKey{e.stack} | SiteKey{e.python_stack} << 32;
}
std::uint32_t native_stack_of(SiteKey k) { return static_cast<std::uint32_t>(k); }
std::uint32_t python_stack_of(SiteKey k) { return static_cast<std::uint32_t>(k >> 32); }

struct Segment {
  int device = 0;
  std::uint64_t size = 0, stream = 0;
  SiteKey stack = 0;
  bool pages = false;  // mapped pages of an expandable segment
};

// The segments of the snapshot: each ordinary one alone, each run of adjacent mapped pages
// (of one device) as one. Calls fn(base, size, first page's Segment, expandable).
template <class Fn>
void for_each_snapshot_segment(const std::map<std::uint64_t, Segment>& segments, Fn&& fn) {
  for (auto it = segments.begin(); it != segments.end();) {
    const std::uint64_t base = it->first;
    const Segment& first = it->second;
    std::uint64_t end = base + first.size;
    ++it;
    if (first.pages)
      for (; it != segments.end() && it->second.pages && it->first == end &&
             it->second.device == first.device;
           ++it)
        end += it->second.size;
    fn(base, end - base, first, first.pages);
  }
}
struct Block {
  int device = 0;
  std::uint64_t size = 0, requested = 0;
  bool pending = false;  // freed, fences not yet completed
  SiteKey stack = 0;
};

// Frames are written once per call site and shared through the pickle's memo, as
// PyTorch's pickler shares its frame lists (a 60,000-event run otherwise repeats them
// 60,000 times). A call site's Python frames come first, innermost first, as PyTorch's
// snapshots list them ({filename, line, name}), then its native frames.
class FrameWriter {
 public:
  FrameWriter(PickleWriter& p, RecordedRun& run, Symbolizer* sym) : p_(p), run_(run), sym_(sym) {}
  void write(SiteKey site) {
    auto it = memo_.find(site);
    if (it != memo_.end()) {
      p_.memo_get(it->second);
      return;
    }
    p_.begin_list();
    for (const core::TracePythonFrame& f : run_.python_stack(python_stack_of(site))) {
      p_.begin_dict();
      p_.key("filename");
      p_.text(f.file);
      p_.key("line");
      p_.integer(f.line);
      p_.key("name");
      p_.text(f.function);
      p_.end_dict();
    }
    for (std::uint64_t a : run_.stack(native_stack_of(site))) {
      p_.begin_dict();
      p_.key("filename");
      if (sym_) {
        const Frame& f = sym_->frame(a);
        p_.text(f.file.empty() ? "??" : f.file);
        p_.key("line");
        p_.integer(f.line);
        p_.key("name");
        p_.text(f.function);
      } else {
        p_.key("??");
        p_.key("line");
        p_.integer(0);
        p_.key("name");
        std::ostringstream s;
        s << "0x" << std::hex << a;
        p_.text(s.str());
      }
      p_.end_dict();
    }
    memo_.emplace(site, p_.end_list_memoized());
  }

 private:
  PickleWriter& p_;
  RecordedRun& run_;
  Symbolizer* sym_;
  std::unordered_map<SiteKey, std::uint32_t> memo_;
};

// The run's events; an RMM log's in the shape of a trace (see the top of the file).
void read_events(RecordedRun& run, const core::TraceReader::EventFn& fn, bool progress) {
  if (!run.frees_complete_at_once()) {
    run.read(fn, progress);
    return;
  }
  constexpr std::uint64_t kBase = 4ull << 30, kAlign = 512;
  std::uint64_t next = kBase;
  std::unordered_map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> where;
  run.read(
      [&](const core::TraceEvent& e) {
        core::TraceEvent x = e;
        switch (e.kind) {
          case core::EventKind::alloc: {
            const std::uint64_t size = std::max<std::uint64_t>(e.size, 1);
            x.address = next;
            x.size = size;
            x.requested = e.requested ? e.requested : size;
            where[e.address] = {next, size};
            next += (size + kAlign - 1) / kAlign * kAlign;
            core::TraceEvent seg = x;
            seg.kind = core::EventKind::segment_reserve;
            seg.requested = 0;
            fn(seg);
            fn(x);
            return;
          }
          case core::EventKind::free_requested: {
            auto it = where.find(e.address);
            if (it == where.end()) return;
            x.address = it->second.first;
            x.size = it->second.second;
            where.erase(it);
            fn(x);
            x.kind = core::EventKind::free_completed;
            fn(x);
            x.kind = core::EventKind::segment_release;
            fn(x);
            return;
          }
          default: fn(x); return;
        }
      },
      progress);
}

}  // namespace

void export_memviz(RecordedRun& run, std::ostream& out, Symbolizer* sym,
                   const WindowOptions& options) {
  const std::uint64_t from_ns = options.from_ns.value_or(0);
  const std::uint64_t to_ns = options.to_ns.value_or(UINT64_MAX);
  if (from_ns > to_ns) throw std::runtime_error("the time window ends before it starts");
  auto in_window = [&](std::uint64_t t) { return t >= from_ns && t <= to_ns; };

  // Pass 1: the state at the window's end, segment stacks, and entries per device.
  std::map<std::uint64_t, Segment> segments;
  std::map<std::uint64_t, Block> blocks;
  std::set<int> devices;
  std::unordered_map<std::uint64_t, SiteKey> segment_stack;  // reserve index -> stack
  // Segments reserved by a thread whose alloc has not come yet: (device, thread) -> bases.
  std::map<std::pair<int, std::uint64_t>, std::vector<std::pair<std::uint64_t, std::uint64_t>>>
      awaiting_alloc;
  std::map<int, std::uint64_t> entries;  // per device, in the window
  std::uint64_t last_ns = 0;
  bool past_window = false;
  read_events(run, [&](const core::TraceEvent& e) {
    devices.insert(e.device);
    if (e.time_ns > to_ns) {
      past_window = true;
      return;
    }
    last_ns = std::max(last_ns, e.time_ns);
    if (in_window(e.time_ns) && !action_name(e.kind).empty())
      ++entries[e.device];
    const auto who = std::make_pair(e.device, e.thread);
    switch (e.kind) {
      case core::EventKind::segment_reserve:
        if (core::is_mapped_pages(e.kind, e.size, e.requested))
          segments[e.address] = {e.device, e.size, 0, 0, true};  // stream 0: see the top
        else
          segments[e.address] = {e.device, e.size, e.stream, 0, false};
        awaiting_alloc[who].emplace_back(e.address, e.index);
        break;
      case core::EventKind::segment_release: segments.erase(e.address); break;
      case core::EventKind::alloc: {
        blocks[e.address] = {e.device, e.size, e.requested, false, site_of(e)};
        auto it = awaiting_alloc.find(who);
        if (it != awaiting_alloc.end()) {
          for (const auto& [base, index] : it->second) {
            if (site_of(e)) segment_stack[index] = site_of(e);
            auto s = segments.find(base);
            if (s != segments.end()) s->second.stack = site_of(e);
          }
          awaiting_alloc.erase(it);
        }
        break;
      }
      case core::EventKind::oom: awaiting_alloc.erase(who); break;  // that call failed
      case core::EventKind::free_requested: {
        auto it = blocks.find(e.address);
        if (it != blocks.end()) it->second.pending = true;
        break;
      }
      case core::EventKind::free_completed: blocks.erase(e.address); break;
      default: break;
    }
  }, true);
  // Frees pending at the end of the trace complete there (not at a window's end: there
  // they are still pending).
  std::map<int, std::vector<std::uint64_t>> completed_at_end;
  if (!past_window) {
    for (auto it = blocks.begin(); it != blocks.end();) {
      if (!it->second.pending) {
        ++it;
        continue;
      }
      const int device = it->second.device;
      completed_at_end[device].push_back(it->first);
      if (in_window(last_ns)) ++entries[device];
      it = blocks.erase(it);
    }
  }
  for (const auto& d : run.header().devices) devices.insert(static_cast<int>(d.index));
  std::map<int, std::uint64_t> device_total;
  for (const auto& d : run.header().devices) device_total[static_cast<int>(d.index)] = d.total_bytes;
  const std::uint64_t start_us = run.header().start_unix_ns / 1000;

  PickleWriter p(out);
  FrameWriter frames(p, run, sym);
  p.begin_dict();
  p.key("segments");
  p.begin_list();
  for_each_snapshot_segment(segments, [&](std::uint64_t base, std::uint64_t size, const Segment& s,
                                           bool expandable) {
    // Blocks inside the segment; the gaps between them are inactive (free) blocks.
    std::uint64_t allocated = 0, active = 0, requested = 0;
    auto first = blocks.lower_bound(base);
    auto last = blocks.lower_bound(base + size);
    for (auto it = first; it != last; ++it) {
      // As PyTorch counts: allocated excludes blocks waiting for their fences; active
      // and requested include them.
      active += it->second.size;
      requested += it->second.requested;
      if (!it->second.pending) allocated += it->second.size;
    }
    core::memviz::begin_segment(p, {s.device, base, size, allocated, active, requested, s.stream,
                                    expandable});
    frames.write(s.stack);
    core::memviz::begin_segment_blocks(p);
    std::uint64_t at = base;
    auto gap = [&](std::uint64_t to) {
      if (to <= at) return;
      core::memviz::begin_block(p, {at, to - at, 0, core::BlockSnapshotState::inactive});
      frames.write(0);
      p.end_dict();
    };
    for (auto it = first; it != last; ++it) {
      gap(it->first);
      core::memviz::begin_block(p, {it->first, it->second.size, it->second.requested,
                                    it->second.pending ? core::BlockSnapshotState::active_pending_free
                                                       : core::BlockSnapshotState::active_allocated});
      frames.write(it->second.stack);
      p.end_dict();
      at = std::max(at, it->first + it->second.size);
    }
    gap(base + size);
    core::memviz::end_segment(p);
  });
  p.end_list();

  p.key("device_traces");
  p.begin_list();
  const int max_device = devices.empty() ? -1 : *devices.rbegin();
  for (int d = 0; d <= max_device; ++d) {
    p.begin_list();
    if (devices.count(d)) {
      // The first entries to leave out: --last N keeps a device's last N.
      const std::uint64_t total = entries[d];
      const std::uint64_t skip =
          options.last_events && total > *options.last_events ? total - *options.last_events : 0;
      std::uint64_t number = 0;
      struct Live {
        std::uint64_t requested, stream;
        SiteKey stack;
      };
      std::unordered_map<std::uint64_t, Live> live;
      std::unordered_map<std::uint64_t, SiteKey> live_segments;  // base -> stack
      std::uint64_t reserved = 0;
      auto entry = [&](std::string_view name, std::uint64_t addr, std::uint64_t size,
                       std::uint64_t stream, std::uint64_t time_ns, SiteKey stack,
                       bool oom) {
        if (number++ < skip) return;
        std::optional<std::uint64_t> device_free;
        if (oom) {
          const std::uint64_t total_bytes = device_total[d];
          device_free = total_bytes > reserved ? total_bytes - reserved : 0;
        }
        core::memviz::begin_trace_entry(p, {name, addr, device_free, size, stream, start_us + time_ns / 1000});
        frames.write(stack);
        p.end_dict();
      };
      // segment_alloc / segment_free, or for pages segment_map / segment_unmap on stream 0.
      auto segment_entry = [&](const core::TraceEvent& e, SiteKey stack) {
        const bool pages = core::is_mapped_pages(e.kind, e.size, e.requested);
        entry(action_name(e.kind, pages), e.address, e.size, pages ? 0 : e.stream, e.time_ns, stack,
              false);
      };
      read_events(
          run,
          [&](const core::TraceEvent& e) {
            if (e.device != d || e.time_ns > to_ns) return;
            const bool show = in_window(e.time_ns);
            switch (e.kind) {
              case core::EventKind::alloc:
                live[e.address] = {e.requested ? e.requested : e.size, e.stream, site_of(e)};
                if (show) entry("alloc", e.address, live[e.address].requested, e.stream, e.time_ns, site_of(e), false);
                break;
              case core::EventKind::free_requested:
              case core::EventKind::free_completed: {
                auto it = live.find(e.address);
                const Live l = it != live.end() ? it->second : Live{e.size, e.stream, 0};
                if (show) entry(action_name(e.kind), e.address, l.requested, e.stream, e.time_ns, l.stack, false);
                if (e.kind == core::EventKind::free_completed) live.erase(e.address);
                break;
              }
              case core::EventKind::segment_reserve: {
                auto st = segment_stack.find(e.index);
                const SiteKey stack = st == segment_stack.end() ? 0 : st->second;
                live_segments[e.address] = stack;
                reserved += e.size;
                if (show) segment_entry(e, stack);
                break;
              }
              case core::EventKind::segment_release: {
                const SiteKey stack = live_segments[e.address];
                live_segments.erase(e.address);
                reserved -= std::min(reserved, e.size);
                if (show) segment_entry(e, stack);
                break;
              }
              case core::EventKind::oom:
                if (show) entry("oom", 0, e.requested, e.stream, e.time_ns, 0, true);
                break;
              default: break;
            }
          },
          false);
      for (std::uint64_t addr : completed_at_end[d]) {
        auto it = live.find(addr);
        const Live l = it != live.end() ? it->second : Live{0, 0, 0};
        if (in_window(last_ns))
          entry("free_completed", addr, l.requested, l.stream, last_ns, l.stack, false);
      }
    }
    p.end_list();
  }
  p.end_list();

  p.key("allocator_settings");
  core::memviz::write_allocator_settings(p, run.header().settings);
  p.end_dict();
  p.finish();
}

}  // namespace luma::tools
