// fuzz_torch_snapshot.cpp - libFuzzer target: any bytes as a PyTorch memory snapshot
// (core/torch_snapshot/torch_snapshot.h, and through it the restricted pickle reader).
// Detection must answer, and reading must end in a snapshot or a PlanInputError; anything
// else (another exception, a crash, a sanitizer report, a hang, memory beyond the limit
// given) is a finding. What a snapshot reads as must hang together: every free names an
// allocation made before it and still live, allocations are numbered in order, times never
// go back, stacks and frames exist, PyTorch's reserved peak is at least every step.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "planner/input/lifetime_reader.h"
#include "torch_snapshot/torch_snapshot.h"

namespace {

using namespace luma::core;

void check(const TorchSnapshot& s) {
  for (const auto& stack : s.stacks)
    for (std::uint32_t f : stack)
      if (f >= s.frames.size()) __builtin_trap();
  if (s.stacks.empty() || !s.stacks[0].empty()) __builtin_trap();
  for (const TorchDevice& d : s.devices) {
    const SimSequence& q = d.sequence;
    if (d.allocations.size() != q.allocations) __builtin_trap();
    std::vector<bool> live(d.allocations.size(), false);
    std::uint32_t next = 0;
    std::uint64_t t = 0;
    for (const SimOp& op : q.ops) {
      if (op.time_ns < t) __builtin_trap();
      t = op.time_ns;
      if (!op.is_free) {
        if (op.id != next++) __builtin_trap();
        live[op.id] = true;
      } else {
        if (op.id >= next || !live[op.id]) __builtin_trap();
        live[op.id] = false;
      }
    }
    for (const TorchAllocation& a : d.allocations)
      if (a.stack >= s.stacks.size()) __builtin_trap();
    if (d.recorded_peak_reserved_bytes < d.recorded_reserved_start_bytes) __builtin_trap();
    for (const TorchReservedStep& r : d.reserved)
      if (r.bytes > d.recorded_peak_reserved_bytes || r.op > q.ops.size()) __builtin_trap();
    if (!d.reserved.empty() && d.reserved.back().bytes != d.recorded_reserved_end_bytes) __builtin_trap();
    for (const SimFact& f : q.facts)
      if (f.op > q.ops.size()) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)TorchSnapshotReader::accepts(bytes.substr(0, kHeadBytes));
  PickleLimits limits;
  limits.max_bytes = 64u << 20;
  try {
    const TorchSnapshot s = TorchSnapshotReader::read(bytes, "fuzz", limits);
    check(s);
    (void)torch_snapshot_sim_input(s);
  } catch (const PlanInputError&) {
  }
  return 0;
}
