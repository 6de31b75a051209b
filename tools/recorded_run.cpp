// recorded_run.cpp - opening a trace or an RMM log. An RMM log goes through the planner's
// RmmLogReader (one reader of that format in the project); its lifetimes are turned back
// into alloc / free events at their row indices, which are then the events' times, and its
// "allocate failure" rows into oom events. Whether a buffer was freed comes from the
// reader, not from its lifetime (a free on the last row and no free end at the same time).
// Pointers, threads and streams are not kept by that reader, so an RMM input has neither.
#include "recorded_run.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "planner/input/lifetime_reader.h"
#include "planner/input/rmm_log_reader.h"
#include "progress.h"

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
  core::RmmLogReader rmm;
  if (!rmm.accepts(head))
    throw std::runtime_error(path + ": neither a luma trace (starts with the LUMATRC magic) "
                             "nor an RMM log (starts with '" +
                             std::string(rmm.expected_start()) + "')");
  format_ = "RMM log";
  std::ifstream in(path, std::ios::binary);
  core::RmmLog log;
  try {
    log = rmm.read_log(in, path);
  } catch (const core::PlanInputError& e) {
    throw std::runtime_error(e.what());
  }
  rmm_header_.command_line = {path};
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
  rmm_events_.reserve(placed.size());
  for (std::size_t i = 0; i < placed.size(); ++i) {
    core::TraceEvent e = placed[i].event;
    e.index = e.seq = i;
    e.time_ns = placed[i].time;
    rmm_events_.push_back(e);
  }
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
  for (const auto& e : rmm_events_) on_event(e);
  sum.events = rmm_events_.size();
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
  return trace_ ? trace_->python_stack(id) : none;
}

}  // namespace luma::tools
