// recorded_run.cpp - opening a trace or an RMM log. An RMM log goes through the planner's
// RmmLogReader (one reader of that format in the project); its lifetimes are turned back
// into alloc / free events at their row indices, which are then the events' times.
// Pointers, threads and streams are not kept by that reader, so an RMM input has neither.
#include "recorded_run.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "planner/lifetime_reader.h"
#include "planner/rmm_log_reader.h"
#include "progress.h"

namespace luma::tools {

RecordedRun::RecordedRun(const std::string& path) : path_(path) {
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
  std::vector<core::Lifetime> lifetimes;
  try {
    lifetimes = rmm.read(in, path);
  } catch (const core::PlanInputError& e) {
    throw std::runtime_error(e.what());
  }
  rmm_header_.command_line = {path};
  rmm_events_.reserve(lifetimes.size() * 2);
  // Every row index 0..T-1 holds exactly one event: an alloc at some lower, or a free at
  // some upper < T; a buffer never freed has upper == T. With m the largest upper and f
  // the buffers whose upper is below m, the buffers at m were never freed iff T = m,
  // i.e. m == n + f (n allocs and f frees fill 0..m-1).
  std::uint64_t m = 0;
  for (const auto& lt : lifetimes) m = std::max(m, lt.upper);
  std::uint64_t below = 0;
  for (const auto& lt : lifetimes) below += lt.upper < m ? 1 : 0;
  const std::uint64_t end = m == lifetimes.size() + below ? m : m + 1;
  for (std::size_t i = 0; i < lifetimes.size(); ++i) {
    const auto& lt = lifetimes[i];
    core::TraceEvent a;
    a.kind = core::EventKind::alloc;
    a.seq = lt.lower;
    a.time_ns = lt.lower;
    a.address = i;  // a buffer number stands in for the pointer
    a.size = lt.size;
    a.requested = lt.size;
    rmm_events_.push_back(a);
    if (lt.upper < end) {
      core::TraceEvent f = a;
      f.kind = core::EventKind::free_requested;
      f.seq = lt.upper;
      f.time_ns = lt.upper;
      f.requested = 0;
      rmm_events_.push_back(f);
    }
  }
  std::stable_sort(rmm_events_.begin(), rmm_events_.end(),
                   [](const auto& x, const auto& y) { return x.seq < y.seq; });
  for (std::size_t i = 0; i < rmm_events_.size(); ++i) rmm_events_[i].index = i;
}

RecordedRun::~RecordedRun() = default;

const core::TraceHeader& RecordedRun::header() const noexcept {
  return trace_ ? trace_->header() : rmm_header_;
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

}  // namespace luma::tools
