// sim_sequence.h - what `luma simulate` replays: one device's allocations and frees in the
// order a recorded run made them, each with the time it was made, read from a luma trace,
// an RMM log or a planner CSV (the format detected by content, as everywhere in luma).
//
// An allocation asks for the bytes the program asked for (a trace's requested bytes; an
// RMM log's or a CSV's size). Times are the recorded clock in ns since the first event (a
// trace's event times, an RMM log's Time column) or, for an input without a clock (a
// planner CSV, an RMM log whose Time does not parse), the event's position: then
// has_times is false and no fence latency can be applied. Beside the ops, the facts that
// decide the free path the library would have taken (SimSequence::facts). Bad input ends in one
// PlanInputError naming the file (and line or byte offset).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "free_path/free_path.h"
#include "planner/lifetime.h"

namespace luma::core {

struct SimOp {
  std::uint64_t time_ns = 0;  // never decreasing along a sequence
  std::uint64_t bytes = 0;    // alloc: bytes requested; free: 0
  std::uint32_t id = 0;       // the allocation's number in its sequence (a free names it)
  bool is_free = false;
};

// A fact the recording shows that narrows the free path (core/free_path), from op `op` of
// the sequence on, and where the recording showed it ("thread 1276, line 12").
struct SimFact {
  std::size_t op = 0;
  FreePathFact fact = FreePathFact::second_thread;
  std::string evidence;
};

struct SimSequence {
  int device = 0;
  bool has_times = false;  // time_ns is a clock (else each op's position)
  std::vector<SimOp> ops;
  // The first ops that allocate the blocks live before the recorded window began (a
  // PyTorch snapshot's): a repeated replay (SimOptions::repeat) makes them once.
  std::size_t window_start = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  // Frees of blocks the recording never showed allocated (a luma trace begun after the
  // program allocated them): left out of ops. A run with such frees is not one that can
  // be repeated as recorded (SimOptions::repeat).
  std::uint64_t unmatched_frees = 0;
  // The most bytes live at once (requested): the planner's lower bound on any arena
  // (core/planner/lower_bound.h), so no allocator can reserve less.
  std::uint64_t peak_live = 0;
  // In op order, each fact once: what the recording shows of threads, streams and contexts
  // (a luma trace: its events' threads, streams and devices, the whole process's; an RMM
  // log: its Thread and Stream columns; a planner CSV shows none: one thread).
  std::vector<SimFact> facts;
};

struct SimInput {
  std::string format;  // "luma trace", "RMM log", "planner CSV"
  std::vector<SimSequence> devices;  // by device number, only devices that allocate
};

// Reads `path`; throws PlanInputError.
SimInput read_sim_input(const std::string& path);
// The same for an input already read whole (a pipe, whose bytes a caller read once to
// look at their head); `source` names it in messages.
SimInput read_sim_input_bytes(std::string bytes, const std::string& source);

// The sequence of lifetimes (one device): alloc at `lower`, free at `upper` (frees first
// at equal times: lifetimes are half-open), ties in input order. No clock. Lifetimes with
// lower >= upper are never live and are left out.
SimSequence sim_sequence_from_lifetimes(const std::vector<Lifetime>& lifetimes);

// Fills peak_live, allocations and frees from ops (lower_bound_bytes over the ops'
// lifetimes).
void finish_sim_sequence(SimSequence& s);

}  // namespace luma::core
