// recorded_run.cpp - opening a trace, an RMM log or a PyTorch snapshot. An RMM log goes
// through the planner's RmmLogReader (one reader of that format in the project); its
// lifetimes are turned back into alloc / free events at their row indices, which are then
// the events' times, and its "allocate failure" rows into oom events. Whether a buffer was
// freed comes from the reader, not from its lifetime (a free on the last row and no free
// end at the same time). Pointers, threads and streams are not kept by that reader, so an
// RMM input has neither. A snapshot goes through core/torch_snapshot: each device's
// sequence (allocations with their addresses, streams and call sites; blocks live when the
// window began first) as alloc / free events, between them its segment entries as
// segment events, and its frames as named call sites.
#include "inputs/recorded_run.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "planner/input/lifetime_reader.h"
#include "planner/input/rmm_log_reader.h"
#include "common/progress.h"

namespace luma::tools {

RecordedRun::RecordedRun(const std::string& path) : path_(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw std::runtime_error(path + ": is a directory");
    // A trace is read by mapping it, and twice by the exports; a pipe allows neither.
    throw std::runtime_error(path + ": not a regular file (a pipe or a device); save it to a file first");
  }
  std::string head(core::kHeadBytes, '\0');
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open");
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(in.gcount()));
  }
  if (core::TraceReader::accepts(head)) {
    format_ = "luma trace";
    trace_ = std::make_unique<core::TraceReader>(path);
    if (trace_->truncation().truncated)
      std::fprintf(stderr, "luma: warning: %s: %s\n", path.c_str(),
                   trace_->truncation().describe().c_str());
    return;
  }
  // libluma.so creates the file (to claim its name) just before it writes the header: a
  // process killed in between leaves it empty, having recorded nothing.
  if (head.empty())
    throw std::runtime_error(path + ": empty file (a process that leaves its trace empty ended "
                             "before it recorded anything)");
  rmm_header_.command_line = {path};
  if (is_torch_snapshot(head) || (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80)) {
    // Any pickle: the snapshot reader names what makes it none, or where it is damaged.
    format_ = std::string(core::TorchSnapshotReader::kFormatName);
    try {
      read_snapshot(core::TorchSnapshotReader::read_file(path));
    } catch (const core::PlanInputError& e) {
      throw std::runtime_error(e.what());
    }
    return;
  }
  core::RmmLogReader rmm;
  if (!rmm.accepts(head))
    throw std::runtime_error(path + ": neither a luma trace (starts with the LUMATRC magic), "
                             "an RMM log (starts with '" +
                             std::string(rmm.expected_start()) +
                             "') nor a PyTorch memory snapshot (a pickle, torch.cuda.memory._dump_snapshot's)");
  format_ = "RMM log";
  read_rmm_log(path);
}

void RecordedRun::read_rmm_log(const std::string& path) {
  core::RmmLogReader rmm;
  std::ifstream in(path, std::ios::binary);
  core::RmmLog log;
  try {
    log = rmm.read_log(in, path);
  } catch (const core::PlanInputError& e) {
    throw std::runtime_error(e.what());
  }
  // The events in row order: each allocate/free row's time is its index among those rows;
  // an "allocate failure" row came just before the row of its time, so it sorts first.
  struct Placed {
    std::uint64_t time;
    int order;  // 0: a failure, 1: the allocate/free row of that time
    core::TraceEvent event;
  };
  std::vector<Placed> placed;
  placed.reserve(log.lifetimes.size() * 2 + log.failures.size());
  for (std::size_t i = 0; i < log.lifetimes.size(); ++i) {
    const auto& lt = log.lifetimes[i];
    core::TraceEvent a;
    a.kind = core::EventKind::alloc;
    a.address = i;  // a buffer number stands in for the pointer
    a.size = lt.size;
    a.requested = lt.size;
    placed.push_back({lt.lower, 1, a});
    if (log.freed[i]) {  // the reader says so: a buffer freed on the last row is freed too
      core::TraceEvent f = a;
      f.kind = core::EventKind::free_requested;
      f.requested = 0;
      placed.push_back({lt.upper, 1, f});
    }
  }
  for (const core::RmmFailure& failure : log.failures) {
    core::TraceEvent o;
    o.kind = core::EventKind::oom;
    o.requested = failure.size;
    placed.push_back({failure.time, 0, o});
  }
  std::stable_sort(placed.begin(), placed.end(), [](const Placed& x, const Placed& y) {
    return x.time != y.time ? x.time < y.time : x.order < y.order;
  });
  events_.reserve(placed.size());
  for (std::size_t i = 0; i < placed.size(); ++i) {
    core::TraceEvent e = placed[i].event;
    e.index = e.seq = i;
    e.time_ns = placed[i].time;
    events_.push_back(e);
  }
}

void RecordedRun::read_snapshot(core::TorchSnapshot snapshot) {
  // Call sites: every stack by name, and its Python frames (a file of Python source: PyTorch
  // records C++ frames too when asked for context "all").
  named_stacks_.resize(snapshot.stacks.size());
  python_stacks_.resize(snapshot.stacks.size());
  for (std::size_t id = 1; id < snapshot.stacks.size(); ++id) {
    for (std::uint32_t f : snapshot.stacks[id]) {
      const core::TorchFrame& frame = snapshot.frames[f];
      const auto line = static_cast<std::uint32_t>(std::clamp<std::int64_t>(frame.line, 0, UINT32_MAX));
      const core::TracePythonFrame named{frame.filename, frame.name, line};
      named_stacks_[id].push_back(named);
      if (frame.filename.size() >= 3 && frame.filename.ends_with(".py")) python_stacks_[id].push_back(named);
    }
  }
  // Each device's ops, and before op k the segment entries made with k ops before them;
  // an expandable segment's mapped range as 2 MiB pages where it is made of them (luma's
  // pages: the statistics count pages and find a growth as adjacent pages).
  struct Placed {
    std::uint64_t time;
    core::TraceEvent event;
  };
  std::vector<Placed> placed;
  constexpr std::uint64_t kPage = std::uint64_t{2} << 20;
  snapshot_times_ = !snapshot.devices.empty();
  for (const core::TorchDevice& d : snapshot.devices) {
    const core::SimSequence& s = d.sequence;
    snapshot_times_ = snapshot_times_ && (s.has_times || s.ops.empty());
    std::size_t step = 0;
    auto segment_events = [&](std::size_t before_op) {
      for (; step < d.reserved.size() && d.reserved[step].op <= before_op; ++step) {
        const core::TorchReservedStep& r = d.reserved[step];
        using A = core::TorchReservedStep::Action;
        core::TraceEvent e;
        e.device = s.device;
        e.kind = r.action == A::segment_alloc || r.action == A::segment_map ? core::EventKind::segment_reserve
                                                                            : core::EventKind::segment_release;
        const bool pages = r.action == A::segment_map || r.action == A::segment_unmap;
        if (pages && r.size % kPage == 0 && r.address % kPage == 0) {
          for (std::uint64_t at = 0; at < r.size; at += kPage) {
            e.address = r.address + at;
            e.size = e.requested = kPage;  // requested == size: mapped pages (core::is_mapped_pages)
            placed.push_back({r.time_ns, e});
          }
          continue;
        }
        e.address = r.address;
        e.size = r.size;
        e.requested = pages ? r.size : 0;
        placed.push_back({r.time_ns, e});
      }
    };
    for (std::size_t k = 0; k < s.ops.size(); ++k) {
      segment_events(k);
      const core::SimOp& op = s.ops[k];
      const core::TorchAllocation& a = d.allocations[op.id];
      core::TraceEvent e;
      e.device = s.device;
      e.kind = op.is_free ? core::EventKind::free_requested : core::EventKind::alloc;
      e.address = a.address;
      e.size = a.bytes;
      e.requested = op.is_free ? 0 : a.bytes;
      e.stream = static_cast<std::uint64_t>(a.stream);
      if (!op.is_free) e.stack = e.python_stack = a.stack;
      placed.push_back({op.time_ns, e});
    }
    segment_events(s.ops.size());
  }
  // Devices one after another, or on the clock they share.
  if (snapshot_times_)
    std::stable_sort(placed.begin(), placed.end(), [](const Placed& x, const Placed& y) { return x.time < y.time; });
  events_.reserve(placed.size());
  for (std::size_t i = 0; i < placed.size(); ++i) {
    core::TraceEvent e = placed[i].event;
    e.index = e.seq = i;
    e.time_ns = snapshot_times_ ? placed[i].time : i;
    events_.push_back(e);
  }
  snapshot_ = std::make_unique<const core::TorchSnapshot>(std::move(snapshot));
}

std::optional<TorchWindow> RecordedRun::torch_window(int device) const {
  if (snapshot_)
    for (const core::TorchDevice& d : snapshot_->devices)
      if (d.sequence.device == device) return tools::torch_window(d, snapshot_->note);
  return std::nullopt;
}

std::uint64_t RecordedRun::reserved_before_window(int device) const {
  const std::optional<TorchWindow> w = torch_window(device);
  return w ? w->reserved_before_window : 0;
}

RecordedRun::~RecordedRun() = default;

const core::TraceHeader& RecordedRun::header() const noexcept {
  return trace_ ? trace_->header() : rmm_header_;
}

const core::TraceTruncation& RecordedRun::truncation() const noexcept {
  return trace_ ? trace_->truncation() : no_truncation_;
}

bool RecordedRun::closed_cleanly() const noexcept {
  return trace_ ? trace_->closed_cleanly() : true;
}

core::TraceReadSummary RecordedRun::read(const core::TraceReader::EventFn& on_event,
                                         bool show_progress) {
  if (trace_) {
    ProgressBar bar("reading " + path_, show_progress ? trace_->file_bytes() : 0);
    core::TraceReader::ProgressFn progress;
    if (bar.enabled()) progress = [&](std::uint64_t done, std::uint64_t) { bar.update(done); };
    return trace_->read(on_event, progress);
  }
  core::TraceReadSummary sum;
  for (const auto& e : events_) on_event(e);
  sum.events = events_.size();
  sum.slots = sum.events;
  return sum;
}

const std::vector<std::uint64_t>& RecordedRun::stack(std::uint32_t id) const noexcept {
  static const std::vector<std::uint64_t> none;
  return trace_ ? trace_->stack(id) : none;
}

const std::vector<core::TracePythonFrame>& RecordedRun::python_stack(
    std::uint32_t id) const noexcept {
  static const std::vector<core::TracePythonFrame> none;
  if (trace_) return trace_->python_stack(id);
  return id < python_stacks_.size() ? python_stacks_[id] : none;
}

const std::vector<core::TracePythonFrame>& RecordedRun::named_stack(std::uint32_t id) const noexcept {
  static const std::vector<core::TracePythonFrame> none;
  return id < named_stacks_.size() ? named_stacks_[id] : none;
}

}  // namespace luma::tools
