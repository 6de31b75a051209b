// caching_allocator.cpp - the caching allocator of one device (see caching_allocator.h):
// its public interface (lock, then delegate) and its hot path - allocate, free, a free block
// taken and split, a freed block completed and merged, epochs of frees closed and polled
// (PendingFrees, pending_frees.h) - in one file, so that the compiler inlines the hot
// path's helpers into the two calls.
// The structures and the rest of the methods: allocator_impl.h.
//
// With a million live blocks the records and the map are far larger than any cache, and
// each dependent miss costs 150-300 ns on the development VM; the hot path therefore
// starts the loads it will need before it needs them: free() prefetches the block record
// its epoch's completion will read, and completing an epoch prefetches the neighbours of
// the block two places on (and, for big allocators, first every block's neighbours and
// their list links), so those misses overlap instead of following one another.
#include "allocator/allocator_impl.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>  // std::lock_guard

namespace luma::core {
namespace {

// Requests above this are refused as out-of-memory without asking the device: no GPU
// has 4 EiB, and it keeps every rounding and size-class computation far from overflow.
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

// Completing an epoch loads its records in passes first (complete_epoch) only when there
// are more block records than fit in a 1 MiB L2 cache (64 bytes each): below that they are
// cached anyway and the passes would only cost instructions.
constexpr std::size_t kPrefetchAboveBlocks = (std::size_t{1} << 20) / sizeof(Block);

}  // namespace

// Everything allocate may need, reserved before anything changes; the test is a few
// compares, the growth (which may throw) rare.
[[gnu::always_inline]] void CachingAllocator::Impl::reserve_capacity() {
  // (A new segment's record and index slot are grow()'s own business.)
  if (blocks.spare() >= 2 && live.has_room() && pending.has_room()) [[likely]]
    return;
  blocks.ensure(2);  // a new segment's block and a split remainder
  live.reserve_for(live.size() + 1);
  pending.reserve();  // room to close the open epoch
}

// `tight`: under pressure a large request takes no block more than large_round bigger
// than it (a new segment of its own size instead), so no piece is left that is too
// small for what comes next; allocate() still splits such a block rather than fail.
[[gnu::always_inline]] Block* CachingAllocator::Impl::find_free(Pool p, std::size_t rounded, bool tight) noexcept {
  Block* b = free_blocks.find(p, rounded);
  // PyTorch's max_non_split_rounding: an oversize request does not take a block so much
  // bigger that the rest (which is never split off) would be wasted.
  if (b != nullptr && free_blocks.oversize(rounded) && b->size >= rounded + opt.large_segment) return nullptr;
  if (tight && b != nullptr && p == Pool::large && b->size >= rounded + opt.large_round) [[unlikely]]
    return nullptr;
  return b;
}

// Takes the free block b for a request: split off the rest when allowed, account.
[[gnu::always_inline]] void* CachingAllocator::Impl::take(Block* b, std::size_t rounded, std::size_t requested) noexcept {
  free_blocks.remove(b);
  const Pool p = b->pool;
  const bool was_split = b->is_split();
  if (!was_split) [[unlikely]]
    segments.no_longer_idle(whole_segment(b));
  const std::size_t remaining = b->size - rounded;
  if (!free_blocks.oversize(rounded) && remaining >= opt.min_split) {
    Block* r = blocks.get();
    r->addr = b->addr + rounded;
    r->size = remaining;
    r->pool = b->pool;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    free_blocks.insert(r);
    if (was_split) {
      stats.inactive_split_bytes.sub(p, rounded);  // an inactive split block shrinks
    } else {
      stats.inactive_split.add(p, 1);  // a new inactive split block appears
      stats.inactive_split_bytes.add(p, remaining);
    }
  } else if (was_split) {
    stats.inactive_split.sub(p, 1);
    stats.inactive_split_bytes.sub(p, b->size);
  }
  b->state = BlockState::in_use;
  b->requested = requested;
  live.insert(b->addr, LiveBlock::make(*b, unit_shift));
  stats.allocation.add(p, 1);
  stats.allocated_bytes.add(p, b->size);
  stats.requested_bytes.add(p, requested);
  stats.active.add(p, 1);
  stats.active_bytes.add(p, b->size);
  ++stats.alloc_calls;
  emit(EventKind::alloc, b->addr, b->size, requested);
  return reinterpret_cast<void*>(b->addr);
}

// own: a segment of its own for this one block (allocate_own_segment): no free block is
// looked for, and the segment is exactly the rounded request. One body for both, so the
// hot path's helpers keep a single caller each (and stay inlined).
[[gnu::noinline]] AllocResult CachingAllocator::Impl::allocate(std::size_t bytes, bool own) noexcept {
  if (bytes > kMaxRequest) {
    record_oom(bytes);
    return {nullptr, AllocStatus::out_of_memory};
  }
  try {
    reserve_capacity();
  } catch (...) {  // host memory for the index is gone: nothing has changed
    record_oom(bytes);
    return {nullptr, AllocStatus::out_of_memory};
  }
  // round_size() without its per-call bit_ceil and saturation: opt is sanitized (the
  // alignment a power of two) and bytes <= kMaxRequest, so the mask cannot overflow.
  const std::size_t rounded = (bytes + align_mask) & ~align_mask;
  const Pool p = pool_for(opt, rounded);
  if (pending.any_closed()) pending.poll(*this);
  Block* b = nullptr;
  if (!own) [[likely]] {
    b = find_free(p, rounded, pressure);
    // Waiting for a pending free of this pool is cheaper than a new segment.
    while (b == nullptr && pending.reclaim(p, *this)) b = find_free(p, rounded, pressure);
  }
  if (b == nullptr) {
    int error = 0;
    b = grow(p, rounded, &error, own);
    if (b == nullptr && error != 0) {
      ++stats.num_device_errors;
      return {nullptr, AllocStatus::device_error, error};
    }
    if (b == nullptr) b = find_free(p, rounded, false);  // tight placement refused a fit
  }
  if (b == nullptr) {
    record_oom(bytes);
    return {nullptr, AllocStatus::out_of_memory};
  }
  return {take(b, rounded, bytes), AllocStatus::ok};
}

// Reads one pointer-map bucket and never the block record (until the block's epoch
// completes): see LiveBlock (block.h) and epoch.h. requested_bytes drops when the free
// completes, with active_bytes, as PyTorch's does (its free_block).
[[gnu::always_inline]] FreeStatus CachingAllocator::Impl::free(const void* ptr) noexcept {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  LiveBlock lb;
  if (!live.take(addr, &lb)) {
    if (segments.containing(addr) == nullptr) return FreeStatus::not_owned;
    ++stats.invalid_frees;
    return FreeStatus::invalid;
  }
  Block* b = blocks.at(lb.block);
  // Its completion, up to an epoch of frees later, will read and merge the record: start
  // loading it now (a prefetch, so nothing here waits for it). Measured 4 ns per pair
  // at 10^4 live blocks.
  __builtin_prefetch(b, 1);
  const Pool p = lb.pool();
  const std::size_t size = lb.size_in_record() ? b->size : lb.size(unit_shift);
  stats.allocation.sub(p, 1);
  stats.allocated_bytes.sub(p, size);
  ++stats.free_calls;
  emit(EventKind::free_requested, addr, size, 0);
  if (own_segments != 0 && free_own_now(b, p)) [[unlikely]]
    return FreeStatus::ok;
  if (fence_mode == FenceMode::none || reuse_now.load(std::memory_order_relaxed)) {
    complete(b);
    return FreeStatus::ok;
  }
  if (pending.push(b, p, size)) pending.close(*this);
  return FreeStatus::ok;
}

// A block whose fences are done (or that had none) becomes free and merges with its
// free neighbours; inactive_split follows PyTorch's free_block net-change accounting.
[[gnu::always_inline]] void CachingAllocator::Impl::complete(Block* b) noexcept {
  const Pool p = b->pool;
  stats.active.sub(p, 1);
  stats.active_bytes.sub(p, b->size);
  stats.requested_bytes.sub(p, b->requested);
  emit(EventKind::free_completed, b->addr, b->size, 0);
  b->state = BlockState::free;
  merge_free(b);
}

// A free block that became its segment's only block: its segment goes to the back of the
// pool's idle list, and the block keeps the record (block.h) for take() to find.
void CachingAllocator::Impl::became_whole(Block* b) noexcept {
  Segment* s = segments.of_first(b);  // its first block: b->prev == nullptr
  b->requested = reinterpret_cast<std::uintptr_t>(s);
  segments.became_idle(s);
}

// Makes every block of an epoch free (its fence, if any, is done and released by now).
// With a million live blocks each record a completion touches is a cache miss, and one
// step's misses depend on the last's (block -> its neighbours -> their list links); so
// for a batch the levels are loaded one pass each first, letting a whole level's misses
// overlap instead of following one another (see the file comment).
void CachingAllocator::Impl::complete_epoch(const Epoch& e) noexcept {
  if (e.count > 1 && blocks.in_use() > kPrefetchAboveBlocks) {
    for (std::uint32_t i = 0; i < e.count; ++i) __builtin_prefetch(e.blocks[i], 1);
    for (std::uint32_t i = 0; i < e.count; ++i) {
      const Block* b = e.blocks[i];
      if (b->prev != nullptr) __builtin_prefetch(b->prev, 1);
      if (b->next != nullptr) __builtin_prefetch(b->next, 1);
    }
    for (std::uint32_t i = 0; i < e.count; ++i) {
      const Block* b = e.blocks[i];
      for (const Block* n : {b->prev, b->next}) {
        if (n == nullptr || n->state != BlockState::free) continue;
        if (n->list_prev != nullptr) __builtin_prefetch(n->list_prev, 1);
        if (n->list_next != nullptr) __builtin_prefetch(n->list_next, 1);
      }
    }
  }
  // And at any size, while one block completes, the address neighbours of the block two
  // places on start loading (its record was prefetched at its free): at 10^4 live blocks
  // the records are beyond the L1 cache, and this overlapped enough of those misses to
  // save 5 ns per alloc+free pair (docs/performance.md).
  for (std::uint32_t i = 0; i < e.count; ++i) {
    if (i + 2 < e.count) {
      const Block* ahead = e.blocks[i + 2];
      if (ahead->prev != nullptr) __builtin_prefetch(ahead->prev, 1);
      if (ahead->next != nullptr) __builtin_prefetch(ahead->next, 1);
    }
    complete(e.blocks[i]);
  }
}

// A check=full build's check after a call (check_after). A failure aborts there and then:
// the call that broke an invariant is on the stack (in a debugger or a core file), where
// a check the test runs later would only say that something before it did; and the
// allocator's callers cannot handle a broken allocator anyway. The check allocates host
// memory; when there is none it is skipped (the next call checks again).
void CachingAllocator::Impl::check_or_abort(const char* call) const noexcept {
  std::vector<std::string> failures;
  try {
    failures = check();
  } catch (...) {
    return;
  }
  if (failures.empty()) return;
  for (const std::string& m : failures) std::fprintf(stderr, "luma: allocator check failed after %s: %s\n", call, m.c_str());
  std::fflush(stderr);
  std::abort();
}

// ---- public interface: lock, then delegate -------------------------------------------

CachingAllocator::CachingAllocator(Device& device, int device_index, const AllocatorOptions& options)
    : impl_(std::make_unique<Impl>(device, device_index, options)) {}

// Memory stays with the device (never freed at exit); the fence queue gives every token
// back exactly once.
CachingAllocator::~CachingAllocator() = default;

AllocResult CachingAllocator::allocate(std::size_t bytes) noexcept {
  if (bytes == 0) return {nullptr, AllocStatus::invalid_size};
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const AllocResult r = impl_->allocate(bytes, false);
  impl_->publish_live();
  impl_->check_after("allocate");
  return r;
}

void CachingAllocator::set_reuse_at_once(bool on) noexcept {
  impl_->reuse_now.store(on, std::memory_order_relaxed);
}
bool CachingAllocator::reuse_at_once() const noexcept {
  return impl_->reuse_now.load(std::memory_order_relaxed);
}

AllocResult CachingAllocator::allocate_own_segment(std::size_t bytes) noexcept {
  if (bytes == 0) return {nullptr, AllocStatus::invalid_size};
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const AllocResult r = impl_->allocate(bytes, true);
  impl_->publish_live();
  impl_->check_after("allocate_own_segment");
  return r;
}

FreeStatus CachingAllocator::free(void* ptr) noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const FreeStatus r = impl_->free(ptr);
  impl_->publish_live_held();
  impl_->check_after("free");
  return r;
}

std::size_t CachingAllocator::empty_cache() noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const std::size_t released = impl_->empty_cache();
  impl_->publish_live();
  impl_->check_after("empty_cache");
  return released;
}

void CachingAllocator::release_all() noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  impl_->release_all();
  impl_->publish_live();
  impl_->check_after("release_all");
}

void CachingAllocator::drop_device_memory() noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  impl_->drop_device_memory();
  impl_->publish_live();
  impl_->check_after("drop_device_memory");
}

bool CachingAllocator::owns(const void* ptr, std::size_t* size) const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const LiveBlock* lb = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (lb == nullptr) return false;
  if (size != nullptr) *size = impl_->blocks.at(lb->block)->size;
  return true;
}

bool CachingAllocator::block_of(const void* addr, SegmentRange* out) const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (const LiveBlock* lb = impl_->live.find(a)) {  // the start of a block: O(1)
    if (out != nullptr) *out = {reinterpret_cast<void*>(a), impl_->blocks.at(lb->block)->size};
    return true;
  }
  const Segment* s = impl_->segments.containing(a);  // O(log segments) ...
  if (s == nullptr) return false;
  const Block* b = s->first;
  while (b != nullptr && a - b->addr >= b->size) b = b->next;  // ... then a walk
  // Allocated means in the pointer map; an in-use block that is not is a pending free.
  if (b == nullptr || b->state != BlockState::in_use || impl_->live.find(b->addr) == nullptr) return false;
  if (out != nullptr) *out = {reinterpret_cast<void*>(b->addr), b->size};
  return true;
}

bool CachingAllocator::segment_of(const void* ptr, SegmentRange* out) const noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  const Segment* s = impl_->segments.containing(reinterpret_cast<std::uintptr_t>(ptr));
  if (s == nullptr) return false;
  if (out != nullptr) *out = {reinterpret_cast<void*>(s->base), s->size, s->own, s->expandable};
  return true;
}

void CachingAllocator::set_event_sink(EventSink* sink) noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  impl_->sink = sink;
}

void CachingAllocator::set_live_writer(live::SlotWriter* writer) noexcept {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  impl_->live_writer = writer;
  impl_->publish_live();
}

const AllocatorOptions& CachingAllocator::options() const noexcept { return impl_->opt; }

}  // namespace luma::core
