// caching_allocator.cpp - the caching allocator of one device (see caching_allocator.h).
//
// Structures, chosen so that every hot-path step is O(1) or O(log size) and allocates no
// host memory unless an index has to grow:
// - Segment: one device reservation. Its blocks form a doubly linked list in address order
//   that tiles it exactly; a block is free, allocated (held by the program) or pending
//   (freed by the program, fence not yet done: still "active", never reusable).
// - Free index (FreeIndex): TLSF-style segregated free lists, one per pool and per
//   "oversize" class (blocks >= max_split_size live apart, so a normal request can never
//   see them and PyTorch's oversize rule costs nothing). Size classes: first level = the
//   power of two of the size in alignment units, second level = 64 linear subdivisions of
//   it, found through a two-level bitmap with one count-trailing-zeros per level.
//   Fit policy "good fit within 1/64": look for the smallest fitting block among the first
//   kExactScan blocks of the request's own class (exact fit first), else take the head of
//   the next non-empty class (every block there fits and is at most 1/64 of its class
//   width away from that class's smallest size). Only when that finds nothing either does
//   the whole own class get scanned, so a fitting block is never ignored in favour of a
//   new segment; that rare scan precedes a device call, which costs far more.
// - Pointer map (PtrMap): open addressing, linear probing, backward-shift deletion, keyed
//   by block address; holds exactly the allocated blocks. No node allocation per insert.
// - Block and Segment records come from RecordPool free lists: no new/delete per call.
// - Pending frees: with a batched-fence device a free only appends the block to the open
//   epoch (no device call). The epoch is closed with one record_fence() when an
//   allocation finds nothing else that fits, when it reaches epoch_max_blocks / _bytes,
//   or by empty_cache / the OOM path / release_all. Closed epochs wait in a FIFO, polled
//   oldest first at each allocate (PyTorch's process_events) and waited on, oldest first,
//   before the allocator grows. A fence recorded after a free covers at least the work
//   issued before it, so reuse stays safe; kNoFence frees the epoch at once.
//   per_free devices are the same with a one-block epoch; none devices skip it all.
// All index memory is reserved at the start of allocate (reserve_capacity), before any
// state changes, so a host allocation failure leaves the allocator untouched.
//
// Must never: throw out of a public method, call the device or the event sink without the
// lock, release memory to the device outside empty_cache / the OOM path / release_all.
#include "caching_allocator.h"

#include <algorithm>
#include <array>
#include <bit>
#include <mutex>
#include <new>
#include <utility>

#include <fmt/format.h>

namespace luma::core {
namespace {

// Requests above this are refused as out-of-memory without asking the device: no GPU
// has 4 EiB, and it keeps every rounding and size-class computation far from overflow.
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

enum class BlockState : std::uint8_t { free, allocated, pending };

constexpr std::size_t pool_index(Pool p) noexcept { return static_cast<std::size_t>(p); }

// One cache line per block: every field a hot-path step reads or writes is in it, so a
// block costs one miss, never two (a 64-byte record that straddles lines costs two).
struct alignas(64) Block {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // bytes asked for (allocated blocks only)
  Block* prev = nullptr;      // address neighbours inside the segment
  Block* next = nullptr;
  Block* list_prev = nullptr;  // free-class list (free blocks); unused while pending
  Block* list_next = nullptr;  // free-class list, or the next block of its epoch (pending)
  BlockState state = BlockState::free;
  Pool pool = Pool::small;  // its segment's pool, kept here to spare a cache miss
  std::uint8_t fl = 0;      // free-index class while indexed (FreeIndex::insert)
  std::uint8_t sl = 0;

  bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
};
static_assert(sizeof(Block) == 64, "a block record is one cache line");

struct Segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  Pool pool = Pool::small;
  Block* first = nullptr;

  bool wholly_free() const noexcept {
    return first != nullptr && first->next == nullptr && first->state == BlockState::free;
  }
};

const char* pool_name(Pool p) noexcept { return p == Pool::small ? "small" : "large"; }

// Records handed out from chunks and taken back onto a free list. put() never allocates:
// the free list's capacity always covers every record ever made.
template <typename T>
class RecordPool {
 public:
  // Makes sure at least n records can be taken without allocating.
  void ensure(std::size_t n) {
    if (free_.size() >= n) return;
    const std::size_t chunk = std::max<std::size_t>({64, total_, n});
    auto records = std::make_unique<T[]>(chunk);
    free_.reserve(total_ + chunk);
    chunks_.reserve(chunks_.size() + 1);
    for (std::size_t i = chunk; i-- > 0;) free_.push_back(&records[i]);
    chunks_.push_back(std::move(records));
    total_ += chunk;
  }
  T* get() noexcept {  // caller ensured
    T* r = free_.back();
    free_.pop_back();
    *r = T{};
    return r;
  }
  void put(T* r) noexcept { free_.push_back(r); }
  std::size_t in_use() const noexcept { return total_ - free_.size(); }
  std::size_t spare() const noexcept { return free_.size(); }

 private:
  std::vector<std::unique_ptr<T[]>> chunks_;
  std::vector<T*> free_;
  std::size_t total_ = 0;
};

// Address -> allocated block. Keys are block addresses, never 0 (0 marks an empty slot).
class PtrMap {
 public:
  void reserve_for(std::size_t n) {
    if (slots_.empty() || (n + 1) * 2 > slots_.size()) grow(n);
  }
  void insert(std::uintptr_t key, Block* value) noexcept {  // caller reserved; key absent
    std::size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++size_;
  }
  Block* find(std::uintptr_t key) const noexcept {
    if (slots_.empty() || key == 0) return nullptr;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }
  bool erase(std::uintptr_t key) noexcept {
    if (slots_.empty() || key == 0) return false;
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) break;
      if (slots_[i].key == 0) return false;
    }
    // Backward-shift deletion: pull later entries of the probe run into the hole so that
    // no tombstones accumulate and lookups stay short.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const bool stays = (hole <= j) ? (hole < h && h <= j) : (hole < h || h <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = {};
    --size_;
    return true;
  }
  std::size_t size() const noexcept { return size_; }
  bool has_room() const noexcept { return (size_ + 2) * 2 <= slots_.size(); }
  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.key != 0) f(s.key, s.value);
  }
  void clear() noexcept {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    size_ = 0;
  }

 private:
  struct Slot {
    std::uintptr_t key = 0;
    Block* value = nullptr;
  };
  std::size_t home(std::uintptr_t key) const noexcept {
    // Fibonacci hashing: the low bits of block addresses are all zero (alignment), the
    // multiply spreads the rest over the top bits.
    return static_cast<std::size_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >>
                                    shift_);
  }
  void grow(std::size_t n) {
    std::size_t cap = std::max<std::size_t>(slots_.size(), 1024);
    while ((n + 1) * 2 > cap) cap *= 2;
    std::vector<Slot> old(cap);
    old.swap(slots_);
    mask_ = cap - 1;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(cap));
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != 0) insert(s.key, s.value);
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

// Segregated free lists with a two-level bitmap (see the file comment for the policy).
class FreeIndex {
 public:
  static constexpr unsigned kSlBits = 6;
  static constexpr unsigned kSl = 1u << kSlBits;  // 64 subdivisions: good fit within 1/64
  static constexpr unsigned kFl = 64;
  // Blocks of the own class examined for the smallest fit before moving up a class:
  // enough to find exact fits in practice, small enough to bound the cost.
  static constexpr unsigned kExactScan = 4;

  struct Class {
    unsigned fl;
    unsigned sl;
  };

  void set_unit_shift(unsigned shift) noexcept { unit_shift_ = shift; }

  Class class_of(std::size_t size) const noexcept {
    const std::uint64_t u = static_cast<std::uint64_t>(size) >> unit_shift_;
    if (u < kSl) return {0, static_cast<unsigned>(u)};
    const unsigned m = static_cast<unsigned>(std::bit_width(u)) - 1;  // >= kSlBits
    return {m - kSlBits + 1, static_cast<unsigned>((u >> (m - kSlBits)) - kSl)};
  }

  void insert(Block* b) noexcept {
    const Class c = class_of(b->size);
    b->fl = static_cast<std::uint8_t>(c.fl);
    b->sl = static_cast<std::uint8_t>(c.sl);
    Block*& head = heads_[c.fl][c.sl];
    b->list_prev = nullptr;
    b->list_next = head;
    if (head != nullptr) head->list_prev = b;
    head = b;
    sl_map_[c.fl] |= std::uint64_t{1} << c.sl;
    fl_map_ |= std::uint64_t{1} << c.fl;
    ++count_;
  }

  void remove(Block* b) noexcept {
    const Class c{b->fl, b->sl};
    if (b->list_prev != nullptr) {
      b->list_prev->list_next = b->list_next;
    } else {
      heads_[c.fl][c.sl] = b->list_next;
      if (b->list_next == nullptr) {
        sl_map_[c.fl] &= ~(std::uint64_t{1} << c.sl);
        if (sl_map_[c.fl] == 0) fl_map_ &= ~(std::uint64_t{1} << c.fl);
      }
    }
    if (b->list_next != nullptr) b->list_next->list_prev = b->list_prev;
    b->list_prev = b->list_next = nullptr;
    --count_;
  }

  Block* find(std::size_t size) const noexcept {
    const Class c = class_of(size);
    Block* best = nullptr;
    unsigned seen = 0;
    Block* b = heads_[c.fl][c.sl];
    for (; b != nullptr && seen < kExactScan; b = b->list_next, ++seen) {
      if (b->size == size) return b;
      if (b->size > size && (best == nullptr || b->size < best->size)) best = b;
    }
    if (best != nullptr) return best;
    const bool scanned_all = b == nullptr;
    // The next non-empty class: every block in it is larger than any size of this class.
    std::uint64_t sl_map = c.sl + 1 < kSl ? sl_map_[c.fl] & (~std::uint64_t{0} << (c.sl + 1)) : 0;
    unsigned fl = c.fl;
    if (sl_map == 0) {
      const std::uint64_t fl_map =
          c.fl + 1 < kFl ? fl_map_ & (~std::uint64_t{0} << (c.fl + 1)) : 0;
      if (fl_map != 0) {
        fl = static_cast<unsigned>(std::countr_zero(fl_map));
        sl_map = sl_map_[fl];
      }
    }
    if (sl_map != 0) return heads_[fl][static_cast<unsigned>(std::countr_zero(sl_map))];
    if (scanned_all) return nullptr;
    for (; b != nullptr; b = b->list_next)  // rare: see the file comment
      if (b->size >= size && (best == nullptr || b->size < best->size)) best = b;
    return best;
  }

  std::size_t count() const noexcept { return count_; }

  // For check(): calls f(class, head) for every class, and reports bitmap mismatches.
  template <typename F>
  void for_each_class(F&& f) const {
    for (unsigned fl = 0; fl < kFl; ++fl)
      for (unsigned sl = 0; sl < kSl; ++sl) f(Class{fl, sl}, heads_[fl][sl]);
  }
  bool bitmap_says_nonempty(Class c) const noexcept {
    return ((sl_map_[c.fl] >> c.sl) & 1u) != 0 && ((fl_map_ >> c.fl) & 1u) != 0;
  }
  bool fl_bit_matches(unsigned fl) const noexcept {
    return (((fl_map_ >> fl) & 1u) != 0) == (sl_map_[fl] != 0);
  }

 private:
  unsigned unit_shift_ = 8;
  std::uint64_t fl_map_ = 0;
  std::array<std::uint64_t, kFl> sl_map_{};
  std::array<std::array<Block*, kSl>, kFl> heads_{};
  std::size_t count_ = 0;
};

// A batch of frees that one fence covers. Blocks are chained through list_next (LIFO:
// the order inside an epoch does not matter, they all become free together).
struct Epoch {
  Block* head = nullptr;
  Fence fence = kNoFence;  // kNoFence while open
  std::array<std::size_t, kPools> blocks{};  // per pool
  std::size_t bytes = 0;

  void push(Block* b) noexcept {
    b->list_prev = nullptr;
    b->list_next = head;
    head = b;
    ++blocks[pool_index(b->pool)];
    bytes += b->size;
  }
  std::size_t count() const noexcept { return blocks[0] + blocks[1]; }
};

// Closed epochs, oldest first: a ring that grows only by grow() (called where the caller
// can handle a host allocation failure), so push never allocates.
class EpochRing {
 public:
  bool full() const noexcept { return count_ == ring_.size(); }
  void grow() {  // may throw std::bad_alloc; nothing changes then
    std::vector<Epoch> bigger(std::max<std::size_t>(16, ring_.size() * 2));
    for (std::size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) % ring_.size()];
    ring_.swap(bigger);
    head_ = 0;
  }
  void push(const Epoch& e) noexcept { ring_[(head_ + count_++) % ring_.size()] = e; }  // !full()
  Epoch& oldest() noexcept { return ring_[head_]; }
  void pop() noexcept {
    head_ = (head_ + 1) % ring_.size();
    --count_;
  }
  std::size_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  const Epoch& at(std::size_t i) const noexcept { return ring_[(head_ + i) % ring_.size()]; }

 private:
  std::vector<Epoch> ring_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

// The statistics as the hot path keeps them: per pool a full Counter, for all pools only
// current and peak (its totals are the sums of the pools', made in view()). Half the
// stores of PoolCounter, and always inlined.
struct Metric {
  std::array<Counter, kPools> pool{};
  std::int64_t all_current = 0;
  std::int64_t all_peak = 0;

  [[gnu::always_inline]] void add(Pool p, std::uint64_t n) noexcept {
    Counter& c = pool[pool_index(p)];
    c.current += static_cast<std::int64_t>(n);
    c.allocated += n;
    if (c.current > c.peak) c.peak = c.current;
    all_current += static_cast<std::int64_t>(n);
    if (all_current > all_peak) all_peak = all_current;
  }
  [[gnu::always_inline]] void sub(Pool p, std::uint64_t n) noexcept {
    Counter& c = pool[pool_index(p)];
    c.current -= static_cast<std::int64_t>(n);
    c.freed += n;
    all_current -= static_cast<std::int64_t>(n);
  }
  PoolCounter view() const noexcept {
    PoolCounter v;
    v.pool = pool;
    v.all.current = all_current;
    v.all.peak = all_peak;
    for (const Counter& c : pool) {
      v.all.allocated += c.allocated;
      v.all.freed += c.freed;
    }
    return v;
  }
};

// DeviceStats with Metric in place of PoolCounter; the metrics every pair touches first.
struct LiveStats {
  Metric allocation, allocated_bytes, requested_bytes, active, active_bytes, inactive_split,
      inactive_split_bytes;
  Metric segment, reserved_bytes;
  std::uint64_t free_blocks = 0;
  std::uint64_t alloc_calls = 0;
  std::uint64_t free_calls = 0;
  std::uint64_t num_device_alloc = 0;
  std::uint64_t num_device_free = 0;
  std::uint64_t num_alloc_retries = 0;
  std::uint64_t num_ooms = 0;
  std::uint64_t num_fence_waits = 0;
  std::uint64_t num_empty_cache = 0;
  std::uint64_t invalid_frees = 0;

  DeviceStats view(int device) const noexcept {
    DeviceStats d;
    d.device = device;
    d.allocation = allocation.view();
    d.segment = segment.view();
    d.active = active.view();
    d.inactive_split = inactive_split.view();
    d.allocated_bytes = allocated_bytes.view();
    d.requested_bytes = requested_bytes.view();
    d.reserved_bytes = reserved_bytes.view();
    d.active_bytes = active_bytes.view();
    d.inactive_split_bytes = inactive_split_bytes.view();
    d.free_blocks = free_blocks;
    d.alloc_calls = alloc_calls;
    d.free_calls = free_calls;
    d.num_device_alloc = num_device_alloc;
    d.num_device_free = num_device_free;
    d.num_alloc_retries = num_alloc_retries;
    d.num_ooms = num_ooms;
    d.num_fence_waits = num_fence_waits;
    d.num_empty_cache = num_empty_cache;
    d.invalid_frees = invalid_frees;
    return d;
  }
};

std::size_t round_up(std::size_t v, std::size_t a) noexcept {
  if (a <= 1) return v;
  const std::size_t r = v % a;
  return r == 0 ? v : v + (a - r);
}

AllocatorOptions sanitize(AllocatorOptions o) noexcept {
  // config.cpp validates user input; this only keeps the arithmetic below well defined
  // for any options a caller may construct by hand.
  o.alignment = std::bit_ceil(std::max<std::size_t>(o.alignment, 1));
  o.min_split = std::max(round_up(o.min_split, o.alignment), o.alignment);
  o.min_segment = std::max(round_up(o.min_segment, o.alignment), o.alignment);
  o.large_round = std::max(round_up(o.large_round, o.alignment), o.alignment);
  return o;
}

}  // namespace

std::size_t round_size(const AllocatorOptions& options, std::size_t bytes) noexcept {
  const std::size_t a = std::bit_ceil(std::max<std::size_t>(options.alignment, 1));
  if (bytes > std::numeric_limits<std::size_t>::max() - (a - 1)) return ~(a - 1);  // saturate
  return (bytes + a - 1) & ~(a - 1);
}

Pool pool_for(const AllocatorOptions& options, std::size_t rounded) noexcept {
  return rounded <= options.small_size ? Pool::small : Pool::large;
}

std::size_t segment_size_for(const AllocatorOptions& options, std::size_t rounded) noexcept {
  std::size_t s = 0;
  if (pool_for(options, rounded) == Pool::small) {
    s = std::max(options.small_segment, rounded);
  } else if (rounded < options.min_large_alloc) {
    s = std::max(options.large_segment, rounded);
  } else {
    s = round_up(rounded, std::max<std::size_t>(options.large_round, 1));
  }
  s = std::max(s, options.min_segment);
  return round_up(s, std::bit_ceil(std::max<std::size_t>(options.alignment, 1)));
}

struct CachingAllocator::Impl {
  Impl(Device& d, int index, const AllocatorOptions& o)
      : dev(d), device_index(index), opt(sanitize(o)), fence_mode(d.fence_mode()) {
    const auto shift = static_cast<unsigned>(std::countr_zero(opt.alignment));
    for (auto& per_pool : index_)
      for (FreeIndex& fi : per_pool) fi.set_unit_shift(shift);
  }

  Device& dev;
  const int device_index;
  const AllocatorOptions opt;
  const FenceMode fence_mode;
  mutable std::mutex mu;
  EventSink* sink = nullptr;
  LiveStats stats;

  RecordPool<Block> blocks;
  RecordPool<Segment> segment_records;
  std::vector<Segment*> segments;  // sorted by base
  PtrMap live;
  std::array<std::array<FreeIndex, 2>, kPools> index_;  // [pool][oversize]
  // Pending frees: the open epoch (no fence yet) and the closed ones (fenced), oldest
  // first; closed_blocks counts the closed epochs' blocks per pool.
  Epoch open_epoch;
  EpochRing closed;
  std::array<std::size_t, kPools> closed_blocks{};

  // ---- helpers ----------------------------------------------------------------------
  void emit(EventKind kind, std::uintptr_t addr, std::size_t size, std::size_t requested) noexcept {
    if (sink != nullptr) sink->on_event(Event{kind, device_index, addr, size, requested});
  }

  bool oversize(std::size_t size) const noexcept { return size >= opt.max_split_size; }

  FreeIndex& index_for(Pool p, std::size_t size) noexcept {
    return index_[pool_index(p)][oversize(size) ? 1 : 0];
  }

  void index_insert(Block* b) noexcept {
    index_for(b->pool, b->size).insert(b);
    ++stats.free_blocks;
  }
  void index_remove(Block* b) noexcept {
    index_for(b->pool, b->size).remove(b);
    --stats.free_blocks;
  }

  Segment* segment_containing(std::uintptr_t addr) const noexcept {
    auto it = std::upper_bound(segments.begin(), segments.end(), addr,
                               [](std::uintptr_t a, const Segment* s) { return a < s->base; });
    if (it == segments.begin()) return nullptr;
    Segment* s = *(it - 1);
    return addr - s->base < s->size ? s : nullptr;
  }

  // Everything allocate may need, reserved before anything changes; the test is a few
  // compares, the growth (which may throw) rare.
  void reserve_capacity() {
    // (A new segment's record and index slot are grow()'s own business.)
    if (blocks.spare() >= 2 && live.has_room() && !closed.full()) [[likely]]
      return;
    blocks.ensure(2);  // a new segment's block and a split remainder
    live.reserve_for(live.size() + 1);
    if (closed.full()) closed.grow();  // room to close the open epoch
  }

  // A block whose fences are done (or that had none) becomes free and merges with its
  // free neighbours; inactive_split follows PyTorch's free_block net-change accounting.
  void complete(Block* b) noexcept {
    const Pool p = b->pool;
    stats.active.sub(p, 1);
    stats.active_bytes.sub(p, b->size);
    emit(EventKind::free_completed, b->addr, b->size, 0);
    b->state = BlockState::free;
    std::int64_t net_blocks = 0;
    std::int64_t net_bytes = 0;
    if (Block* prev = b->prev; prev != nullptr && prev->state == BlockState::free) {
      index_remove(prev);
      net_blocks -= 1;
      net_bytes -= static_cast<std::int64_t>(prev->size);
      prev->size += b->size;
      prev->next = b->next;
      if (b->next != nullptr) b->next->prev = prev;
      blocks.put(b);
      b = prev;
    }
    if (Block* next = b->next; next != nullptr && next->state == BlockState::free) {
      index_remove(next);
      net_blocks -= 1;
      net_bytes -= static_cast<std::int64_t>(next->size);
      b->size += next->size;
      b->next = next->next;
      if (next->next != nullptr) next->next->prev = b;
      blocks.put(next);
    }
    index_insert(b);
    if (b->is_split()) {
      net_blocks += 1;
      net_bytes += static_cast<std::int64_t>(b->size);
    }
    apply_net(stats.inactive_split, p, net_blocks);
    apply_net(stats.inactive_split_bytes, p, net_bytes);
  }

  static void apply_net(Metric& c, Pool p, std::int64_t n) noexcept {
    if (n > 0) c.add(p, static_cast<std::uint64_t>(n));
    if (n < 0) c.sub(p, static_cast<std::uint64_t>(-n));
  }

  // Makes every block of an epoch free (its fence, if any, is done and released by now).
  void complete_epoch(Block* head) noexcept {
    while (head != nullptr) {
      Block* next = head->list_next;
      head->list_next = nullptr;
      complete(head);
      head = next;
    }
  }

  // Closes the open epoch with one fence recorded now, after every free in it. kNoFence:
  // its blocks are free at once. Needs room in `closed` (reserve_capacity, or the free
  // path's own grow); without it, waits for the fence instead of queueing it.
  void close_epoch() noexcept {
    if (open_epoch.head == nullptr) return;
    Epoch e = open_epoch;
    open_epoch = Epoch{};
    e.fence = dev.record_fence();
    if (e.fence == kNoFence) {
      complete_epoch(e.head);
      return;
    }
    if (closed.full()) {
      try {
        closed.grow();
      } catch (...) {  // no host memory to queue it: wait now, which is always safe
        dev.fence_wait(e.fence);
        ++stats.num_fence_waits;
        dev.fence_release(e.fence);
        complete_epoch(e.head);
        return;
      }
    }
    for (std::size_t p = 0; p < kPools; ++p) closed_blocks[p] += e.blocks[p];
    closed.push(e);
  }

  void finish_oldest() noexcept {
    const Epoch e = closed.oldest();
    closed.pop();
    for (std::size_t p = 0; p < kPools; ++p) closed_blocks[p] -= e.blocks[p];
    dev.fence_release(e.fence);
    complete_epoch(e.head);
  }

  // PyTorch's process_events: complete the oldest closed epochs whose fences are done,
  // stopping at the first that is not (later ones are later in time too).
  void process_events() noexcept {
    while (!closed.empty() && dev.fence_done(closed.oldest().fence)) finish_oldest();
  }

  void wait_oldest() noexcept {
    dev.fence_wait(closed.oldest().fence);
    ++stats.num_fence_waits;
    finish_oldest();
  }

  // Every pending free made reusable: for empty_cache, the OOM path and release_all.
  void drain_pending() noexcept {
    close_epoch();
    process_events();
    while (!closed.empty()) wait_oldest();
  }

  // Pending blocks of pool p exist: make some reusable, cheapest way first. Returns false
  // when there are none left to wait for.
  bool reclaim_pending(Pool p) noexcept {
    const std::size_t i = pool_index(p);
    if (closed_blocks[i] == 0) {
      if (open_epoch.blocks[i] == 0) return false;
      close_epoch();     // only the open epoch can provide: fence it now ...
      process_events();  // ... and take it at once if its work is already done
      return true;
    }
    wait_oldest();  // rather than grow
    process_events();
    return true;
  }

  Block* find_free(Pool p, std::size_t rounded) noexcept {
    Block* b = index_for(p, rounded).find(rounded);
    // PyTorch's max_non_split_rounding: an oversize request does not take a block so much
    // bigger that the rest (which is never split off) would be wasted.
    if (b != nullptr && oversize(rounded) && b->size >= rounded + opt.large_segment) return nullptr;
    return b;
  }

  // Releases every wholly free segment; returns the bytes released.
  std::size_t release_free_segments() noexcept {
    std::size_t released = 0;
    std::size_t keep = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      Segment* s = segments[i];
      if (s->wholly_free() && dev.release(reinterpret_cast<void*>(s->base), s->size)) {
        index_remove(s->first);
        blocks.put(s->first);
        drop_segment_stats(s);
        released += s->size;
        segment_records.put(s);
      } else {
        segments[keep++] = s;
      }
    }
    segments.resize(keep);
    return released;
  }

  void drop_segment_stats(Segment* s) noexcept {
    stats.segment.sub(s->pool, 1);
    stats.reserved_bytes.sub(s->pool, s->size);
    ++stats.num_device_free;
    emit(EventKind::segment_release, s->base, s->size, 0);
  }

  void record_oom(std::size_t requested) noexcept {
    ++stats.num_ooms;
    emit(EventKind::oom, 0, 0, requested);
  }

  // Reserves a new segment for `rounded`, through the OOM retry; the segment's single
  // free block is in the index on return.
  Block* grow(Pool p, std::size_t rounded) noexcept {
    const std::size_t size = segment_size_for(opt, rounded);
    try {  // before the device call, so a host allocation failure changes nothing
      segment_records.ensure(1);
      if (segments.size() == segments.capacity())  // doubling: reserve(n + 1) would copy each time
        segments.reserve(std::max<std::size_t>(16, segments.capacity() * 2));
    } catch (...) {
      return nullptr;
    }
    void* base = reserve_aligned(size);
    if (base == nullptr && opt.release_on_oom) {
      drain_pending();
      release_free_segments();
      ++stats.num_alloc_retries;
      base = reserve_aligned(size);
    }
    if (base == nullptr) return nullptr;
    Segment* s = segment_records.get();
    s->base = reinterpret_cast<std::uintptr_t>(base);
    s->size = size;
    s->pool = p;
    Block* b = blocks.get();
    b->addr = s->base;
    b->size = size;
    b->pool = p;
    s->first = b;
    segments.insert(std::upper_bound(segments.begin(), segments.end(), s,
                                     [](const Segment* a, const Segment* c) { return a->base < c->base; }),
                    s);
    stats.segment.add(p, 1);
    stats.reserved_bytes.add(p, size);
    ++stats.num_device_alloc;
    emit(EventKind::segment_reserve, s->base, size, 0);
    index_insert(b);
    return b;
  }

  void* reserve_aligned(std::size_t size) noexcept {
    void* base = dev.reserve(size);
    if (base != nullptr && reinterpret_cast<std::uintptr_t>(base) % opt.alignment != 0) {
      // Breaks the device contract; treat as a refusal rather than hand out misaligned blocks.
      dev.release(base, size);
      return nullptr;
    }
    return base;
  }

  // Takes the free block b for a request: split off the rest when allowed, account.
  void* take(Block* b, std::size_t rounded, std::size_t requested) noexcept {
    index_remove(b);
    const Pool p = b->pool;
    const bool was_split = b->is_split();
    const std::size_t remaining = b->size - rounded;
    if (!oversize(rounded) && remaining >= opt.min_split) {
      Block* r = blocks.get();
      r->addr = b->addr + rounded;
      r->size = remaining;
      r->pool = b->pool;
      r->prev = b;
      r->next = b->next;
      if (b->next != nullptr) b->next->prev = r;
      b->next = r;
      b->size = rounded;
      index_insert(r);
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
    b->state = BlockState::allocated;
    b->requested = requested;
    live.insert(b->addr, b);
    stats.allocation.add(p, 1);
    stats.allocated_bytes.add(p, b->size);
    stats.requested_bytes.add(p, requested);
    stats.active.add(p, 1);
    stats.active_bytes.add(p, b->size);
    ++stats.alloc_calls;
    emit(EventKind::alloc, b->addr, b->size, requested);
    return reinterpret_cast<void*>(b->addr);
  }

  AllocResult allocate(std::size_t bytes) noexcept {
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
    const std::size_t rounded = round_size(opt, bytes);
    const Pool p = pool_for(opt, rounded);
    if (!closed.empty()) process_events();
    Block* b = find_free(p, rounded);
    // Waiting for a pending free of this pool is cheaper than a new segment.
    while (b == nullptr && reclaim_pending(p)) b = find_free(p, rounded);
    if (b == nullptr) b = grow(p, rounded);
    if (b == nullptr) {
      record_oom(bytes);
      return {nullptr, AllocStatus::out_of_memory};
    }
    return {take(b, rounded, bytes), AllocStatus::ok};
  }

  FreeStatus free(const void* ptr) noexcept {
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    Block* b = live.find(addr);
    if (b == nullptr) {
      if (segment_containing(addr) == nullptr) return FreeStatus::not_owned;
      ++stats.invalid_frees;
      return FreeStatus::invalid;
    }
    live.erase(addr);
    const Pool p = b->pool;
    stats.allocation.sub(p, 1);
    stats.allocated_bytes.sub(p, b->size);
    stats.requested_bytes.sub(p, b->requested);
    b->requested = 0;
    ++stats.free_calls;
    emit(EventKind::free_requested, b->addr, b->size, 0);
    if (fence_mode == FenceMode::none) {
      complete(b);
      return FreeStatus::ok;
    }
    b->state = BlockState::pending;
    open_epoch.push(b);
    if (fence_mode == FenceMode::per_free || open_epoch.count() >= opt.epoch_max_blocks ||
        open_epoch.bytes >= opt.epoch_max_bytes)
      close_epoch();
    return FreeStatus::ok;
  }

  std::size_t empty_cache() noexcept {
    drain_pending();
    const std::size_t released = release_free_segments();
    ++stats.num_empty_cache;
    emit(EventKind::empty_cache, 0, released, 0);
    return released;
  }

  void release_all() noexcept {
    drain_pending();
    std::size_t keep = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      Segment* s = segments[i];
      if (!dev.release(reinterpret_cast<void*>(s->base), s->size)) {
        segments[keep++] = s;  // the device kept it, so do we
        continue;
      }
      const Pool p = s->pool;
      for (Block* b = s->first; b != nullptr;) {
        Block* next = b->next;
        if (b->state == BlockState::allocated) {
          live.erase(b->addr);
          stats.allocation.sub(p, 1);
          stats.allocated_bytes.sub(p, b->size);
          stats.requested_bytes.sub(p, b->requested);
          stats.active.sub(p, 1);
          stats.active_bytes.sub(p, b->size);
        } else {
          index_remove(b);
          if (b->is_split()) {
            stats.inactive_split.sub(p, 1);
            stats.inactive_split_bytes.sub(p, b->size);
          }
        }
        blocks.put(b);
        b = next;
      }
      drop_segment_stats(s);
      segment_records.put(s);
    }
    segments.resize(keep);
  }

  std::vector<std::string> check() const;
};

std::vector<std::string> CachingAllocator::Impl::check() const {
  std::vector<std::string> v;
  auto fail = [&v](std::string msg) { v.push_back(std::move(msg)); };

  struct Tally {
    std::int64_t segments = 0, reserved = 0;
    std::int64_t allocated = 0, allocated_bytes = 0, requested_bytes = 0;
    std::int64_t pending = 0, pending_bytes = 0;
    std::int64_t free = 0, free_bytes = 0;
    std::int64_t split_free = 0, split_free_bytes = 0;
  };
  std::array<Tally, kPools> t{};
  const std::size_t max_blocks = blocks.in_use() + 1;  // bounds every walk over a broken list

  std::uintptr_t prev_end = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment* s = segments[i];
    Tally& tp = t[pool_index(s->pool)];
    tp.segments += 1;
    tp.reserved += static_cast<std::int64_t>(s->size);
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
      const auto bytes = static_cast<std::int64_t>(b->size);
      switch (b->state) {
        case BlockState::allocated:
          tp.allocated += 1;
          tp.allocated_bytes += bytes;
          tp.requested_bytes += static_cast<std::int64_t>(b->requested);
          if (b->requested > b->size || b->requested == 0)
            fail(fmt::format("block {:#x}: requested {} outside (0, size {}]", b->addr, b->requested, b->size));
          if (live.find(b->addr) != b)
            fail(fmt::format("allocated block {:#x} is missing from the pointer map", b->addr));
          break;
        case BlockState::pending:
          tp.pending += 1;
          tp.pending_bytes += bytes;
          if (live.find(b->addr) != nullptr)
            fail(fmt::format("pending block {:#x} is in the pointer map", b->addr));
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
          if (live.find(b->addr) != nullptr)
            fail(fmt::format("free block {:#x} is in the pointer map", b->addr));
          break;
      }
    }
    if (cursor != s->base + s->size)
      fail(fmt::format("segment {:#x}: blocks end at {:#x}, the segment at {:#x}", s->base, cursor,
                       s->base + s->size));
  }

  // Free index: every entry a free block of the right pool, class and oversize side; the
  // bitmaps agree with the lists; every free block is indexed (counts match).
  std::array<std::int64_t, kPools> indexed{};
  for (std::size_t p = 0; p < kPools; ++p) {
    for (std::size_t o = 0; o < 2; ++o) {
      const FreeIndex& fi = index_[p][o];
      std::size_t listed = 0;
      fi.for_each_class([&](FreeIndex::Class c, const Block* head) {
        if ((head != nullptr) != fi.bitmap_says_nonempty(c))
          fail(fmt::format("{} pool index: bitmap disagrees with class ({}, {})", pool_name(static_cast<Pool>(p)), c.fl, c.sl));
        const Block* lp = nullptr;
        std::size_t n = 0;
        for (const Block* b = head; b != nullptr; lp = b, b = b->list_next) {
          if (++n > max_blocks) {
            fail(fmt::format("free list ({}, {}) does not end", c.fl, c.sl));
            break;
          }
          ++listed;
          if (b->list_prev != lp) fail(fmt::format("free list entry {:#x}: back link is wrong", b->addr));
          if (b->state != BlockState::free)
            fail(fmt::format("free list holds block {:#x} that is not free ({})", b->addr,
                             b->state == BlockState::pending ? "pending" : "allocated"));
          if (pool_index(b->pool) != p) fail(fmt::format("block {:#x} is indexed in the wrong pool", b->addr));
          const FreeIndex::Class bc = fi.class_of(b->size);
          if (bc.fl != c.fl || bc.sl != c.sl)
            fail(fmt::format("block {:#x} of {} bytes is in class ({}, {}) instead of ({}, {})", b->addr,
                             b->size, c.fl, c.sl, bc.fl, bc.sl));
          if (oversize(b->size) != (o == 1))
            fail(fmt::format("block {:#x} is on the wrong side of max_split_size", b->addr));
        }
      });
      for (unsigned fl = 0; fl < FreeIndex::kFl; ++fl)
        if (!fi.fl_bit_matches(fl)) fail(fmt::format("first-level bitmap bit {} is wrong", fl));
      if (listed != fi.count()) fail(fmt::format("free index counts {} blocks, lists hold {}", fi.count(), listed));
      indexed[p] += static_cast<std::int64_t>(listed);
    }
    if (indexed[p] != t[p].free)
      fail(fmt::format("{} pool: {} free blocks in segments, {} in the free index", pool_name(static_cast<Pool>(p)),
                       t[p].free, indexed[p]));
  }

  // Epochs: the open one unfenced, every closed one fenced; together they hold exactly
  // the pending blocks, each once, and their per-pool counts and bytes add up.
  {
    std::array<std::int64_t, kPools> queued{};
    std::array<std::size_t, kPools> closed_sum{};
    auto walk = [&](const Epoch& e, const char* which) {
      std::array<std::size_t, kPools> n{};
      std::size_t bytes = 0;
      std::size_t steps = 0;
      for (const Block* b = e.head; b != nullptr; b = b->list_next) {
        if (++steps > max_blocks) {
          fail(fmt::format("{} epoch: block list does not end", which));
          break;
        }
        if (b->state != BlockState::pending)
          fail(fmt::format("{} epoch holds block {:#x} that is not pending", which, b->addr));
        ++n[pool_index(b->pool)];
        bytes += b->size;
      }
      if (n != e.blocks) fail(fmt::format("{} epoch: counts {}+{} blocks, holds {}+{}", which, e.blocks[0], e.blocks[1], n[0], n[1]));
      if (bytes != e.bytes) fail(fmt::format("{} epoch: counts {} bytes, holds {}", which, e.bytes, bytes));
      for (std::size_t p = 0; p < kPools; ++p) queued[p] += static_cast<std::int64_t>(n[p]);
      return n;
    };
    if (open_epoch.fence != kNoFence) fail("the open epoch has a fence");
    walk(open_epoch, "open");
    for (std::size_t i = 0; i < closed.size(); ++i) {
      const Epoch& e = closed.at(i);
      if (e.fence == kNoFence) fail(fmt::format("closed epoch {} has no fence", i));
      if (e.head == nullptr) fail(fmt::format("closed epoch {} is empty", i));
      const auto n = walk(e, "closed");
      for (std::size_t p = 0; p < kPools; ++p) closed_sum[p] += n[p];
    }
    if (closed_sum != closed_blocks) fail("closed epochs' per-pool block counts are wrong");
    for (std::size_t p = 0; p < kPools; ++p)
      if (queued[p] != t[p].pending)
        fail(fmt::format("{} pool: {} pending blocks in segments, {} in epochs", pool_name(static_cast<Pool>(p)),
                         t[p].pending, queued[p]));
  }

  // Pointer map: exactly the allocated blocks.
  std::int64_t allocated_total = t[0].allocated + t[1].allocated;
  if (static_cast<std::int64_t>(live.size()) != allocated_total)
    fail(fmt::format("pointer map holds {} entries, {} blocks are allocated", live.size(), allocated_total));
  live.for_each([&](std::uintptr_t key, const Block* b) {
    if (b->addr != key || b->state != BlockState::allocated)
      fail(fmt::format("pointer map entry {:#x} is not an allocated block at that address", key));
  });

  // Statistics against the tally, per pool and for all pools.
  const DeviceStats ds = stats.view(device_index);
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
  if (static_cast<std::int64_t>(stats.free_blocks) != t[0].free + t[1].free)
    fail(fmt::format("stats free_blocks = {}, counted {}", stats.free_blocks, t[0].free + t[1].free));
  for (std::size_t p = 0; p < kPools; ++p)
    if (t[p].reserved != t[p].allocated_bytes + t[p].pending_bytes + t[p].free_bytes)
      fail(fmt::format("{} pool: reserved {} != allocated + pending + free", pool_name(static_cast<Pool>(p)), t[p].reserved));
  if (stats.num_device_alloc - stats.num_device_free != static_cast<std::uint64_t>(t[0].segments + t[1].segments))
    fail("device alloc calls - device free calls != segments");
  return v;
}

// ---- public interface: lock, then delegate -------------------------------------------

CachingAllocator::CachingAllocator(Device& device, int device_index, const AllocatorOptions& options)
    : impl_(std::make_unique<Impl>(device, device_index, options)) {}

CachingAllocator::~CachingAllocator() {
  // Memory stays with the device (never freed at exit), but every fence token is given
  // back exactly once.
  while (!impl_->closed.empty()) {
    impl_->dev.fence_release(impl_->closed.oldest().fence);
    impl_->closed.pop();
  }
}

AllocResult CachingAllocator::allocate(std::size_t bytes) noexcept {
  if (bytes == 0) return {nullptr, AllocStatus::invalid_size};
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->allocate(bytes);
}

FreeStatus CachingAllocator::free(void* ptr) noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->free(ptr);
}

std::size_t CachingAllocator::empty_cache() noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->empty_cache();
}

void CachingAllocator::release_all() noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->release_all();
}

bool CachingAllocator::owns(const void* ptr, std::size_t* size) const noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Block* b = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (b == nullptr) return false;
  if (size != nullptr) *size = b->size;
  return true;
}

bool CachingAllocator::block_of(const void* addr, SegmentRange* out) const noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const Block* b = impl_->live.find(a);  // the start of a block: O(1)
  if (b == nullptr) {
    const Segment* s = impl_->segment_containing(a);  // O(log segments) ...
    if (s == nullptr) return false;
    for (b = s->first; b != nullptr && a - b->addr >= b->size; b = b->next) {}  // ... then a walk
    if (b == nullptr) return false;
  }
  if (b->state != BlockState::allocated) return false;
  if (out != nullptr) *out = {reinterpret_cast<void*>(b->addr), b->size};
  return true;
}

bool CachingAllocator::segment_of(const void* ptr, SegmentRange* out) const noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Segment* s = impl_->segment_containing(reinterpret_cast<std::uintptr_t>(ptr));
  if (s == nullptr) return false;
  if (out != nullptr) *out = {reinterpret_cast<void*>(s->base), s->size};
  return true;
}

DeviceStats CachingAllocator::stats() const noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats.view(impl_->device_index);
}

std::size_t CachingAllocator::cached_bytes() const noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<std::size_t>(impl_->stats.reserved_bytes.all_current - impl_->stats.allocated_bytes.all_current);
}

void CachingAllocator::set_event_sink(EventSink* sink) noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sink = sink;
}

const AllocatorOptions& CachingAllocator::options() const noexcept { return impl_->opt; }

std::vector<std::string> CachingAllocator::check() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->check();
}

}  // namespace luma::core
