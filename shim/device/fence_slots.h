// fence_slots.h - the fences of one CUDA context, pooled: a token names a slot of events
// that cover all the context's work at the time it was recorded (context_fence.h). Written
// once for both kinds of freed memory luma keeps: device blocks (driver_device.h, for core's
// fence queue) and pinned host blocks (host_cache_fences.h: one token per served context).
//
// A token's life, the protocol of core/base/device.h:
// - fence(): a slot recorded now (context_fence.h), or deferred while a capture is underway
//   in the context (an event on a capturing stream would join the graph), or kNone when
//   nothing is left to wait for: the context is gone (its work with it), or the fence could
//   not be recorded (an event call failed, no host memory for a slot) and the context was
//   synchronized instead. In a capture nothing can be synchronized: a slot that cannot be
//   had then gives kOwed, which needs no memory: done once no capture is underway in the
//   context and the context was synchronized since (the first poll after the capture
//   does it, once for every kOwed fence given before).
// - poll(): done? Never blocks, and asks nothing while a capture is underway there (an
//   event query is among the calls a capture forbids). A deferred fence is recorded at the
//   first poll with no capture underway: after the capture, so it covers all work issued
//   before the frees. An event the driver lost (any answer but done or not ready) or a
//   deferred record that failed: the context is synchronized, and the fence is done.
// - wait(): blocks until done; false at once while a capture is underway there.
// Each holds the captures' gate from its checks to the driver's answers
// (capture_registry.h): no capture begins between them.
// - release(): exactly once per token; its events go back to the pool.
// Events are created in the context (cuCtxRecordEvent requires it) and pooled, since
// creating one is a driver call; on process exit or a destroyed context they are left to
// the driver (forget_events).
//
// Not thread-safe: the owner's lock is held around every call. Never calls luma's hooks,
// never throws, never reports a fence done before the driver says its events completed.
#pragma once

#include <cstdint>
#include <vector>

#include "device/capture_registry.h"
#include "device/context_fence.h"
#include "driver/real_driver.h"
#include "device/stream_registry.h"

namespace luma::shim {

// Slots named by tokens 1..n (0: none), and the free ones: acquire() reuses the most
// recently released slot, else makes one; release() never allocates.
template <class Slot>
class SlotTable {
 public:
  // A free slot's token; throws std::bad_alloc when none can be made (nothing changed).
  std::uint32_t acquire() {
    if (!free_.empty()) {
      const std::uint32_t token = free_.back();
      free_.pop_back();
      return token;
    }
    free_.reserve(slots_.size() + 1);  // room for every token back: release cannot fail
    slots_.emplace_back();
    return static_cast<std::uint32_t>(slots_.size());
  }
  // nullptr for 0 and any token never handed out.
  Slot* at(std::uint64_t token) noexcept {
    return token == 0 || token > slots_.size() ? nullptr : &slots_[token - 1];
  }
  void release(std::uint32_t token) noexcept { free_.push_back(token); }
  template <class Fn>
  void for_each(Fn&& fn) noexcept {  // free slots included
    for (Slot& s : slots_) fn(s);
  }

 private:
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
};

class FenceSlots {
 public:
  using Token = std::uint32_t;
  static constexpr Token kNone = 0;
  // No slot could be had during a capture: a synchronization after it is owed (above).
  static constexpr Token kOwed = 0xFFFFFFFFu;

  // cover: the record's strategy (shared by an owner's pools: one driver refusal is enough);
  // record_events false (free_sync:device): a fence is taken only while a capture is underway
  // and completed by a synchronization once it ended; synchronizations: the owner's count of
  // fences made safe by a synchronization because an event call failed or memory ran out.
  FenceSlots(const RealDriver& driver, CUcontext ctx, StreamRegistry& streams,
             const CaptureRegistry& captures, ContextFence& cover, bool record_events,
             std::uint64_t& synchronizations) noexcept
      : driver_(driver),
        ctx_(ctx),
        streams_(streams),
        captures_(captures),
        cover_(cover),
        record_events_(record_events),
        synchronizations_(synchronizations) {}
  ~FenceSlots() = default;  // events are left to the driver, as at exit
  FenceSlots(const FenceSlots&) = delete;
  FenceSlots& operator=(const FenceSlots&) = delete;

  Token fence() noexcept;
  // Stops at the first event not done, and starts there next time: the events before it
  // are not asked again (with many busy streams a poll would otherwise ask them all).
  bool poll(std::uint64_t token) noexcept {
    const auto held = captures_.hold();  // the checks and the queries see the same captures
    Slot* s = slots_.at(token);
    if (s == nullptr) return token != kOwed || settle_owed();
    if (capturing()) return false;
    if (s->deferred && !record_deferred(*s)) return false;
    for (; s->done < s->events.size(); ++s->done) {
      const CUresult r = driver_.event_query(s->events[s->done]);
      if (r == CUDA_ERROR_NOT_READY) return false;
      if (r != CUDA_SUCCESS) return lost();
    }
    return true;
  }
  bool wait(std::uint64_t token) noexcept;
  void release(std::uint64_t token) noexcept;

  // Whether a capture is underway in the context: nothing is recorded, queried or
  // synchronized there then.
  bool capturing() const noexcept { return captures_.any() && captures_.any_in(ctx_); }
  // Waits for all the context's work (cuCtxSynchronize in it); nothing while capturing.
  void synchronize() noexcept;
  // The context was destroyed and its events with it: forget them without a driver call.
  void forget_events() noexcept;
  CUcontext context() const noexcept { return ctx_; }

 private:
  struct Slot {
    std::vector<CUevent> events;  // the context's one, or one per stream that was not idle
    // events[0, done) were seen complete: a poll goes on from the first one not seen so.
    std::uint32_t done = 0;
    // Asked for while a capture was underway in the context (one luma knows of, or one
    // the driver reported): nothing recorded yet; recorded once no capture is underway,
    // and only then possibly done.
    bool deferred = false;
  };

  // Records s's events (context_fence.h), the context current; nothing kept unless recorded.
  ContextFence::Outcome record(Slot& s) noexcept;
  // A deferred slot, no capture known: recorded now (or completed). False: still deferred.
  bool record_deferred(Slot& s) noexcept;
  // An event the driver lost (context torn down?): wait for everything instead. True.
  bool lost() noexcept;
  // The kOwed fences: false while a capture is underway in the context; else the owed
  // synchronization is made (once for all of them) and true.
  bool settle_owed() noexcept;
  CUevent take_event() noexcept;
  void give_event(CUevent e) noexcept;

  const RealDriver& driver_;
  CUcontext ctx_;
  StreamRegistry& streams_;
  const CaptureRegistry& captures_;
  ContextFence& cover_;
  bool record_events_;
  std::uint64_t& synchronizations_;
  SlotTable<Slot> slots_;
  bool owe_synchronization_ = false;  // a kOwed fence was given since the last one
  std::vector<CUevent> spare_;  // pooled: creating an event costs a driver call
};

}  // namespace luma::shim
