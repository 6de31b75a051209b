// plan_replay.cpp - see plan_replay.h.
//
// Why checking the previous holders of a slot's bytes is enough: take a byte b of slot k
// and the blocks placed on b before k, oldest first: x1, x2, ..., xm. When x(i+1) was
// placed, x(i) was its previous holder of b and was checked free (or waited for). A block
// once freed never becomes live again (a later instance of the same slot is a new
// placement), so only xm, the last holder, can still be live or pending when k comes.
// Placements are always a prefix of the plan's order (after a divergence nothing more is
// placed), so the precomputed "last holder" lists are exact; in a periodic plan the last
// holders of a period slot are the same in every iteration after the first.
//
// Fences: a freed block's bytes are reused only after its fence completed (device.h), with
// the caching allocator's epochs: per_free records at every free, batched collects frees
// into an open epoch closed by one fence (at the epoch bounds, or at the next planned
// allocation: one fence per burst of frees), none frees at once. A placement that needs a
// pending block polls the oldest fences, then waits, oldest first; a plan has no other
// place to put the bytes, so when the device cannot wait now it diverges. The protocol
// itself is core/allocator/fence_queue.h, shared with the caching allocator.
#include "replay/plan_replay.h"

#include <algorithm>
#include <bit>
#include <map>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "live/live_writer.h"

namespace luma::core {
namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t a) noexcept { return (v + a - 1) / a * a; }

// Slot -> the slots that last held its bytes, appended to `out` (sorted, unique), while
// `holders` maps each byte range [start, end) of the arena to its last holder.
using Holders = std::map<std::uint64_t, std::pair<std::uint64_t, std::uint32_t>>;

void place(Holders& holders, std::uint64_t a, std::uint64_t b, std::uint32_t slot,
           std::vector<std::uint32_t>& out) {
  const std::size_t first = out.size();
  auto it = holders.lower_bound(a);
  if (it != holders.begin()) {
    auto prev = std::prev(it);
    if (prev->second.first > a) it = prev;
  }
  while (it != holders.end() && it->first < b) {
    const std::uint64_t s = it->first;
    const auto [e, holder] = it->second;
    out.push_back(holder);
    it = holders.erase(it);
    if (s < a) holders.emplace(s, std::make_pair(a, holder));
    if (e > b) {
      holders.emplace(b, std::make_pair(e, holder));
      break;  // ranges are disjoint: nothing else starts before b
    }
  }
  holders.emplace(a, std::make_pair(b, slot));
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  out.erase(std::unique(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()), out.end());
}

// The arena is one large-pool segment: only the "all" counters are kept on the hot path,
// stats() copies them to the large pool.
void add(PoolCounter& c, std::uint64_t n) noexcept { c.all.add(n); }
void sub(PoolCounter& c, std::uint64_t n) noexcept { c.all.sub(n); }

}  // namespace

const char* divergence_reason_name(DivergenceReason reason) noexcept {
  switch (reason) {
    case DivergenceReason::none: return "none";
    case DivergenceReason::size_mismatch: return "size_mismatch";
    case DivergenceReason::beyond_plan: return "beyond_plan";
    case DivergenceReason::live_conflict: return "live_conflict";
    case DivergenceReason::arena_unavailable: return "arena_unavailable";
    case DivergenceReason::incompatible_plan: return "incompatible_plan";
    case DivergenceReason::context_lost: return "context_lost";
  }
  return "unknown";
}

PlanReplay::PlanReplay(Device& device, int device_index, const DevicePlanFile& plan,
                       const AllocatorOptions& options)
    : dev_(device),
      device_index_(device_index),
      fence_mode_(device.fence_mode()),
      epoch_max_blocks_(std::max<std::size_t>(options.epoch_max_blocks, 1)),
      epoch_max_bytes_(std::max<std::size_t>(options.epoch_max_bytes, 1)) {
  stats_.device = device_index;
  const std::size_t n = plan.allocations.size();
  plan_arena_ = plan.arena;
  alignment_ = plan.alignment;
  if (plan.periodic) {
    warmup_ = plan.periodic->warmup;
    period_ = plan.periodic->period;
  }
  const std::uint64_t promised = std::max<std::uint64_t>(options.alignment, 1);
  // read_plan_file guarantees all of this for a file; a plan built in code is checked too,
  // so that no plan can make replay hand out bytes outside its arena.
  bool valid = std::has_single_bit(alignment_) && alignment_ >= promised && n < kNone &&
               plan.arena <= plan::kMaxPlanBytes && (period_ == 0 || warmup_ + period_ == n);
  for (std::size_t s = 0; valid && s < n; ++s) {
    const PlannedAllocation& a = plan.allocations[s];
    valid = a.size > 0 && a.size <= plan.arena && a.offset <= plan.arena - a.size && a.offset % alignment_ == 0;
  }
  if (!valid) {
    incompatible_.reason = DivergenceReason::incompatible_plan;
    incompatible_.plan_alignment = alignment_;
    incompatible_.allocator_alignment = promised;
    return;  // every allocation goes to the caching allocator; nothing else is needed
  }
  arena_bytes_ = round_up(std::max<std::uint64_t>(plan.arena, 1), alignment_);
  offset_.resize(n);
  size_.resize(n);
  requested_.resize(n);
  for (std::size_t s = 0; s < n; ++s) {
    const PlannedAllocation& a = plan.allocations[s];
    offset_[s] = a.offset;
    size_[s] = a.size;
    requested_[s] = a.requested;
    max_size_ = std::max(max_size_, a.size);
  }
  distinct_offsets_ = offset_;
  std::sort(distinct_offsets_.begin(), distinct_offsets_.end());
  distinct_offsets_.erase(std::unique(distinct_offsets_.begin(), distinct_offsets_.end()), distinct_offsets_.end());
  offset_index_.resize(n);
  for (std::size_t s = 0; s < n; ++s)
    offset_index_[s] = static_cast<std::uint32_t>(
        std::lower_bound(distinct_offsets_.begin(), distinct_offsets_.end(), offset_[s]) - distinct_offsets_.begin());

  Holders holders;
  first_start_.reserve(n + 1);
  for (std::size_t s = 0; s < n; ++s) {
    first_start_.push_back(static_cast<std::uint32_t>(first_pred_.size()));
    place(holders, offset_[s], offset_[s] + size_[s], static_cast<std::uint32_t>(s), first_pred_);
  }
  first_start_.push_back(static_cast<std::uint32_t>(first_pred_.size()));
  if (period_ > 0) {
    for (std::uint64_t s = warmup_; s < n; ++s) {
      steady_start_.push_back(static_cast<std::uint32_t>(steady_pred_.size()));
      place(holders, offset_[s], offset_[s] + size_[s], static_cast<std::uint32_t>(s), steady_pred_);
    }
    steady_start_.push_back(static_cast<std::uint32_t>(steady_pred_.size()));
  }
  if (plan.fence_slack && plan.fence_slack->allocations > 0) {
    lead_ = plan.fence_slack->allocations;
    // Slot p's next use: the nearest later slot s whose bytes p last held, counted in
    // allocations. First pass: s - p. Steady lists (periodic): s's instance in the period's
    // second iteration is s + P, and p's the latest instance before it (p itself for a
    // warm-up slot, or p's previous-period instance when p >= s). Taking the minimum over
    // both passes can only close epochs earlier than needed, which is always safe.
    next_use_.assign(n, kNever);
    for (std::size_t s = 0; s < n; ++s)
      for (std::uint32_t i = first_start_[s]; i < first_start_[s + 1]; ++i)
        next_use_[first_pred_[i]] = std::min<std::uint64_t>(next_use_[first_pred_[i]], s - first_pred_[i]);
    if (period_ > 0) {
      for (std::uint64_t s = warmup_; s < n; ++s) {
        for (std::uint32_t i = steady_start_[s - warmup_]; i < steady_start_[s - warmup_ + 1]; ++i) {
          const std::uint64_t p = steady_pred_[i];
          const std::uint64_t dist = p < warmup_ ? s + period_ - p : (p < s ? s - p : s + period_ - p);
          next_use_[p] = std::min(next_use_[p], dist);
        }
      }
    }
  }
  state_.assign(n, SlotState::free);
  instance_.assign(n, 0);
  epoch_of_.assign(n, 0);
  epoch_next_.assign(n, kNone);
  live_at_.assign(distinct_offsets_.size(), kNone);
  open_.id = next_epoch_id_++;
}

PlanReplay::~PlanReplay() = default;

std::uint32_t PlanReplay::slot_for(std::uint64_t k) const noexcept {
  const std::uint64_t n = offset_.size();
  if (k < n) return static_cast<std::uint32_t>(k);
  if (period_ == 0) return kNone;
  return static_cast<std::uint32_t>(warmup_ + (k - warmup_) % period_);
}

void PlanReplay::emit(EventKind kind, std::uintptr_t addr, std::uint64_t size, std::uint64_t requested) noexcept {
  if (live_writer_ != nullptr) live_writer_->on_event(kind, size);
  if (sink_ != nullptr) sink_->on_event(Event{kind, device_index_, addr, size, requested});
}

ReplayAllocation PlanReplay::diverge(Divergence d) noexcept {
  following_ = false;
  divergence_ = d;
  return {nullptr, true};
}

bool PlanReplay::reserve_arena(int* device_error) noexcept {
  const Reservation r = dev_.reserve(arena_bytes_);
  void* base = r.base;
  if (base == nullptr) {
    *device_error = r.error;
    return false;
  }
  if (reinterpret_cast<std::uintptr_t>(base) % alignment_ != 0) {  // breaks the contract
    dev_.release(base, arena_bytes_);
    return false;
  }
  base_ = reinterpret_cast<std::uintptr_t>(base);
  ++arena_reservations_;
  add(stats_.segment, 1);
  add(stats_.reserved_bytes, arena_bytes_);
  ++stats_.num_device_alloc;
  emit(EventKind::segment_reserve, base_, arena_bytes_, 0);
  return true;
}

ReplayAllocation PlanReplay::allocate(std::size_t bytes) noexcept {
  if (!following_) return {};
  const std::uint64_t k = next_;
  Divergence d;
  d.sequence = k;
  d.requested = bytes;
  if (incompatible_.reason != DivergenceReason::none) {
    d = incompatible_;
    d.sequence = k;
    d.requested = bytes;
    return diverge(d);
  }
  const std::uint32_t slot = slot_for(k);
  if (slot == kNone) {
    d.reason = DivergenceReason::beyond_plan;
    d.planned_allocations = offset_.size();
    return diverge(d);
  }
  if (bytes != requested_[slot]) {
    d.reason = DivergenceReason::size_mismatch;
    d.planned_requested = requested_[slot];
    return diverge(d);
  }
  if (base_ == 0) {
    if (arena_released_ || !reserve_arena(&d.device_error)) {
      d.reason = DivergenceReason::arena_unavailable;
      d.arena_bytes = arena_bytes_;
      return diverge(d);
    }
  }
  const bool first_pass = k < offset_.size();
  const std::uint32_t* preds = first_pass ? first_pred_.data() + first_start_[slot]
                                          : steady_pred_.data() + steady_start_[slot - warmup_];
  const std::uint32_t* preds_end = first_pass ? first_pred_.data() + first_start_[slot + 1]
                                              : steady_pred_.data() + steady_start_[slot - warmup_ + 1];
  for (const std::uint32_t* p = preds; p != preds_end; ++p) {
    if (state_[*p] == SlotState::live) {
      d.reason = DivergenceReason::live_conflict;
      d.conflicting_sequence = instance_[*p];
      return diverge(d);
    }
  }
  // The same offset can hold only one live block; the holders above imply it, this keeps
  // the index honest even for a plan whose slots coincide exactly.
  if (live_at_[offset_index_[slot]] != kNone) {
    d.reason = DivergenceReason::live_conflict;
    d.conflicting_sequence = instance_[live_at_[offset_index_[slot]]];
    return diverge(d);
  }
  // batched: the frees since the last allocation share one fence, recorded now rather
  // than when their bytes are needed: a fence recorded at reuse time would cover all the
  // work issued until then, and waiting for it would drain the GPU; recorded now, it is
  // usually long complete when a later planned allocation reuses those bytes.
  // Fence-aware plans: only once some freed bytes are needed within lead_ allocations
  // (later frees join the same fence meanwhile); make_free below closes it in any case
  // before a pending block's bytes are handed out. While the GPU keeps up (the last
  // fence was done at the first allocation after it, without a wait), a fence recorded
  // later is done as soon, so it is recorded kKeptUpFenceLead allocations ahead instead:
  // one fence then covers the frees of several bursts. A fence found not done (or waited
  // for) brings the lead back to the plan's.
  if (!closed_.empty()) process_events();
  if (judging_) {
    judging_ = false;
    keeping_up_ = closed_.empty() && stats_.num_fence_waits == waits_at_close_;
  }
  const std::uint64_t lead = keeping_up_ ? std::min(lead_, plan::kKeptUpFenceLead) : lead_;
  if (open_.head != kNone && (lead_ == kNever || open_.deadline <= k || open_.deadline - k <= lead)) {
    close_open_epoch();
    judging_ = !next_use_.empty();
    waits_at_close_ = stats_.num_fence_waits;
  }
  for (const std::uint32_t* p = preds; p != preds_end; ++p) {
    if (state_[*p] == SlotState::pending && !make_free(*p)) {
      // The device cannot wait for its fence now (device.h): the bytes are still held.
      d.reason = DivergenceReason::live_conflict;
      d.conflicting_sequence = instance_[*p];
      return diverge(d);
    }
  }

  state_[slot] = SlotState::live;
  instance_[slot] = k;
  live_at_[offset_index_[slot]] = slot;
  add(stats_.allocation, 1);
  add(stats_.allocated_bytes, size_[slot]);
  add(stats_.requested_bytes, requested_[slot]);
  add(stats_.active, 1);
  add(stats_.active_bytes, size_[slot]);
  ++stats_.alloc_calls;
  const std::uintptr_t addr = base_ + offset_[slot];
  emit(EventKind::alloc, addr, size_[slot], requested_[slot]);
  ++next_;
  return {reinterpret_cast<void*>(addr), false};
}

std::uint32_t PlanReplay::live_slot_at(std::uintptr_t addr) const noexcept {
  if (base_ == 0 || addr < base_ || addr - base_ >= arena_bytes_) return kNone;
  const std::uint64_t off = addr - base_;
  auto it = std::lower_bound(distinct_offsets_.begin(), distinct_offsets_.end(), off);
  if (it == distinct_offsets_.end() || *it != off) return kNone;
  return live_at_[static_cast<std::size_t>(it - distinct_offsets_.begin())];
}

FreeStatus PlanReplay::free(void* ptr) noexcept {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (!contains(ptr)) return FreeStatus::not_owned;
  const std::uint32_t slot = live_slot_at(addr);
  if (slot == kNone) {
    ++stats_.invalid_frees;
    return FreeStatus::invalid;
  }
  live_at_[offset_index_[slot]] = kNone;
  sub(stats_.allocation, 1);
  sub(stats_.allocated_bytes, size_[slot]);
  sub(stats_.requested_bytes, requested_[slot]);
  ++stats_.free_calls;
  emit(EventKind::free_requested, addr, size_[slot], 0);
  if (fence_mode_ == FenceMode::none) {
    complete_slot(slot);
    return FreeStatus::ok;
  }
  state_[slot] = SlotState::pending;
  epoch_of_[slot] = open_.id;
  epoch_next_[slot] = open_.head;
  open_.head = slot;
  ++open_.blocks;
  open_.bytes += size_[slot];
  if (!next_use_.empty() && next_use_[slot] != kNever)
    open_.deadline = std::min(open_.deadline, instance_[slot] + next_use_[slot]);
  if (fence_mode_ == FenceMode::per_free || open_.blocks >= epoch_max_blocks_ || open_.bytes >= epoch_max_bytes_)
    close_open_epoch();
  return FreeStatus::ok;
}

void PlanReplay::complete_slot(std::uint32_t slot) noexcept {
  state_[slot] = SlotState::free;
  sub(stats_.active, 1);
  sub(stats_.active_bytes, size_[slot]);
  emit(EventKind::free_completed, base_ + offset_[slot], size_[slot], 0);
}

void PlanReplay::complete_epoch(std::uint32_t head) noexcept {
  while (head != kNone) {
    const std::uint32_t next = epoch_next_[head];
    epoch_next_[head] = kNone;
    complete_slot(head);
    head = next;
  }
}

void PlanReplay::close_open_epoch() noexcept {
  if (open_.head == kNone) return;
  Epoch e = open_;
  open_ = Epoch{};
  open_.id = next_epoch_id_++;
  // (Closed::stranded: its slots stay pending for good, never reused: fence_queue.h.)
  closed_.close(e, [this](Epoch& done) noexcept { complete_epoch(done.head); });
}

void PlanReplay::process_events() noexcept {
  closed_.poll([this](Epoch& e) noexcept { complete_epoch(e.head); });
}

// False when the slot's fence cannot be waited for now (device.h): it stays pending.
bool PlanReplay::make_free(std::uint32_t slot) noexcept {
  while (state_[slot] == SlotState::pending) {
    if (epoch_of_[slot] == open_.id) {
      close_open_epoch();  // its fence covers the free; kNoFence completes it at once
      continue;
    }
    process_events();
    if (state_[slot] != SlotState::pending) break;
    if (closed_.empty()) return false;  // unreachable, unless stranded (fence_queue.h)
    if (!closed_.wait_oldest([this](Epoch& e) noexcept { complete_epoch(e.head); })) return false;
  }
  return true;
}

// False when the device cannot wait now: some frees stay pending.
bool PlanReplay::drain_pending() noexcept {
  close_open_epoch();
  return closed_.drain([this](Epoch& e) noexcept { complete_epoch(e.head); });
}

void PlanReplay::drop_arena(bool released_by_us) noexcept {
  sub(stats_.segment, 1);
  sub(stats_.reserved_bytes, arena_bytes_);
  if (released_by_us) ++stats_.num_device_free;
  emit(EventKind::segment_release, base_, arena_bytes_, 0);
  base_ = 0;
  arena_released_ = true;
}

void PlanReplay::drop_device_memory() noexcept {
  // Fences go back unchecked (their events died with the context); pending blocks are free.
  closed_.drop([this](Epoch& e) noexcept { complete_epoch(e.head); });
  complete_epoch(open_.head);
  open_.head = kNone;
  open_.blocks = 0;
  open_.bytes = 0;
  open_.deadline = kNever;
  for (std::uint32_t s = 0; s < state_.size(); ++s) {
    if (state_[s] != SlotState::live) continue;
    const std::uintptr_t addr = base_ + offset_[s];
    forget_live(s);
    emit(EventKind::free_requested, addr, size_[s], 0);
    emit(EventKind::free_completed, addr, size_[s], 0);
  }
  if (base_ != 0) drop_arena(/*released_by_us=*/false);
  following_ = false;  // the arena is gone: a new context is served by the cache
  if (divergence_.reason == DivergenceReason::none) {
    divergence_.reason = DivergenceReason::context_lost;
    divergence_.sequence = next_;
  }
}

// A live slot whose memory went without a free (the context was lost, or release_all):
// counted as freed and completed at once.
void PlanReplay::forget_live(std::uint32_t s) noexcept {
  state_[s] = SlotState::free;
  live_at_[offset_index_[s]] = kNone;
  sub(stats_.allocation, 1);
  sub(stats_.allocated_bytes, size_[s]);
  sub(stats_.requested_bytes, requested_[s]);
  sub(stats_.active, 1);
  sub(stats_.active_bytes, size_[s]);
}

std::size_t PlanReplay::empty_cache() noexcept {
  if (!drain_pending()) return 0;  // the device cannot wait now: keep the arena
  if (following_ || base_ == 0 || stats_.allocation.all.current != 0) return 0;
  if (!dev_.release(reinterpret_cast<void*>(base_), arena_bytes_)) return 0;
  const std::size_t released = arena_bytes_;
  drop_arena(/*released_by_us=*/true);
  return released;
}

void PlanReplay::release_all() noexcept {
  if (!drain_pending()) return;  // work may still use pending blocks: release nothing
  if (base_ == 0) return;
  if (!dev_.release(reinterpret_cast<void*>(base_), arena_bytes_)) return;
  for (std::uint32_t s = 0; s < state_.size(); ++s) {
    if (state_[s] != SlotState::live) continue;
    forget_live(s);
  }
  drop_arena(/*released_by_us=*/true);
  following_ = false;  // nothing can be placed without the arena
  if (divergence_.reason == DivergenceReason::none) {
    divergence_.reason = DivergenceReason::arena_unavailable;
    divergence_.sequence = next_;
    divergence_.arena_bytes = arena_bytes_;
  }
}

bool PlanReplay::contains(const void* ptr) const noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  return base_ != 0 && a >= base_ && a - base_ < arena_bytes_;
}

bool PlanReplay::owns(const void* ptr, std::size_t* size) const noexcept {
  const std::uint32_t slot = live_slot_at(reinterpret_cast<std::uintptr_t>(ptr));
  if (slot == kNone) return false;
  if (size != nullptr) *size = size_[slot];
  return true;
}

bool PlanReplay::block_of(const void* addr, SegmentRange* out) const noexcept {
  if (!contains(addr)) return false;
  const std::uint64_t off = reinterpret_cast<std::uintptr_t>(addr) - base_;
  // Live blocks never overlap, so the live block with the closest start at or below the
  // address is the only one that can contain it; no block starts more than the largest
  // slot below it and still reaches it.
  auto it = std::upper_bound(distinct_offsets_.begin(), distinct_offsets_.end(), off);
  while (it != distinct_offsets_.begin()) {
    --it;
    if (off - *it >= max_size_) return false;
    const std::uint32_t slot = live_at_[static_cast<std::size_t>(it - distinct_offsets_.begin())];
    if (slot == kNone) continue;
    if (off - *it >= size_[slot]) return false;
    if (out != nullptr) *out = {reinterpret_cast<void*>(base_ + *it), size_[slot]};
    return true;
  }
  return false;
}

bool PlanReplay::segment_of(const void* ptr, SegmentRange* out) const noexcept {
  if (!contains(ptr)) return false;
  if (out != nullptr) *out = {reinterpret_cast<void*>(base_), arena_bytes_};
  return true;
}

DeviceStats PlanReplay::stats() const noexcept {
  DeviceStats s = stats_;
#define LUMA_STATS_TO_LARGE(name, ...) s.name.pool[static_cast<std::size_t>(Pool::large)] = s.name.all;
  LUMA_POOL_METRICS(LUMA_STATS_TO_LARGE)  // (inactive_split*: 0 in all and in large)
#undef LUMA_STATS_TO_LARGE
  return s;
}

std::size_t PlanReplay::cached_bytes() const noexcept {
  if (base_ == 0) return 0;
  return static_cast<std::size_t>(arena_bytes_ - static_cast<std::uint64_t>(stats_.allocated_bytes.all.current));
}

ReplayStats PlanReplay::replay_stats() const noexcept {
  ReplayStats r;
  r.device = device_index_;
  r.planned_allocations = offset_.size();
  r.warmup = warmup_;
  r.period = period_;
  r.arena_bytes = arena_bytes_ != 0 ? arena_bytes_ : plan_arena_;
  r.arena_held = base_ != 0;
  r.served = stats_.alloc_calls;
  if (period_ > 0 && r.served > warmup_) r.iterations = (r.served - warmup_) / period_;
  r.divergences = following_ ? 0 : 1;
  r.first_divergence = divergence_;
  r.arena_reservations = arena_reservations_;
  r.real_allocations = arena_reservations_;
  r.fence_waits = stats_.num_fence_waits;
  return r;
}

std::vector<std::string> PlanReplay::check() const {
  std::vector<std::string> v;
  auto fail = [&v](std::string m) { v.push_back(std::move(m)); };
  std::vector<std::uint32_t> occupied;
  std::uint64_t live = 0, live_bytes = 0, requested = 0, pending = 0, pending_bytes = 0;
  for (std::uint32_t s = 0; s < state_.size(); ++s) {
    if (state_[s] == SlotState::free) continue;
    occupied.push_back(s);
    if (state_[s] == SlotState::live) {
      ++live;
      live_bytes += size_[s];
      requested += requested_[s];
      if (live_at_[offset_index_[s]] != s) fail(fmt::format("live slot {} is missing from the address index", s));
    } else {
      ++pending;
      pending_bytes += size_[s];
    }
  }
  if (!occupied.empty() && base_ == 0) fail("blocks are occupied but no arena is held");
  std::sort(occupied.begin(), occupied.end(),
            [&](std::uint32_t a, std::uint32_t b) { return offset_[a] < offset_[b]; });
  for (std::size_t i = 1; i < occupied.size(); ++i) {
    const std::uint32_t a = occupied[i - 1], b = occupied[i];
    if (offset_[a] + size_[a] > offset_[b])
      fail(fmt::format("blocks of allocations {} and {} overlap ([{}, {}) and [{}, {}))", instance_[a], instance_[b],
                       offset_[a], offset_[a] + size_[a], offset_[b], offset_[b] + size_[b]));
  }
  std::uint64_t indexed = 0;
  for (std::size_t i = 0; i < live_at_.size(); ++i) {
    const std::uint32_t s = live_at_[i];
    if (s == kNone) continue;
    ++indexed;
    if (s >= state_.size() || state_[s] != SlotState::live || offset_index_[s] != i)
      fail(fmt::format("the address index names slot {} at offset {}, which is not live there", s,
                       distinct_offsets_[i]));
  }
  if (indexed != live) fail(fmt::format("the address index holds {} blocks, {} are live", indexed, live));
  // Epochs: the open one unfenced, each closed one fenced; together exactly the pending.
  std::uint64_t in_epochs = 0;
  auto walk = [&](const Epoch& e, const char* which) {
    std::uint32_t n = 0;
    std::uint64_t bytes = 0;
    for (std::uint32_t s = e.head; s != kNone; s = epoch_next_[s]) {
      if (++n > state_.size()) {
        fail(fmt::format("{} epoch: its list does not end", which));
        return;
      }
      bytes += size_[s];
      if (state_[s] != SlotState::pending) fail(fmt::format("{} epoch holds slot {} that is not pending", which, s));
      if (epoch_of_[s] != e.id) fail(fmt::format("slot {} names epoch {}, sits in {}", s, epoch_of_[s], e.id));
    }
    if (n != e.blocks || bytes != e.bytes) fail(fmt::format("{} epoch: counts do not match its list", which));
    in_epochs += n;
  };
  if (open_.fence != kNoFence) fail("the open epoch has a fence");
  walk(open_, "open");
  for (std::size_t i = 0; i < closed_.size(); ++i) {
    if (closed_.at(i).fence == kNoFence) fail("a closed epoch has no fence");
    walk(closed_.at(i), "closed");
  }
  if (in_epochs != pending) fail(fmt::format("{} blocks are pending, epochs hold {}", pending, in_epochs));
  auto expect = [&](const char* name, const PoolCounter& c, std::uint64_t want) {
    if (c.all.current != static_cast<std::int64_t>(want))
      fail(fmt::format("stats {} = {}, counted {}", name, c.all.current, want));
  };
  expect("allocation", stats_.allocation, live);
  expect("allocated_bytes", stats_.allocated_bytes, live_bytes);
  expect("requested_bytes", stats_.requested_bytes, requested);
  expect("active", stats_.active, live + pending);
  expect("active_bytes", stats_.active_bytes, live_bytes + pending_bytes);
  expect("segment", stats_.segment, base_ != 0 ? 1 : 0);
  expect("reserved_bytes", stats_.reserved_bytes, base_ != 0 ? arena_bytes_ : 0);
  if (following_ && divergence_.reason != DivergenceReason::none) fail("following, yet a divergence is recorded");
  if (!following_ && divergence_.reason == DivergenceReason::none) fail("not following, yet no divergence is recorded");
  return v;
}

}  // namespace luma::core
