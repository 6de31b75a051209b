// tlsf.cpp - the TLSF offset allocator (see tlsf.h for the semantics it keeps).
#include "planner/tlsf.h"

#include <bit>

namespace luma::core {

namespace {

std::uint32_t bit_length(std::uint64_t n) noexcept {
  return static_cast<std::uint32_t>(64 - std::countl_zero(n));
}

std::uint64_t round_up(std::uint64_t n, std::uint64_t granule) noexcept {
  return granule <= 1 ? n : (n + granule - 1) / granule * granule;
}

}  // namespace

Tlsf::Tlsf(std::uint64_t size, std::uint64_t base, std::uint64_t block_size,
           std::uint64_t level2_count)
    : size_(size), base_(base), block_size_(block_size) {
  if (size >= (std::uint64_t{1} << 62)) throw std::invalid_argument("TLSF: arena too large");
  if (level2_count == 0 || level2_count > 63)
    throw std::invalid_argument("TLSF: level2_count must be 1..63");
  l2_bits_ = bit_length(level2_count);
  slots_ = 1u << l2_bits_;
  levels_ = bit_length(size) + 1;
  head_.assign(std::size_t{levels_} * slots_, kNil);
  tail_.assign(std::size_t{levels_} * slots_, kNil);
  l2_bitmap_.assign(levels_, 0);
  if (size > 0) push_back(new_block(0, size));
}


std::uint64_t Tlsf::search_size(std::uint64_t size, std::uint64_t align) const noexcept {
  std::uint64_t req = size > block_size_ ? size : block_size_;
  if (align == 0) align = 1;
  std::uint64_t s = req + align - 1;
  if (s < block_size_) s = block_size_;
  std::uint32_t msb = bit_length(s);
  if (msb > l2_bits_) s = round_up(s, std::uint64_t{1} << (msb - l2_bits_));
  return s;
}


std::uint32_t Tlsf::new_block(std::uint64_t offset, std::uint64_t size) {
  std::uint32_t b;
  if (!spare_.empty()) {
    b = spare_.back();
    spare_.pop_back();
  } else {
    b = static_cast<std::uint32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  blocks_[b] = Block{offset, size, kNil, kNil, kNil, kNil, kNil, true};
  return b;
}

void Tlsf::drop_block(std::uint32_t b) { spare_.push_back(b); }

// Block 0 always starts at offset 0: merging keeps the left block, so it is never dropped.
std::uint32_t Tlsf::find_block(std::uint64_t offset) const {
  if (blocks_.empty()) return kNil;
  std::size_t steps = 0;
  for (std::uint32_t b = 0; b != kNil && steps <= blocks_.size(); b = blocks_[b].phys_next, ++steps) {
    if (blocks_[b].offset == offset) return b;
    if (blocks_[b].offset > offset) break;
  }
  return kNil;
}

// slots_ is a power of two (1 << l2_bits_): a bucket's row and column by shift and mask.
void Tlsf::push_back(std::uint32_t b) {
  const std::uint32_t s = slot_of(blocks_[b].size);
  Block& blk = blocks_[b];
  blk.bucket = s;
  blk.free_next = kNil;
  blk.free_prev = tail_[s];
  if (tail_[s] == kNil) head_[s] = b;
  else blocks_[tail_[s]].free_next = b;
  tail_[s] = b;
  l2_bitmap_[s >> l2_bits_] |= std::uint64_t{1} << (s & (slots_ - 1));
  l1_bitmap_ |= std::uint64_t{1} << (s >> l2_bits_);
}

void Tlsf::unlink(std::uint32_t b) {
  Block& blk = blocks_[b];
  const std::uint32_t s = blk.bucket;
  if (blk.free_prev == kNil) head_[s] = blk.free_next;
  else blocks_[blk.free_prev].free_next = blk.free_next;
  if (blk.free_next == kNil) tail_[s] = blk.free_prev;
  else blocks_[blk.free_next].free_prev = blk.free_prev;
  blk.free_prev = blk.free_next = kNil;
  blk.bucket = kNil;
  if (head_[s] == kNil) {
    const std::uint32_t l1 = s >> l2_bits_;
    l2_bitmap_[l1] &= ~(std::uint64_t{1} << (s & (slots_ - 1)));
    if (l2_bitmap_[l1] == 0) l1_bitmap_ &= ~(std::uint64_t{1} << l1);
  }
}

std::uint32_t Tlsf::split(std::uint32_t b, std::uint64_t size) {
  std::uint64_t rest_offset = blocks_[b].offset + size;
  std::uint64_t rest_size = blocks_[b].size - size;
  std::uint32_t r = new_block(rest_offset, rest_size);  // may move blocks_
  Block& blk = blocks_[b];
  Block& rest = blocks_[r];
  blk.size = size;
  rest.phys_prev = b;
  rest.phys_next = blk.phys_next;
  if (blk.phys_next != kNil) blocks_[blk.phys_next].phys_prev = r;
  blk.phys_next = r;
  push_back(r);
  return r;
}

std::uint64_t Tlsf::alloc(std::uint64_t size, std::uint64_t align) {
  const Handle b = alloc_block(size, align);
  handed_out_.set(blocks_[b].offset, b);
  return blocks_[b].offset + base_;
}

Tlsf::Handle Tlsf::alloc_block(std::uint64_t size, std::uint64_t align) {
  std::uint64_t req = size > block_size_ ? size : block_size_;
  if (align == 0) align = 1;
  std::uint64_t want = search_size(size, align);
  std::uint32_t l1 = level1(want);
  std::uint32_t l2 = level2(want);
  std::uint32_t slot = kNil;
  if (l1 < levels_) {
    std::uint64_t row = l2 < 64 ? l2_bitmap_[l1] & (~std::uint64_t{0} << l2) : 0;
    if (row != 0) {
      slot = l1 * slots_ + static_cast<std::uint32_t>(std::countr_zero(row));
    } else if (l1 + 1 < 64) {
      std::uint64_t rows = l1_bitmap_ & (~std::uint64_t{0} << (l1 + 1));
      if (rows != 0) {
        std::uint32_t r = static_cast<std::uint32_t>(std::countr_zero(rows));
        slot = r * slots_ + static_cast<std::uint32_t>(std::countr_zero(l2_bitmap_[r]));
      }
    }
  }
  if (slot == kNil)
    throw TlsfError(TlsfError::Kind::out_of_memory, req,
                    "TLSF out of memory: requested " + std::to_string(req) + " bytes");
  std::uint32_t b = head_[slot];
  unlink(b);
  // Alignment: split off a head so the block handed out starts aligned. The head goes back
  // into its bucket before the remainder does (the reference's order).
  std::uint64_t aligned = round_up(blocks_[b].offset, align);
  if (aligned != blocks_[b].offset) {
    std::uint32_t head = b;
    std::uint64_t head_size = aligned - blocks_[b].offset;
    std::uint64_t rest_size = blocks_[b].size - head_size;
    std::uint32_t r = new_block(aligned, rest_size);
    Block& h = blocks_[head];
    Block& rest = blocks_[r];
    h.size = head_size;
    rest.phys_prev = head;
    rest.phys_next = h.phys_next;
    if (h.phys_next != kNil) blocks_[h.phys_next].phys_prev = r;
    h.phys_next = r;
    push_back(head);
    b = r;
  }
  if (blocks_[b].size > req) split(b, req);
  blocks_[b].is_free = false;
  std::uint64_t end = blocks_[b].offset + req;
  if (end > peak_used_) peak_used_ = end;
  return b;
}

void Tlsf::free(std::uint64_t offset) {
  auto unknown = [&] {
    return TlsfError(TlsfError::Kind::unknown_offset, offset,
                     "TLSF: free of unknown offset " + std::to_string(offset));
  };
  if (offset < base_) throw unknown();
  const std::uint32_t b = handed_out_.find(offset - base_);
  if (b == OffsetMap::kEmpty) {
    // Not handed out: the start of a free block (a double free) or of no block at all.
    const std::uint32_t f = find_block(offset - base_);
    if (f != kNil && blocks_[f].is_free)
      throw TlsfError(TlsfError::Kind::double_free, offset,
                      "TLSF: double free at offset " + std::to_string(offset));
    throw unknown();
  }
  handed_out_.erase(offset - base_);
  free_block(b);
}

void Tlsf::free_block(Handle b) {
  if (b >= blocks_.size() || blocks_[b].is_free)
    throw std::invalid_argument("TLSF: free_block of a block not in use");
  blocks_[b].is_free = true;
  // Merge with a free left neighbour (it keeps its start), then with a free right one.
  std::uint32_t left = blocks_[b].phys_prev;
  if (left != kNil && blocks_[left].is_free) {
    unlink(left);
    blocks_[left].size += blocks_[b].size;
    blocks_[left].phys_next = blocks_[b].phys_next;
    if (blocks_[b].phys_next != kNil) blocks_[blocks_[b].phys_next].phys_prev = left;
    drop_block(b);
    b = left;
  }
  std::uint32_t right = blocks_[b].phys_next;
  if (right != kNil && blocks_[right].is_free) {
    unlink(right);
    blocks_[b].size += blocks_[right].size;
    blocks_[b].phys_next = blocks_[right].phys_next;
    if (blocks_[right].phys_next != kNil) blocks_[blocks_[right].phys_next].phys_prev = b;
    drop_block(right);
  }
  push_back(b);
}

std::vector<std::uint64_t> Tlsf::bucket(std::uint32_t l1, std::uint32_t l2) const {
  std::vector<std::uint64_t> out;
  if (l1 >= levels_ || l2 >= slots_) return out;
  for (std::uint32_t b = head_[l1 * slots_ + l2]; b != kNil && out.size() <= blocks_.size();
       b = blocks_[b].free_next)
    out.push_back(blocks_[b].offset);
  return out;
}

std::vector<std::string> Tlsf::check() const {
  std::vector<std::string> bad;
  auto at = [](std::uint64_t offset) { return " (block at " + std::to_string(offset) + ")"; };
  // The address chain: from offset 0, contiguous, covering the arena exactly.
  std::size_t chain = 0, free_blocks = 0, used_blocks = 0;
  std::uint64_t expect = 0;
  if (size_ > 0) {
    std::uint32_t first = blocks_.empty() ? kNil : 0;
    if (first == kNil || blocks_[0].offset != 0) {
      bad.push_back("no block starts at offset 0");
    } else {
      std::uint32_t prev = kNil;
      for (std::uint32_t b = first; b != kNil; b = blocks_[b].phys_next) {
        const Block& blk = blocks_[b];
        if (++chain > blocks_.size()) {
          bad.push_back("the address chain has a cycle");
          break;
        }
        if (blk.offset != expect) bad.push_back("gap or overlap in the address chain" + at(blk.offset));
        if (blk.size == 0) bad.push_back("empty block" + at(blk.offset));
        if (blk.phys_prev != prev) bad.push_back("wrong previous-neighbour link" + at(blk.offset));
        if (prev != kNil && blocks_[prev].is_free && blk.is_free)
          bad.push_back("two adjacent free blocks were not merged" + at(blk.offset));
        const std::uint32_t mapped = handed_out_.find(blk.offset);
        if (mapped != OffsetMap::kEmpty && (mapped != b || blk.is_free))
          bad.push_back("the offset map names the wrong block" + at(blk.offset));
        if (!blk.is_free) ++used_blocks;
        if (blk.is_free) {
          ++free_blocks;
          std::uint32_t s = slot_of(blk.size);
          bool found = false;
          for (std::uint32_t f = head_[s]; f != kNil; f = blocks_[f].free_next) {
            if (f == b) { found = true; break; }
          }
          if (!found) bad.push_back("free block not in its bucket" + at(blk.offset));
        }
        expect = blk.offset + blk.size;
        prev = b;
      }
    }
    if (expect != size_) bad.push_back("blocks cover " + std::to_string(expect) + " of " +
                                       std::to_string(size_) + " bytes");
  }
  if (handed_out_.size() > used_blocks)
    bad.push_back("the offset map holds blocks that are not in use");
  // Buckets: links mirror each other, members are free and belong there, bitmaps agree.
  std::size_t in_buckets = 0;
  for (std::uint32_t s = 0; s < head_.size(); ++s) {
    std::uint32_t prev = kNil;
    std::size_t n = 0;
    for (std::uint32_t f = head_[s]; f != kNil; f = blocks_[f].free_next) {
      if (++n > blocks_.size()) { bad.push_back("a bucket list has a cycle"); break; }
      if (!blocks_[f].is_free) bad.push_back("used block in a bucket" + at(blocks_[f].offset));
      if (slot_of(blocks_[f].size) != s) bad.push_back("block in the wrong bucket" + at(blocks_[f].offset));
      if (blocks_[f].bucket != s) bad.push_back("block's bucket field is wrong" + at(blocks_[f].offset));
      if (blocks_[f].free_prev != prev) bad.push_back("wrong bucket back link" + at(blocks_[f].offset));
      prev = f;
    }
    if (tail_[s] != prev) bad.push_back("bucket tail is wrong (bucket " + std::to_string(s) + ")");
    in_buckets += n;
    bool bit = (l2_bitmap_[s >> l2_bits_] >> (s & (slots_ - 1))) & 1;
    if (bit != (n > 0)) bad.push_back("bitmap disagrees with bucket " + std::to_string(s));
  }
  for (std::uint32_t l1 = 0; l1 < levels_; ++l1) {
    bool bit = (l1_bitmap_ >> l1) & 1;
    if (bit != (l2_bitmap_[l1] != 0)) bad.push_back("first-level bitmap wrong at " + std::to_string(l1));
  }
  if (in_buckets != free_blocks) bad.push_back("buckets hold " + std::to_string(in_buckets) +
                                               " blocks, the chain has " + std::to_string(free_blocks) + " free");
  return bad;
}

}  // namespace luma::core
