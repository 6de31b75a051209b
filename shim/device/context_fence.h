// context_fence.h - the events that cover every operation issued so far in one context:
// what luma waits for before it hands out again a device block (driver_device.h) or a
// pinned host block (host_cache_fences.h) that the program freed, both through the pooled
// fences of fence_slots.h. Written once, here, because both must cover the same work.
// docs/architecture.md, "Fences with many streams".
//
// - Drivers of CUDA 12.5 and later: one cuCtxRecordEvent, which "captures in hEvent all
//   the activities of the context hCtx at the time of this call" (cuda.h): every stream,
//   blocking or not, per-thread default streams, streams luma never saw created. One
//   record, one query, whatever the number of streams.
// - Older drivers (or one that refused the call once): an event on the legacy default
//   stream (it waits for all earlier work of the blocking and per-thread default streams),
//   and one on every non-blocking stream luma tracks that the driver does not report idle
//   (cuStreamQuery: "all operations in the stream have completed": nothing issued before
//   the fence can still run there, and work issued later comes after the frees).
//
// The caller makes the context current, decides about captures it knows of (nothing is
// recorded while one is underway in the context) and holds the lock of its event pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/event_clock.h"
#include "driver/real_driver.h"
#include "device/stream_registry.h"

namespace luma::shim {

class ContextFence {
 public:
  enum class Outcome {
    recorded,          // `events` cover every operation issued in the context so far
    capture_underway,  // the driver refused: a capture luma did not see is underway there
    failed,            // an event could not be made or recorded: nothing kept
  };

  // Appends to `events` the events of one fence of ctx (current on this thread). take()
  // gives an event of ctx (nullptr when none can be made), give(e) takes one back; events
  // taken for a fence that fails are given back, and `events` is as it was.
  template <typename Take, typename Give>
  Outcome record(const RealDriver& d, CUcontext ctx, StreamRegistry& streams,
                 std::vector<CUevent>& events, Take&& take, Give&& give) noexcept;

  // What recording a fence costs, in ns (what a caller weighs its batches against:
  // measured, because what cuCtxRecordEvent costs with many streams is the driver's affair):
  // the least of the last kSamples records. The least, because a record the OS preempted
  // or a timer interrupt lengthened took the machine's time, not the fence's: with the last
  // record alone, one preemption made the next epoch several times larger, so how many
  // blocks waited for a fence depended on the machine's load rather than on the program.
  std::uint64_t cost_ns() const noexcept {
    std::uint64_t least = samples_[0];
    for (std::uint64_t t : samples_) least = t < least ? t : least;
    return least;
  }
  // False once the driver lacks cuCtxRecordEvent or refused it: fences go stream by stream.
  bool whole_context() const noexcept { return !refused_; }

 private:
  // cuCtxRecordEvent failed with `error` (not a capture): logs once, never tries it again.
  void refuse(int error) noexcept;

  static constexpr std::size_t kSamples = 8;
  bool refused_ = false;
  std::uint64_t samples_[kSamples] = {};  // the last records' times, ns (0: none yet)
  std::size_t next_sample_ = 0;
};

template <typename Take, typename Give>
ContextFence::Outcome ContextFence::record(const RealDriver& d, CUcontext ctx,
                                           StreamRegistry& streams, std::vector<CUevent>& events,
                                           Take&& take, Give&& give) noexcept {
  const std::size_t first = events.size();
  const std::uint64_t start = monotonic_ns();
  struct Timer {  // keeps the record's time on every return
    ContextFence& f;
    std::uint64_t start;
    ~Timer() {
      f.samples_[f.next_sample_] = monotonic_ns() - start;
      f.next_sample_ = (f.next_sample_ + 1) % kSamples;
    }
  } timer{*this, start};
  bool ok = true;
  auto keep = [&](CUevent e) {
    try {
      events.push_back(e);
    } catch (...) {
      give(e);
      ok = false;
    }
  };
  if (d.ctx_record_event != nullptr && !refused_) {
    CUevent e = take();
    if (e == nullptr) return Outcome::failed;
    const CUresult r = d.ctx_record_event(ctx, e);
    if (r == CUDA_SUCCESS) {
      keep(e);
      return ok ? Outcome::recorded : Outcome::failed;
    }
    give(e);
    if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) return Outcome::capture_underway;
    refuse(r);
  }
  auto record_on = [&](CUstream stream) {
    if (!ok) return;
    CUevent e = take();
    if (e == nullptr || d.event_record(e, stream) != CUDA_SUCCESS) {
      if (e != nullptr) give(e);
      ok = false;
      return;
    }
    keep(e);
  };
  try {
    record_on(nullptr);  // the legacy default stream: it stands for the blocking streams
    streams.for_each(ctx, [&](CUstream stream) {
      // Idle now: nothing issued to it before the fence can still touch the blocks. Any
      // other answer (not ready, an error) gets an event.
      if (ok && d.stream_query(stream) == CUDA_SUCCESS) return;
      record_on(stream);
    });
  } catch (...) {
    ok = false;  // host memory ran out
  }
  if (ok) return Outcome::recorded;
  for (std::size_t i = first; i < events.size(); ++i) give(events[i]);
  events.resize(first);
  return Outcome::failed;
}

}  // namespace luma::shim
