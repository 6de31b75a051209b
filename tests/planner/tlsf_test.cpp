// tlsf_test.cpp - the TLSF against the reference semantics (docs/planner.md, "tlsf"):
// bucket indices, rounding, FIFO order, alignment, merging, the three errors, determinism.
// check() runs after every operation.
#include <gtest/gtest.h>

#include "planner/tlsf.h"

namespace luma::core {
namespace {

void expect_valid(const Tlsf& t) {
  auto bad = t.check();
  EXPECT_TRUE(bad.empty()) << bad.front();
}

TEST(Tlsf, BucketIndices) {
  Tlsf t(1 << 20, 0, 256, 32);
  EXPECT_EQ(t.level1(0), 0u);
  EXPECT_EQ(t.level1(1), 1u);
  EXPECT_EQ(t.level1(256), 9u);
  EXPECT_EQ(t.level1(511), 9u);
  EXPECT_EQ(t.level1(512), 10u);
  // lv2_cnt 32 -> l2_bits 6: sizes below 64 are their own offset in the power of two.
  EXPECT_EQ(t.level2(5), 1u);     // msb 3: 5 - 4
  EXPECT_EQ(t.level2(256), 0u);
  EXPECT_EQ(t.level2(264), 1u);   // (264 - 256) >> (9 - 6)
  EXPECT_EQ(t.level2(511), 31u);
  EXPECT_EQ(t.level2(0), 0u);
  EXPECT_EQ(t.level2_slots(), 64u);
}

TEST(Tlsf, SearchSizeRoundsToBucketGranularity) {
  Tlsf t(1 << 20, 0, 256, 32);
  EXPECT_EQ(t.search_size(1, 1), 256u);      // at least one block
  EXPECT_EQ(t.search_size(257, 1), 264u);    // msb 9: granule 8
  EXPECT_EQ(t.search_size(1000, 1), 1008u);  // msb 10: granule 16
  EXPECT_EQ(t.search_size(256, 256), 512u);  // 256 + 255 = 511 -> 512
}

TEST(Tlsf, AllocatesFromTheStartAndSplits) {
  Tlsf t(4096, 0, 256, 32);
  EXPECT_EQ(t.alloc(256), 0u);
  EXPECT_EQ(t.alloc(512), 256u);
  EXPECT_EQ(t.alloc(100), 768u);  // raised to the block size
  EXPECT_EQ(t.peak_used(), 1024u);
  expect_valid(t);
}

TEST(Tlsf, MergesWithFreeNeighbours) {
  Tlsf t(4096, 0, 256, 32);
  std::uint64_t a = t.alloc(256), b = t.alloc(256), c = t.alloc(256);
  t.free(a);
  expect_valid(t);
  t.free(c);  // merges with the free tail
  expect_valid(t);
  t.free(b);  // merges left and right: one block again
  expect_valid(t);
  EXPECT_EQ(t.bucket(t.level1(4096), t.level2(4096)), std::vector<std::uint64_t>{0});
  EXPECT_EQ(t.alloc(4096), 0u);
}

TEST(Tlsf, BucketsAreFifo) {
  // Three 512-byte holes separated by used blocks go into one bucket in free order; the
  // first freed is the first taken.
  Tlsf t(1 << 16, 0, 256, 32);
  std::vector<std::uint64_t> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(t.alloc(512));
  t.free(blocks[4]);
  t.free(blocks[0]);
  t.free(blocks[2]);
  expect_valid(t);
  EXPECT_EQ(t.bucket(t.level1(512), t.level2(512)),
            (std::vector<std::uint64_t>{blocks[4], blocks[0], blocks[2]}));
  // A 512-byte request searches from bucket(512+): its own bucket holds them.
  EXPECT_EQ(t.alloc(512), blocks[4]);
  EXPECT_EQ(t.alloc(512), blocks[0]);
  expect_valid(t);
}

TEST(Tlsf, AlignmentSplitsOffAHead) {
  Tlsf t(1 << 16, 0, 256, 32);
  EXPECT_EQ(t.alloc(256), 0u);
  std::uint64_t off = t.alloc(256, 4096);
  EXPECT_EQ(off % 4096, 0u);
  EXPECT_EQ(off, 4096u);
  expect_valid(t);
  // The head [256, 4096) is free and reusable.
  EXPECT_EQ(t.alloc(256), 256u);
  expect_valid(t);
}

TEST(Tlsf, ThreeErrors) {
  Tlsf t(1024, 0, 256, 32);
  std::uint64_t a = t.alloc(256);
  try {
    t.alloc(2048);
    FAIL() << "expected out of memory";
  } catch (const TlsfError& e) {
    EXPECT_EQ(e.kind(), TlsfError::Kind::out_of_memory);
  }
  try {
    t.free(a + 8);
    FAIL() << "expected unknown offset";
  } catch (const TlsfError& e) {
    EXPECT_EQ(e.kind(), TlsfError::Kind::unknown_offset);
  }
  std::uint64_t b = t.alloc(256);
  t.free(b);  // merged into the free tail? b's right is free: b keeps its start
  try {
    t.free(b);
    FAIL() << "expected double free";
  } catch (const TlsfError& e) {
    EXPECT_EQ(e.kind(), TlsfError::Kind::double_free);
  }
  expect_valid(t);
}

TEST(Tlsf, BaseIsAddedToOffsets) {
  Tlsf t(4096, 1000, 256, 32);
  std::uint64_t a = t.alloc(256);
  EXPECT_EQ(a, 1000u);
  EXPECT_THROW(t.free(10), TlsfError);
  t.free(a);
  expect_valid(t);
}

TEST(Tlsf, SameCallsSameOffsets) {
  auto run = [] {
    Tlsf t(1 << 22, 0, 256, 32);
    std::vector<std::uint64_t> live, seen;
    std::uint64_t x = 12345;
    for (int i = 0; i < 2000; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      if (!live.empty() && (x >> 60) < 7) {
        std::size_t k = (x >> 20) % live.size();
        t.free(live[k]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        live.push_back(t.alloc(256 + (x >> 40) % 20000, std::uint64_t{1} << ((x >> 33) % 10)));
        seen.push_back(live.back());
      }
      if (i % 97 == 0) {
        auto bad = t.check();
        EXPECT_TRUE(bad.empty()) << bad.front();
      }
    }
    return seen;
  };
  EXPECT_EQ(run(), run());
}

TEST(Tlsf, HandlesGiveTheSameOffsetsAsTheOffsetInterface) {
  // The same calls through both interfaces; the handle one keeps no offset map.
  Tlsf by_offset(1 << 22, 0, 256, 32), by_handle(1 << 22, 0, 256, 32);
  std::vector<std::uint64_t> offsets;
  std::vector<Tlsf::Handle> handles;
  std::uint64_t x = 99;
  for (int i = 0; i < 3000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    if (!offsets.empty() && (x >> 60) < 7) {
      std::size_t k = (x >> 20) % offsets.size();
      by_offset.free(offsets[k]);
      by_handle.free_block(handles[k]);
      offsets.erase(offsets.begin() + static_cast<std::ptrdiff_t>(k));
      handles.erase(handles.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      const std::uint64_t size = 256 + (x >> 40) % 20000, align = std::uint64_t{1} << ((x >> 33) % 10);
      offsets.push_back(by_offset.alloc(size, align));
      handles.push_back(by_handle.alloc_block(size, align));
      ASSERT_EQ(by_handle.offset_of(handles.back()), offsets.back()) << "call " << i;
    }
    if (i % 101 == 0) {
      expect_valid(by_offset);
      expect_valid(by_handle);
    }
  }
  EXPECT_EQ(by_offset.peak_used(), by_handle.peak_used());
  ASSERT_FALSE(handles.empty());
  const Tlsf::Handle h = handles.back();
  by_handle.free_block(h);
  EXPECT_THROW(by_handle.free_block(h), std::invalid_argument);  // no longer in use
  EXPECT_THROW(by_handle.free_block(1u << 30), std::invalid_argument);  // never a block
}

TEST(Tlsf, DoubleFreeAfterAMergeIsAnUnknownOffset) {
  // As in the reference: a freed block merged into its left neighbour no longer starts a
  // block, so freeing its offset again is an unknown offset, not a double free.
  Tlsf t(4096, 0, 256, 32);
  std::uint64_t a = t.alloc(256), b = t.alloc(256);
  t.alloc(256);
  t.free(a);
  t.free(b);  // merges into a's block
  try {
    t.free(b);
    FAIL() << "no error";
  } catch (const TlsfError& e) {
    EXPECT_EQ(e.kind(), TlsfError::Kind::unknown_offset);
  }
  try {
    t.free(a);  // a's block is free and still starts at a
    FAIL() << "no error";
  } catch (const TlsfError& e) {
    EXPECT_EQ(e.kind(), TlsfError::Kind::double_free);
  }
  expect_valid(t);
}

}  // namespace
}  // namespace luma::core

// The TLSF's offset map against std::map under random inserts, overwrites and erases
// (backward-shift deletion is where open addressing usually goes wrong).
#include <map>

#include "planner/offset_map.h"

namespace luma::core {
namespace {

TEST(OffsetMap, AgreesWithStdMap) {
  OffsetMap map;
  std::map<std::uint64_t, std::uint32_t> ref;
  std::uint64_t x = 7;
  for (int step = 0; step < 200000; ++step) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::uint64_t key = (x >> 40) % 5000 * 256;  // few keys: many collisions and reuses
    if ((x >> 20) % 3 == 0) {
      map.erase(key);
      ref.erase(key);
    } else {
      map.set(key, static_cast<std::uint32_t>(step));
      ref[key] = static_cast<std::uint32_t>(step);
    }
  }
  ASSERT_EQ(map.size(), ref.size());
  for (std::uint64_t key = 0; key < 5000 * 256; key += 256) {
    auto it = ref.find(key);
    EXPECT_EQ(map.find(key), it == ref.end() ? OffsetMap::kEmpty : it->second) << key;
  }
}

}  // namespace
}  // namespace luma::core
