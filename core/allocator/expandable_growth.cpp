// expandable_growth.cpp - expandable segments (docs/placement.md, "Expandable segments").
// A pool's memory is pages mapped into address space it reserved once (an expanse): a
// request no free block serves maps the pages it lacks right after a free block, or in
// the lowest hole that has room, so the pool grows by what it needs (to the page), and
// a free block next to the new pages merges with them. Whole free pages are unmapped
// where ordinary segments would be released: before growth above the high-water mark,
// near a limit, at empty_cache and out of memory. Pending blocks are never unmapped.
#include "allocator/allocator_impl.h"

namespace luma::core {

// Whether this allocator makes expandable segments: asked of the device once, at the
// first growth (no block exists yet, so the oversize rule can still change).
bool CachingAllocator::Impl::expandable() noexcept {
  if (!vm_asked) [[unlikely]] {
    vm_asked = true;
    if (opt.expandable_segments) {
      const Device::VirtualMemory v = dev.virtual_memory();
      // A page must keep every block aligned, and an expanse must hold a page and its
      // guard page; a device answering otherwise gets ordinary segments.
      if (v.page != 0 && std::has_single_bit(v.page) && v.page % opt.alignment == 0 &&
          v.address_space / 2 >= v.page) {
        vm = v;
        pages.set_page(v.page);
        chunk = v.page;
        if (blocks.in_use() == 0) free_blocks.lift_split_limit();
      }
    }
  }
  return vm.page != 0;
}

void CachingAllocator::Impl::unmapped_push(Block* u) noexcept {
  Block*& head = unmapped[pool_index(u->pool)];
  u->list_prev = nullptr;
  u->list_next = head;
  if (head != nullptr) head->list_prev = u;
  head = u;
}

void CachingAllocator::Impl::unmapped_remove(Block* u) noexcept {
  if (u->list_prev != nullptr) {
    u->list_prev->list_next = u->list_next;
  } else {
    unmapped[pool_index(u->pool)] = u->list_next;
  }
  if (u->list_next != nullptr) u->list_next->list_prev = u->list_prev;
  u->list_prev = u->list_next = nullptr;
}

// Walks the run from `start` exactly as map_room will map it.
CachingAllocator::Impl::Room CachingAllocator::Impl::room_from(Block* start, std::size_t rounded) const noexcept {
  Room r{start, start->addr, 0};
  std::size_t have = 0;
  for (const Block* b = start; b != nullptr && have < rounded && b->state != BlockState::in_use; b = b->next) {
    if (b->state == BlockState::free) {
      have += b->size;
      r.end = b->addr + b->size;
      continue;
    }
    const std::size_t take = std::min(mappable(b), page_up(rounded - have));
    if (take == 0) break;
    have += take;
    r.map += take;
    r.end = b->addr + take;
    if (take < b->size) break;  // the rest stays unmapped
  }
  if (have < rounded) r.start = nullptr;
  return r;
}

// The lowest-addressed run of pool p with room for `rounded`; start nullptr if none.
CachingAllocator::Impl::Room CachingAllocator::Impl::find_room(Pool p, std::size_t rounded) const noexcept {
  Room best;
  for (Block* u = unmapped[pool_index(p)]; u != nullptr; u = u->list_next) {
    Block* start = u->prev != nullptr && u->prev->state == BlockState::free ? u->prev : u;
    if (best.start != nullptr && start->addr >= best.start->addr) continue;
    const Room r = room_from(start, rounded);
    if (r.start != nullptr) best = r;
  }
  return best;
}

// Spare memories of the page pool a map used or gave back: they were counted in
// reserved (in the pool they were unmapped from); now as mapped memory, or not at all.
void CachingAllocator::Impl::spare_used(const std::array<std::size_t, kPools>& before) noexcept {
  for (std::size_t q = 0; q < kPools; ++q)
    if (pages.spare(static_cast<Pool>(q)) < before[q])
      stats.reserved_bytes.sub(static_cast<Pool>(q), before[q] - pages.spare(static_cast<Pool>(q)));
}

// Segment events of an expandable segment: one per page mapped or unmapped, so that a
// trace says which addresses have memory behind them and every release pairs with a
// reserve at its address. (Driver allocations are the page pool's memories, counted in
// num_device_alloc; a page event is not one.)
void CachingAllocator::Impl::emit_pages(EventKind kind, std::uintptr_t addr, std::size_t bytes) noexcept {
  if (sink == nullptr) return;
  // requested == size: pages of an expandable segment, not a segment (event.h)
  for (std::uintptr_t a = addr; a < addr + bytes; a += vm.page) emit(kind, a, vm.page, vm.page);
}

// The pages of every run of mapped blocks of the expanse s, as released.
void CachingAllocator::Impl::emit_mapped_pages_released(const Segment* s) noexcept {
  if (sink == nullptr) return;
  for (const Block* b = s->first; b != nullptr;) {
    if (b->state == BlockState::unmapped) {
      b = b->next;
      continue;
    }
    const std::uintptr_t a = b->addr;  // a run of mapped blocks: whole pages
    std::uintptr_t e = b->addr;
    for (; b != nullptr && b->state != BlockState::unmapped; b = b->next) e = b->addr + b->size;
    emit_pages(EventKind::segment_release, a, e - a);
  }
}

// Gives back the memories none of whose pages is mapped; returns the bytes.
std::size_t CachingAllocator::Impl::trim_pages() noexcept {
  const PagePool::Trimmed t = pages.trim();
  std::size_t bytes = 0;
  for (std::size_t q = 0; q < kPools; ++q) {
    stats.reserved_bytes.sub(static_cast<Pool>(q), t.bytes[q]);
    bytes += t.bytes[q];
  }
  stats.num_device_free += t.memories;
  return bytes;
}

// A new expanse for pool p, big enough for `rounded`: one unmapped block. nullptr when
// there is no host memory for its records (*refused false), or no such address space
// (*refused true: the device refused it, or it cannot be).
Segment* CachingAllocator::Impl::new_expanse(Pool p, std::size_t rounded, bool* refused) noexcept {
  *refused = false;
  const std::size_t bytes = std::max(page_up(vm.address_space), page_up(rounded) + vm.page);
  if (bytes < rounded) {  // (overflow: no such address space)
    *refused = true;
    return nullptr;
  }
  try {
    blocks.ensure(1);
    segments.reserve_one(blocks.made());
    expanses[pool_index(p)].reserve(expanses[pool_index(p)].size() + 1);
  } catch (...) {
    return nullptr;
  }
  const Reservation r = dev.reserve_address(bytes);
  if (r.base == nullptr) {
    *refused = true;
    return nullptr;
  }
  if (reinterpret_cast<std::uintptr_t>(r.base) % vm.page != 0) {  // breaks the device contract
    dev.release_address(r.base, bytes);
    *refused = true;
    return nullptr;
  }
  Block* u = blocks.get();
  u->addr = reinterpret_cast<std::uintptr_t>(r.base);
  u->size = bytes;
  u->pool = p;
  u->state = BlockState::unmapped;
  Segment* s = segments.add(u->addr, bytes, p, u);
  s->expandable = true;
  s->mapped = 0;
  expanses[pool_index(p)].push_back(s);
  unmapped_push(u);
  stats.segment.add(p, 1);
  return s;
}

void CachingAllocator::Impl::adapt_chunk() noexcept {
  const std::uint64_t per = opt.expandable_allocations_per_memory;
  if (per == 0) return;
  const std::uint64_t made = stats.num_device_alloc * per;
  if (made > stats.alloc_calls + kFreeMemories * per) {
    chunk = std::min(chunk * 2, kMaxChunk);
  } else if (made < stats.alloc_calls && chunk > vm.page) {
    chunk /= 2;
  }
}

// Maps the pages of `room` in address order; each mapped range becomes free and merges
// with its free neighbours. Returns the free block that holds the request, or nullptr
// with the device's answer in *r (what was mapped before a refusal stays, free).
Block* CachingAllocator::Impl::map_room(const Room& room, std::size_t rounded, Reservation* r) noexcept {
  Block* b = room.start;
  while (b->state != BlockState::free || b->size < rounded) {
    Block* u = b->state == BlockState::unmapped ? b : b->next;  // (room_from's walk)
    const std::size_t have = b->state == BlockState::free ? b->size : 0;
    const std::size_t bytes = std::min(mappable(u), page_up(rounded - have));
    try {  // before the device call, so a host allocation failure changes nothing
      blocks.ensure(1);
    } catch (...) {
      *r = Reservation::out_of_memory();
      return nullptr;
    }
    const auto before = spare_now();
    const std::uint64_t made_before = pages.made(), released_before = pages.released();
    std::size_t made = 0;
    const std::size_t unit = std::max(page_up(bytes / kPiecesPerGrowth), chunk);
    // A spare memory is mapped whole, so one that completes the range reaches past the
    // request: by no more than the pool holds already (a move at most doubles the pool).
    // Unbounded, a small-pool request of one page took a 1 GB memory the large pool had let
    // go, which small blocks then pinned for the run (docs/placement.md).
    const auto held = static_cast<std::size_t>(stats.reserved_bytes.pool[pool_index(u->pool)].current);
    const std::size_t reach = std::min(mappable(u), std::max(bytes, held));
    const std::size_t got = pages.map(u->addr, bytes, reach, unit, r, &made);
    if (got == 0) return nullptr;
    spare_used(before);
    stats.num_device_alloc += pages.made() - made_before;
    stats.num_device_free += pages.released() - released_before;  // (spare_used counted their bytes)
    emit_pages(EventKind::segment_reserve, u->addr, got);
    b = mapped(u, got);
  }
  return b;
}

// The first `bytes` of the unmapped block u were just mapped: they become a free block.
Block* CachingAllocator::Impl::mapped(Block* u, std::size_t bytes) noexcept {
  const Pool p = u->pool;
  Segment* s = segments.containing(u->addr);
  unmapped_remove(u);
  if (bytes < u->size) {
    Block* rest = blocks.get();
    rest->addr = u->addr + bytes;
    rest->size = u->size - bytes;
    rest->pool = p;
    rest->state = BlockState::unmapped;
    rest->prev = u;
    rest->next = u->next;
    if (u->next != nullptr) u->next->prev = rest;
    u->next = rest;
    u->size = bytes;
    unmapped_push(rest);
  }
  s->mapped += bytes;
  stats.reserved_bytes.add(p, bytes);
  reserved_high_water = std::max(reserved_high_water, static_cast<std::size_t>(stats.reserved_bytes.all_current()));
  u->state = BlockState::free;
  u->requested = 0;
  return merge_free(u);
}

// Unmaps the memories of pool p's expanses that lie wholly in a free block outside
// [lo, hi) (a memory is unmapped whole: page_pool.h), until `want` bytes are unmapped
// (kAll: every one). They become spare: still reserved, until a map takes them or
// trim_pages gives them back. Stops where the device keeps one mapped (a capture
// underway). Returns the bytes unmapped.
std::size_t CachingAllocator::Impl::unmap_free(Pool p, std::size_t want, std::uintptr_t lo, std::uintptr_t hi) noexcept {
  std::size_t released = 0;
  if (vm.page == 0) return 0;
  for (Segment* s : expanses[pool_index(p)]) {
    for (Block* b = s->first; b != nullptr && released < want;) {
      const PagePool::Mapping m = b->state == BlockState::free && b->size >= vm.page &&
                                          !(b->addr < hi && b->addr + b->size > lo)
                                      ? pages.mapping_from(b->addr)
                                      : PagePool::Mapping{};
      if (m.size == 0 || m.start + m.size > b->addr + b->size) {
        b = b->next;
        continue;
      }
      try {
        blocks.ensure(2);
      } catch (...) {
        return released;
      }
      if (!pages.unmap(p, m.start)) return released;
      emit_pages(EventKind::segment_release, m.start, m.size);
      b = unmapped_range(s, b, m.start, m.size);  // b's free rest after it, if any, is next
      released += m.size;
    }
  }
  return released;
}

// [a, a + bytes) of the free block b (one memory) was just unmapped: b splits into its
// free head, the unmapped range (merged with unmapped neighbours) and its free tail.
// Returns the block after the unmapped range (the free tail, if any).
Block* CachingAllocator::Impl::unmapped_range(Segment* s, Block* b, std::uintptr_t a, std::size_t bytes) noexcept {
  const Pool p = b->pool;
  const std::uintptr_t end = b->addr + b->size;
  free_blocks.remove(b);
  stats.inactive_split.sub(p, 1);  // an expanse's blocks are always split (its guard page)
  stats.inactive_split_bytes.sub(p, b->size);
  auto add_free = [&](Block* f) {
    free_blocks.insert(f);
    stats.inactive_split.add(p, 1);
    stats.inactive_split_bytes.add(p, f->size);
  };
  Block* mid = b;
  if (a > b->addr) {
    mid = blocks.get();
    mid->addr = a;
    mid->pool = p;
    mid->prev = b;
    mid->next = b->next;
    if (b->next != nullptr) b->next->prev = mid;
    b->next = mid;
    b->size = a - b->addr;
    add_free(b);
  }
  mid->state = BlockState::unmapped;
  mid->requested = 0;
  mid->size = bytes;
  if (a + bytes < end) {
    Block* tail = blocks.get();
    tail->addr = a + bytes;
    tail->size = end - (a + bytes);
    tail->pool = p;
    tail->state = BlockState::free;
    tail->prev = mid;
    tail->next = mid->next;
    if (mid->next != nullptr) mid->next->prev = tail;
    mid->next = tail;
    add_free(tail);
  }
  if (Block* prev = mid->prev; prev != nullptr && prev->state == BlockState::unmapped) {
    prev->size += mid->size;
    prev->next = mid->next;
    if (mid->next != nullptr) mid->next->prev = prev;
    blocks.put(mid);
    mid = prev;
  } else {
    unmapped_push(mid);
  }
  if (Block* next = mid->next; next != nullptr && next->state == BlockState::unmapped) {
    unmapped_remove(next);
    mid->size += next->size;
    mid->next = next->next;
    if (next->next != nullptr) next->next->prev = mid;
    blocks.put(next);
  }
  s->mapped -= bytes;  // (still reserved: a spare memory of pool p)
  return mid->next;
}

// Unmaps free pages outside the room, pool p's first, then the other pool's, until
// `want` bytes are unmapped (release before growth, with pages for segments).
void CachingAllocator::Impl::unmap_for_growth(Pool p, std::size_t want, const Room& room) noexcept {
  want = std::min(want, room.map);  // pages to move, not to give back
  const std::uintptr_t lo = room.start->addr, hi = room.end;
  std::size_t released = unmap_free(p, want, lo, hi);
  if (released < want) released += unmap_free(other(p), want - released, lo, hi);
  // Ordinary segments (own segments the device kept) are released as before.
  if (released < want) release_for_growth(p, want - released);
}

// grow() with expandable segments: the pages `rounded` lacks, mapped where it fits.
// *refused: no expanse has room and no new one can be reserved (grow() then makes an
// ordinary segment).
Block* CachingAllocator::Impl::grow_expandable(Pool p, std::size_t rounded, int* error, bool* refused) noexcept {
  adapt_chunk();
  Room room = find_room(p, rounded);
  if (room.start == nullptr) {
    bool& no_space = expanse_refused[pool_index(p)];
    *refused = no_space;
    if (no_space) return nullptr;
    if (new_expanse(p, rounded, refused) == nullptr) {
      // A pool's usual range refused: not asked again. A range larger than usual, for
      // one huge request, may be refused where the usual one would not.
      if (*refused && page_up(rounded) + vm.page <= page_up(vm.address_space)) no_space = true;
      return nullptr;  // (not refused: no host memory, out of memory)
    }
    room = find_room(p, rounded);
    if (room.start == nullptr) return nullptr;
  }
  // As grow(): near the limit, free pages move to the room rather than new memory be
  // made; otherwise only above the high-water mark, enough that it is not raised.
  const auto reserved = static_cast<std::size_t>(stats.reserved_bytes.all_current());
  if (near_limit()) {
    unmap_for_growth(p, kAll, room);
  } else if (opt.release_free_segments && reserved + room.map > reserved_high_water) {
    unmap_for_growth(p, reserved + room.map - reserved_high_water, room);
  }
  Reservation r;
  Block* b = map_room(room, rounded, &r);
  if (b == nullptr && r.error == 0 && opt.release_on_oom) {
    pending.drain(*this);
    release_free_segments();
    ++stats.num_alloc_retries;
    room = find_room(p, rounded);
    if (room.start != nullptr) b = map_room(room, rounded, &r);
  }
  trim_pages();  // memory whose pages all moved elsewhere, or were not needed
  if (b == nullptr) *error = r.error;
  return b;
}

// Unmaps every memory of the expanse s (live blocks included), gives them back, and
// frees its address range. false: the device kept some of it (the allocator keeps the
// segment).
bool CachingAllocator::Impl::release_expanse(Segment* s) noexcept {
  emit_mapped_pages_released(s);  // (before: a device that keeps some is an error anyway)
  for (PagePool::Mapping m = pages.mapping_from(s->base); m.size != 0 && m.start < s->base + s->size;
       m = pages.mapping_from(m.start + m.size)) {
    if (!pages.unmap(s->pool, m.start)) return false;
    s->mapped -= m.size;  // (spare now: trim_pages gives it back)
  }
  trim_pages();
  return dev.release_address(reinterpret_cast<void*>(s->base), s->size);
}

}  // namespace luma::core
