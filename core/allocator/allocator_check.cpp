// allocator_check.cpp - the invariant check (CachingAllocator::check): every structure
// walked and compared with every other, and the statistics recomputed from the blocks.
// Tests call it after each step; it is never on a hot path.
#include "allocator/allocator_impl.h"

#include <map>
#include <mutex>  // std::lock_guard
#include <unordered_map>

#include <fmt/format.h>

namespace luma::core {
namespace {

const char* pool_name(Pool p) noexcept { return p == Pool::small ? "small" : "large"; }

}  // namespace

std::vector<std::string> CachingAllocator::Impl::check() const {
  std::vector<std::string> v;
  auto fail = [&v](std::string msg) { v.push_back(std::move(msg)); };

  struct Tally {
    std::int64_t segments = 0, reserved = 0;
    std::int64_t allocated = 0, allocated_bytes = 0, requested_bytes = 0;
    std::int64_t pending = 0, pending_bytes = 0;
    std::int64_t free = 0, free_bytes = 0;
    std::int64_t split_free = 0, split_free_bytes = 0;
    std::int64_t unmapped = 0;
  };
  std::array<Tally, kPools> t{};
  const std::size_t max_blocks = blocks.in_use() + 1;  // bounds every walk over a broken list

  // Which in-use blocks are pending: those the epochs list (each exactly once).
  std::unordered_map<const Block*, int> in_epochs;
  auto list_epoch = [&](const Epoch& e) {
    for (std::uint32_t i = 0; i < e.count && i < Epoch::kCapacity; ++i) ++in_epochs[e.blocks[i]];
  };
  list_epoch(pending.open());
  for (std::size_t i = 0; i < pending.closed().size(); ++i) list_epoch(pending.closed().at(i));

  // The segments in address order (check may allocate; the hot path never does).
  std::vector<const Segment*> segs;
  segs.reserve(segments.size());
  segments.for_each([&segs](const Segment* s) { segs.push_back(s); });

  std::uintptr_t prev_end = 0;
  std::uint64_t device_allocations = pages.memories();  // ordinary segments and memories
  std::size_t mapped_in_expanses = 0;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const Segment* s = segs[i];
    Tally& tp = t[pool_index(s->pool)];
    tp.segments += 1;
    tp.reserved += static_cast<std::int64_t>(s->held());
    std::size_t mapped = 0;
    if (s->expandable && (vm.page == 0 || s->mapped % vm.page != 0 || s->base % vm.page != 0))
      fail(fmt::format("expandable segment {:#x}: not in whole pages", s->base));
    if (s->expandable) {
      mapped_in_expanses += s->mapped;
    } else {
      ++device_allocations;
    }
    if (i > 0 && s->base < prev_end)
      fail(fmt::format("segment {:#x} overlaps or is out of order with the previous one", s->base));
    prev_end = s->base + s->size;
    if (s->base % opt.alignment != 0) fail(fmt::format("segment {:#x} is misaligned", s->base));
    std::uintptr_t cursor = s->base;
    const Block* prev = nullptr;
    std::size_t n = 0;
    for (const Block* b = s->first; b != nullptr; prev = b, b = b->next) {
      if (++n > max_blocks) {
        fail(fmt::format("segment {:#x}: block list does not end", s->base));
        break;
      }
      if (b->pool != s->pool) fail(fmt::format("block {:#x} names another pool than its segment", b->addr));
      if (b->prev != prev) fail(fmt::format("block {:#x}: prev link is wrong", b->addr));
      if (b->addr != cursor)
        fail(fmt::format("segment {:#x}: block at {:#x} where {:#x} was expected (gap or overlap)",
                         s->base, b->addr, cursor));
      if (b->size == 0 || b->size % opt.alignment != 0)
        fail(fmt::format("block {:#x}: size {} is not a positive multiple of the alignment", b->addr, b->size));
      if (b->addr % opt.alignment != 0) fail(fmt::format("block {:#x} is misaligned", b->addr));
      cursor = b->addr + b->size;
      if (b->state != BlockState::unmapped) {
        mapped += b->size;
        if (s->expandable && vm.page != 0 && !pages.covered(b->addr, b->size))
          fail(fmt::format("block {:#x} of an expandable segment is not all mapped", b->addr));
      }
      const auto bytes = static_cast<std::int64_t>(b->size);
      const LiveBlock* lb = live.find(b->addr);
      const auto listed = in_epochs.find(b);
      const bool pending = listed != in_epochs.end();
      switch (b->state) {
        case BlockState::in_use:
          if (lb != nullptr && pending)
            fail(fmt::format("block {:#x} is both allocated (pointer map) and pending (epoch)", b->addr));
          if (lb == nullptr && !pending)
            fail(fmt::format("in-use block {:#x} is neither in the pointer map nor in an epoch", b->addr));
          if (pending) {
            if (listed->second != 1) fail(fmt::format("pending block {:#x} is in {} epochs", b->addr, listed->second));
            tp.pending += 1;
            tp.pending_bytes += bytes;
            tp.requested_bytes += static_cast<std::int64_t>(b->requested);
          } else if (lb != nullptr) {
            tp.allocated += 1;
            tp.allocated_bytes += bytes;
            tp.requested_bytes += static_cast<std::int64_t>(b->requested);
            if (blocks.at(lb->block) != b)
              fail(fmt::format("pointer map entry {:#x} names another block record", b->addr));
            if (lb->pool() != b->pool) fail(fmt::format("pointer map entry {:#x}: wrong pool", b->addr));
            if (lb->size_in_record() ? (b->size >> unit_shift) < LiveBlock::kSizeInRecord
                                     : lb->size(unit_shift) != b->size)
              fail(fmt::format("pointer map entry {:#x}: wrong size for the block's {}", b->addr, b->size));
          }
          if (b->requested > b->size || b->requested == 0)
            fail(fmt::format("in-use block {:#x}: requested {} outside (0, size {}]", b->addr, b->requested, b->size));
          break;
        case BlockState::free:
          tp.free += 1;
          tp.free_bytes += bytes;
          if (b->is_split()) {
            tp.split_free += 1;
            tp.split_free_bytes += bytes;
          }
          if (prev != nullptr && prev->state == BlockState::free)
            fail(fmt::format("blocks {:#x} and {:#x} are adjacent and both free", prev->addr, b->addr));
          if (lb != nullptr) fail(fmt::format("free block {:#x} is in the pointer map", b->addr));
          if (pending) fail(fmt::format("free block {:#x} is in an epoch", b->addr));
          break;
        case BlockState::unmapped:
          tp.unmapped += 1;
          if (!s->expandable) fail(fmt::format("block {:#x} is unmapped in an ordinary segment", b->addr));
          if (vm.page != 0 && (b->addr % vm.page != 0 || b->size % vm.page != 0))
            fail(fmt::format("unmapped block {:#x} is not whole pages", b->addr));
          if (prev != nullptr && prev->state == BlockState::unmapped)
            fail(fmt::format("blocks {:#x} and {:#x} are adjacent and both unmapped", prev->addr, b->addr));
          if (lb != nullptr || pending) fail(fmt::format("unmapped block {:#x} is in use", b->addr));
          break;
      }
    }
    if (s->expandable) {
      if (mapped != s->mapped)
        fail(fmt::format("expandable segment {:#x}: {} bytes mapped, its blocks hold {}", s->base, s->mapped, mapped));
      if (prev == nullptr || prev->state != BlockState::unmapped || prev->size < vm.page)
        fail(fmt::format("expandable segment {:#x} does not end with its unmapped guard page", s->base));
      if (std::find(expanses[pool_index(s->pool)].begin(), expanses[pool_index(s->pool)].end(), s) ==
          expanses[pool_index(s->pool)].end())
        fail(fmt::format("expandable segment {:#x} is not listed in its pool", s->base));
    }
    if (cursor != s->base + s->size)
      fail(fmt::format("segment {:#x}: blocks end at {:#x}, the segment at {:#x}", s->base, cursor,
                       s->base + s->size));
  }

  // The segment table's own invariant (segment_table.h); a wholly free segment's block
  // names it (became_whole).
  segments.check(fail);
  for (const Segment* s : segs)
    if (s->wholly_free() && whole_segment(s->first) != s)
      fail(fmt::format("wholly free segment {:#x}: its block does not name it", s->base));

  // Pages: the page pool's own invariants; its mapped pages are exactly the expanses'.
  if (vm.page != 0) {
    for (std::string& m : pages.check()) fail(std::move(m));
    if (pages.mapped_bytes() != mapped_in_expanses)
      fail(fmt::format("the page pool maps {} bytes, the expandable segments {}", pages.mapped_bytes(), mapped_in_expanses));
  }
  for (std::size_t p = 0; p < kPools; ++p) t[p].reserved += static_cast<std::int64_t>(pages.spare(static_cast<Pool>(p)));

  // Unmapped ranges: each pool's list holds exactly its unmapped blocks, each once.
  for (std::size_t p = 0; p < kPools; ++p) {
    std::int64_t n = 0;
    const Block* lp = nullptr;
    for (const Block* b = unmapped[p]; b != nullptr && n <= static_cast<std::int64_t>(max_blocks); lp = b, b = b->list_next) {
      ++n;
      if (b->state != BlockState::unmapped || pool_index(b->pool) != p || b->list_prev != lp)
        fail(fmt::format("{} pool's list of unmapped ranges: entry {:#x} is wrong", pool_name(static_cast<Pool>(p)), b->addr));
    }
    if (n != t[p].unmapped)
      fail(fmt::format("{} pool: {} unmapped blocks, {} listed", pool_name(static_cast<Pool>(p)), t[p].unmapped, n));
  }

  // The free blocks' own invariant (free_blocks.h), against the free blocks the segments
  // hold.
  {
    std::array<std::int64_t, kPools> free_in_segments{};
    for (std::size_t p = 0; p < kPools; ++p) free_in_segments[p] = t[p].free;
    free_blocks.check(free_in_segments, max_blocks, fail);
  }

  // Epochs: the open one unfenced, every closed one fenced; together they hold exactly
  // the pending blocks, each once, and their per-pool counts and bytes add up.
  {
    std::array<std::int64_t, kPools> queued{};
    std::array<std::size_t, kPools> closed_sum{};
    auto walk = [&](const Epoch& e, const char* which) {
      std::array<std::size_t, kPools> n{};
      std::size_t bytes = 0;
      if (e.count > Epoch::kCapacity) {
        fail(fmt::format("{} epoch counts {} blocks, more than it can hold", which, e.count));
        return n;
      }
      for (std::uint32_t i = 0; i < e.count; ++i) {
        const Block* b = e.blocks[i];
        if (b == nullptr || b->state != BlockState::in_use) {
          fail(fmt::format("{} epoch entry {} is not an in-use block", which, i));
          continue;
        }
        ++n[pool_index(b->pool)];
        bytes += b->size;
      }
      const std::array<std::size_t, kPools> counted{e.per_pool[0], e.per_pool[1]};
      if (n != counted)
        fail(fmt::format("{} epoch: counts {}+{} blocks, holds {}+{}", which, counted[0], counted[1], n[0], n[1]));
      if (bytes != e.bytes) fail(fmt::format("{} epoch: counts {} bytes, holds {}", which, e.bytes, bytes));
      for (std::size_t p = 0; p < kPools; ++p) queued[p] += static_cast<std::int64_t>(n[p]);
      return n;
    };
    if (pending.open().fence != kNoFence) fail("the open epoch has a fence");
    walk(pending.open(), "open");
    for (std::size_t i = 0; i < pending.closed().size(); ++i) {
      const Epoch& e = pending.closed().at(i);
      if (e.fence == kNoFence) fail(fmt::format("closed epoch {} has no fence", i));
      if (e.empty()) fail(fmt::format("closed epoch {} is empty", i));
      const auto n = walk(e, "closed");
      for (std::size_t p = 0; p < kPools; ++p) closed_sum[p] += n[p];
    }
    if (closed_sum != pending.closed_blocks()) fail("closed epochs' per-pool block counts are wrong");
    for (std::size_t p = 0; p < kPools; ++p)
      if (queued[p] != t[p].pending)
        fail(fmt::format("{} pool: {} pending blocks in segments, {} in epochs", pool_name(static_cast<Pool>(p)),
                         t[p].pending, queued[p]));
  }

  // Pointer map: exactly the allocated blocks.
  std::int64_t allocated_total = t[0].allocated + t[1].allocated;
  if (static_cast<std::int64_t>(live.size()) != allocated_total)
    fail(fmt::format("pointer map holds {} entries, {} blocks are allocated", live.size(), allocated_total));
  live.for_each([&](std::uintptr_t key, const LiveBlock& lb) {
    const Block* r = lb.block < blocks.made() ? blocks.at(lb.block) : nullptr;
    if (r == nullptr || r->addr != key || r->state != BlockState::in_use)
      fail(fmt::format("pointer map entry {:#x} is not an allocated block at that address", key));
  });

  // Statistics against the tally, per pool and for all pools.
  const DeviceStats ds = view();
  auto expect = [&](const char* name, const PoolCounter& c, std::int64_t small, std::int64_t large) {
    if (c.pool[0].current != small) fail(fmt::format("stats {} (small pool) = {}, counted {}", name, c.pool[0].current, small));
    if (c.pool[1].current != large) fail(fmt::format("stats {} (large pool) = {}, counted {}", name, c.pool[1].current, large));
    if (c.all.current != small + large) fail(fmt::format("stats {} (all) = {}, counted {}", name, c.all.current, small + large));
  };
  expect("segment", ds.segment, t[0].segments, t[1].segments);
  expect("reserved_bytes", ds.reserved_bytes, t[0].reserved, t[1].reserved);
  expect("allocation", ds.allocation, t[0].allocated, t[1].allocated);
  expect("allocated_bytes", ds.allocated_bytes, t[0].allocated_bytes, t[1].allocated_bytes);
  expect("requested_bytes", ds.requested_bytes, t[0].requested_bytes, t[1].requested_bytes);
  expect("active", ds.active, t[0].allocated + t[0].pending, t[1].allocated + t[1].pending);
  expect("active_bytes", ds.active_bytes, t[0].allocated_bytes + t[0].pending_bytes,
         t[1].allocated_bytes + t[1].pending_bytes);
  expect("inactive_split", ds.inactive_split, t[0].split_free, t[1].split_free);
  expect("inactive_split_bytes", ds.inactive_split_bytes, t[0].split_free_bytes, t[1].split_free_bytes);
  if (static_cast<std::int64_t>(ds.free_blocks) != t[0].free + t[1].free)
    fail(fmt::format("stats free_blocks = {}, counted {}", ds.free_blocks, t[0].free + t[1].free));
  for (std::size_t p = 0; p < kPools; ++p)
    if (t[p].reserved != t[p].allocated_bytes + t[p].pending_bytes + t[p].free_bytes +
                            static_cast<std::int64_t>(pages.spare(static_cast<Pool>(p))))
      fail(fmt::format("{} pool: reserved {} != allocated + pending + free + spare memory", pool_name(static_cast<Pool>(p)),
                       t[p].reserved));
  if (stats.num_device_alloc - stats.num_device_free - segments_dropped != device_allocations)
    fail("device alloc calls - device free calls - segments lost with a context != segments and memories");
  return v;
}

std::vector<std::string> CachingAllocator::check() const {
  std::lock_guard<AllocatorLock> lock(impl_->mu);
  return impl_->check();
}

}  // namespace luma::core
