// simulation.cpp - replaying a sequence through the caching allocator (see simulation.h).
#include "simulate/simulation.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include "allocator/caching_allocator.h"
#include "limits/limited_device.h"
#include "limits/memory_budget.h"
#include "simulate/sim_device.h"

namespace luma::core {
namespace {

// Fills `a` from the allocator's blocks right after allocation `op` (which made the
// device grow) was served at `ptr`.
void attribute(const CachingAllocator& alloc, const SimSequence& seq, std::size_t op, void* ptr,
               PeakAttribution& a) {
  const AllocatorOptions& opt = alloc.options();
  const AllocatorSnapshot snap = alloc.snapshot();
  a = {};
  a.op = op;
  a.allocation = seq.ops[op].id;
  a.request = seq.ops[op].bytes;
  a.rounded = round_size(opt, a.request);
  const Pool pool = pool_for(opt, a.rounded);
  const auto at = reinterpret_cast<std::uintptr_t>(ptr);
  for (const SegmentSnapshot& s : snap) {
    a.reserved += s.size;
    const bool is_new = at >= s.address && at - s.address < s.size;
    const bool wholly_free = s.blocks.size() == 1 && s.blocks[0].state == BlockSnapshotState::inactive;
    for (const BlockSnapshot& b : s.blocks) {
      switch (b.state) {
        case BlockSnapshotState::active_allocated: {
          const std::uint64_t rounded = std::min<std::uint64_t>(round_size(opt, b.requested), b.size);
          a.live_requested += b.requested;
          a.rounding += rounded - b.requested;
          a.unsplit += b.size - rounded;
          break;
        }
        case BlockSnapshotState::active_pending_free:
          a.pending += b.size;
          break;
        case BlockSnapshotState::inactive:
          if (is_new) {
            a.new_segment_rest += b.size;
          } else if (s.pool != pool) {
            a.free_other_pool += b.size;
          } else if (b.size >= a.rounded) {
            a.free_fitting += b.size;
          } else if (wholly_free) {
            a.free_segments_too_small += b.size;
          } else {
            a.free_pieces_too_small += b.size;
          }
          break;
      }
    }
  }
  a.live_below_peak = seq.peak_live > a.live_requested ? seq.peak_live - a.live_requested : 0;
}

}  // namespace

std::vector<PathSpan> free_paths(const SimSequence& seq, const SimOptions& o) {
  if (o.settings.free_sync == FreeSync::none)
    return {{0, FreePath::at_once, "free_sync:none: frees are never fenced"}};
  if (o.settings.free_sync == FreeSync::device)
    return {{0, FreePath::at_once, "free_sync:device: each free waits for the device"}};
  if (o.free_path) return {{0, *o.free_path, "--free-path"}};
  FreePathFacts facts;
  facts.reuse_allowed = o.settings.stream_ordered_reuse;
  const FreePathDecision first = decide_free_path(facts);
  std::vector<PathSpan> spans{{0, first.path, first.why}};
  for (const SimFact& f : seq.facts) {
    facts.add(f.fact);
    const FreePathDecision d = decide_free_path(facts);
    if (d.path == spans.back().path) continue;
    PathSpan span{f.op, d.path, std::string(d.why) + " (" + f.evidence + ")"};
    if (spans.back().from_op == f.op) spans.back() = std::move(span);  // shown before its first op
    else spans.push_back(std::move(span));
  }
  return spans;
}

SimResult simulate(const SimSequence& seq, const SimOptions& o) {
  if (!o.settings.caching)
    throw std::invalid_argument("caching:false sends every call to the driver: there is no allocator to simulate");
  if (o.settings.memory_fraction > 0)
    throw std::invalid_argument("memory_fraction needs the device's size, which a recorded run does not give: "
                                "use memory_limit (bytes)");
  SimulatedDevice sim(o.settings.free_sync, o.fence_latency_ns);
  std::unique_ptr<ProcessBudget> budget;
  std::unique_ptr<LimitedDevice> limited;
  Device* dev = &sim;
  if (o.settings.memory_limit != 0) {
    budget = std::make_unique<ProcessBudget>(static_cast<std::size_t>(o.settings.memory_limit));
    limited = std::make_unique<LimitedDevice>(sim, *budget);
    dev = limited.get();
  }
  CachingAllocator alloc(*dev, seq.device, o.settings.allocator);
  std::vector<void*> ptr(seq.allocations, nullptr);
  SimResult r;
  r.paths = free_paths(seq, o);
  // As libluma.so: the at-once path completes each free at once (the allocator's reuse at
  // once); the legacy path's fences are barriers; the fenced path's complete on the clock.
  std::size_t next_span = 0;
  auto take_path = [&](FreePath path) {
    alloc.set_reuse_at_once(path == FreePath::at_once);
    sim.set_fenced(path == FreePath::fenced);
  };
  if (o.repeat == 0) throw std::invalid_argument("repeat must be at least 1");
  // Where each copy begins and how far its clock is moved on: copy k replays ops from the
  // window's start, its times k x (the window's span + 1 ns) later, so time never goes back.
  const std::size_t window = std::min(seq.window_start, seq.ops.size());
  const std::uint64_t span = seq.ops.empty() || window == seq.ops.size()
                                 ? 0
                                 : seq.ops.back().time_ns - seq.ops[window].time_ns + 1;
  std::vector<bool> before_window(seq.allocations, false);
  for (std::size_t i = 0; i < window; ++i)
    if (seq.ops[i].id < before_window.size()) before_window[seq.ops[i].id] = true;
  auto counts = [&](CopyFigures& f) {
    f.driver_allocations = sim.reserves();
    f.driver_frees = sim.releases();
    f.maps = sim.calls(DriverCall::mem_map);
    f.unmaps = sim.calls(DriverCall::mem_unmap);
    f.driver_ns = sim.driver_ns();
  };
  auto minus = [](CopyFigures& f, const CopyFigures& base) {
    f.driver_allocations -= base.driver_allocations;
    f.driver_frees -= base.driver_frees;
    f.maps -= base.maps;
    f.unmaps -= base.unmaps;
    f.driver_ns -= base.driver_ns;
  };
  CopyFigures at_first_end;
  bool stopped = false;
  for (unsigned copy = 0; copy < o.repeat && !stopped; ++copy) {
    const std::uint64_t shift = copy * span;
    sim.start_span();
    const std::uint64_t allocations_before = r.allocations;
    const auto replayed = [&](std::size_t i) {
      if (copy == 0 && o.on_op) o.on_op(i, sim.held());
    };
    for (std::size_t i = copy == 0 ? 0 : window; i < seq.ops.size(); ++i) {
      const SimOp& op = seq.ops[i];
      if (copy == 0)
        while (next_span < r.paths.size() && r.paths[next_span].from_op <= i) take_path(r.paths[next_span++].path);
      sim.set_now(op.time_ns + shift);
      if (op.id >= ptr.size()) {  // (finish_sim_sequence counted them all)
        replayed(i);
        continue;
      }
      if (op.is_free) {
        if (ptr[op.id] != nullptr) alloc.free(ptr[op.id]);
        ptr[op.id] = nullptr;
        replayed(i);
        continue;
      }
      if (op.bytes == 0) {  // cudaMalloc(0) hands out nothing
        replayed(i);
        continue;
      }
      const AllocResult got = alloc.allocate(op.bytes);
      if (got.ptr == nullptr) {
        r.completed = false;
        r.failed_op = i;
        r.failed_bytes = op.bytes;
        if (o.attribute) attribute(alloc, seq, i, nullptr, r.at_failure);
        stopped = true;
        replayed(i);
        break;
      }
      ptr[op.id] = got.ptr;
      ++r.allocations;
      if (sim.peak() > r.peak_reserved) {
        r.peak_reserved = sim.peak();
        if (o.attribute) {
          attribute(alloc, seq, i, got.ptr, r.at_peak);
          r.attributed = true;
        }
      }
      replayed(i);
    }
    CopyFigures& f = copy == 0 ? r.first : r.warm;
    f.copies += 1;
    f.allocations += r.allocations - allocations_before;
    f.peak_reserved = std::max<std::uint64_t>(f.peak_reserved, sim.span_peak());
    if (copy == 0) counts(at_first_end);
    if (stopped || copy + 1 == o.repeat) break;
    // The copy's blocks still live are freed before the next begins (those live before
    // the window stay live).
    for (std::size_t id = 0; id < ptr.size(); ++id)
      if (ptr[id] != nullptr && !before_window[id]) {
        alloc.free(ptr[id]);
        ptr[id] = nullptr;
      }
  }
  {
    CopyFigures all;
    counts(all);
    const std::uint64_t first_allocations = r.first.allocations, first_peak = r.first.peak_reserved;
    r.first = at_first_end;
    r.first.copies = 1;
    r.first.allocations = first_allocations;
    r.first.peak_reserved = first_peak;
    if (r.warm.copies != 0) {
      const std::uint64_t a = r.warm.allocations, p = r.warm.peak_reserved;
      const unsigned c = r.warm.copies;
      r.warm = all;
      minus(r.warm, at_first_end);
      r.warm.copies = c;
      r.warm.allocations = a;
      r.warm.peak_reserved = p;
    }
    r.driver_ns = all.driver_ns;
  }
  // The device's peak, also where a refused allocation made it grow before it failed (its
  // memory then went back): what the device had to hold, as the driver counts it.
  r.peak_reserved = std::max<std::uint64_t>(r.peak_reserved, sim.peak());
  const DeviceStats st = alloc.stats();
  r.reserves = sim.reserves();
  r.releases = sim.releases();
  r.fences = sim.fences();
  r.fence_waits = sim.waits();
  r.fence_wait_ns = sim.wait_ns();
  r.alloc_retries = st.num_alloc_retries;
  r.check_errors = alloc.check();
  return r;
}

LimitScan scan_limits(const SimSequence& seq, const SimOptions& o, double step,
                      const std::function<void()>& on_simulation) {
  LimitScan m;
  SimOptions run = o;
  run.attribute = false;
  run.on_op = {};
  run.settings.memory_limit = 0;
  ++m.runs;
  m.unlimited_peak = simulate(seq, run).peak_reserved;
  if (on_simulation) on_simulation();
  if (seq.peak_live == 0) return m;
  const std::uint64_t d = o.settings.allocator.pressure_divisor;
  const std::uint64_t peak = std::max(m.unlimited_peak, seq.peak_live);
  m.top_is_unlimited = d != 1;
  // ceil(peak x d / (d - 1)), plus one byte: the limit / d of the pressure test rounds down.
  m.top = d == 0 ? peak : d == 1 ? 2 * peak : (peak * d + d - 2) / (d - 1) + 1;
  m.step = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(step * double(seq.peak_live)));
  for (std::uint64_t limit = seq.peak_live;; limit += m.step) {
    limit = std::min(limit, m.top);
    run.settings.memory_limit = limit;
    ++m.runs;
    const SimResult got = simulate(seq, run);
    m.points.push_back({limit, got.completed, got.warm});
    if (on_simulation) on_simulation();
    if (limit == m.top) break;
  }
  for (const LimitScan::Point& p : m.points)
    if (p.completes) {
      m.least = p.limit;
      break;
    }
  for (auto it = m.points.rbegin(); it != m.points.rend() && it->completes; ++it) m.bound = it->limit;
  return m;
}

}  // namespace luma::core
