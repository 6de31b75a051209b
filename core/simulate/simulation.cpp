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
  for (std::size_t i = 0; i < seq.ops.size(); ++i) {
    const SimOp& op = seq.ops[i];
    sim.set_now(op.time_ns);
    if (op.id >= ptr.size()) continue;  // (finish_sim_sequence counted them all)
    if (op.is_free) {
      if (ptr[op.id] != nullptr) alloc.free(ptr[op.id]);
      ptr[op.id] = nullptr;
      continue;
    }
    if (op.bytes == 0) continue;  // cudaMalloc(0) hands out nothing
    const AllocResult got = alloc.allocate(op.bytes);
    if (got.ptr == nullptr) {
      r.completed = false;
      r.failed_op = i;
      r.failed_bytes = op.bytes;
      if (o.attribute) attribute(alloc, seq, i, nullptr, r.at_failure);
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
  }
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

LimitScan scan_limits(const SimSequence& seq, const SimOptions& o, double step) {
  LimitScan m;
  SimOptions run = o;
  run.attribute = false;
  run.settings.memory_limit = 0;
  ++m.runs;
  m.unlimited_peak = simulate(seq, run).peak_reserved;
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
    m.points.push_back({limit, simulate(seq, run).completed});
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
