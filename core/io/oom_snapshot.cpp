// oom_snapshot.cpp - the out-of-memory snapshot's pickle (oom_snapshot.h).
#include "io/oom_snapshot.h"

#include <algorithm>

#include "io/memviz_layout.h"
#include "io/pickle_writer.h"

namespace luma::core {

namespace {

// Each stack's frames once, then from the pickle's memo (as PyTorch's pickler shares them).
class StackFrames {
 public:
  StackFrames(PickleWriter& p, const OomSnapshot& s) : p_(p), s_(s), memo_(s.stacks.size() + 1, kNone) {}
  void write(std::uint32_t stack) {
    if (stack > s_.stacks.size()) stack = 0;
    if (memo_[stack] != kNone) {
      p_.memo_get(memo_[stack]);
      return;
    }
    p_.begin_list();
    if (stack != 0)
      for (const SnapshotFrame& f : s_.stacks[stack - 1]) memviz::write_frame(p_, f.filename, f.line, f.name);
    memo_[stack] = p_.end_list_memoized();
  }

 private:
  static constexpr std::uint32_t kNone = ~std::uint32_t{0};
  PickleWriter& p_;
  const OomSnapshot& s_;
  std::vector<std::uint32_t> memo_;
};

void write_segments(PickleWriter& p, StackFrames& frames, const OomSnapshot& s) {
  p.begin_list();
  for (const SegmentSnapshot& seg : s.segments) {
    memviz::SegmentFields f{s.device, seg.address, seg.size, 0, 0, 0, 0, seg.expandable};
    for (const BlockSnapshot& b : seg.blocks) {
      if (b.state == BlockSnapshotState::active_allocated) f.allocated_size += b.size;
      if (b.state != BlockSnapshotState::inactive) {
        f.active_size += b.size;
        f.requested_size += b.requested;
      }
    }
    memviz::begin_segment(p, f);
    frames.write(0);
    memviz::begin_segment_blocks(p);
    for (const BlockSnapshot& b : seg.blocks) {
      memviz::begin_block(p, {b.address, b.size, b.requested, b.state});
      std::uint32_t stack = 0;
      if (b.state != BlockSnapshotState::inactive) {
        auto it = s.block_stacks.find(b.address);
        if (it != s.block_stacks.end()) stack = it->second;
      }
      frames.write(stack);
      p.end_dict();
    }
    memviz::end_segment(p);
  }
  p.end_list();
}

void write_trace(PickleWriter& p, StackFrames& frames, const OomSnapshot& s) {
  std::uint64_t last_us = 0;
  auto when = [&](std::uint64_t t) { return last_us = std::max(last_us, t); };
  p.begin_list();
  for (const RecentEvent& e : s.events) {
    const std::string_view action = memviz::action_name(e.kind, is_mapped_pages(e.kind, e.size, e.requested));
    if (action.empty() || e.kind == EventKind::oom) continue;
    const bool block = e.kind == EventKind::alloc || e.kind == EventKind::free_requested ||
                       e.kind == EventKind::free_completed;
    // PyTorch's alloc and free entries carry the requested size; segments their size.
    const std::uint64_t size = block && e.requested != 0 ? e.requested : e.size;
    memviz::begin_trace_entry(p, {action, e.address, std::nullopt, size, e.stream, when(e.time_us)});
    frames.write(block ? e.stack : 0);
    p.end_dict();
  }
  memviz::begin_trace_entry(p, {"oom", 0, s.device_free.value_or(0), s.requested, s.stream, when(s.time_us)});
  frames.write(0);
  p.end_dict();
  p.end_list();
}

}  // namespace

void write_oom_snapshot(std::ostream& out, const OomSnapshot& s) {
  PickleWriter p(out);
  StackFrames frames(p, s);
  p.begin_dict();
  p.key("segments");
  write_segments(p, frames, s);
  p.key("device_traces");
  p.begin_list();  // one list per device up to this one: the viewer indexes them by device
  for (int d = 0; d < s.device; ++d) {
    p.begin_list();
    p.end_list();
  }
  write_trace(p, frames, s);
  p.end_list();
  p.key("allocator_settings");
  memviz::write_allocator_settings(p, s.settings);
  p.end_dict();
  p.finish();
}

}  // namespace luma::core
