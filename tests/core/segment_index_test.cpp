// segment_index_test.cpp - the allocator's sorted index of segments (segment_index.h)
// against a std::map doing the same: random inserts and erases enough to split, empty and
// merge runs many times over, address lookups inside, between and outside segments, the
// walk's order, remove_if and clear.
#include "allocator/segment_index.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace luma::core {
namespace {

std::vector<std::uintptr_t> walk(const SegmentIndex& index) {
  std::vector<std::uintptr_t> bases;
  index.for_each([&bases](const Segment* s) { bases.push_back(s->base); });
  return bases;
}

std::vector<std::uintptr_t> keys(const std::map<std::uintptr_t, Segment*>& m) {
  std::vector<std::uintptr_t> bases;
  for (const auto& [base, s] : m) bases.push_back(base);
  return bases;
}

// The model's answer to "which segment holds addr".
Segment* model_containing(const std::map<std::uintptr_t, Segment*>& m, std::uintptr_t addr) {
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return nullptr;
  --it;
  return addr - it->second->base < it->second->size ? it->second : nullptr;
}

TEST(SegmentIndex, AgreesWithAnOrderedMapThroughRandomInsertsAndErases) {
  // Segments are 1 MiB slots of a 16 GiB range, 512 KiB long: every other half-slot is a
  // gap, so lookups land inside segments, in gaps and beyond both ends.
  constexpr std::uintptr_t kFirst = std::uintptr_t{1} << 40;
  constexpr std::size_t kSlots = 16384;
  constexpr std::size_t kSlot = std::size_t{1} << 20;
  std::vector<Segment> records(kSlots);
  for (std::size_t i = 0; i < kSlots; ++i) {
    records[i].base = kFirst + i * kSlot;
    records[i].size = kSlot / 2;
  }
  std::vector<bool> held(kSlots, false);
  std::map<std::uintptr_t, Segment*> model;
  SegmentIndex index;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 200000; ++step) {
    // Phases that fill and drain, so runs split, empty and merge again and again.
    const bool filling = (step / 20000) % 2 == 0;
    const std::size_t i = rng() % kSlots;
    if (!held[i] && (filling ? rng() % 4 != 0 : rng() % 4 == 0)) {
      index.reserve_insert();
      index.insert(&records[i]);
      model[records[i].base] = &records[i];
      held[i] = true;
    } else if (held[i]) {
      index.erase(&records[i]);
      model.erase(records[i].base);
      held[i] = false;
    }
    const std::uintptr_t probe = kFirst - kSlot + rng() % ((kSlots + 2) * kSlot);
    ASSERT_EQ(index.containing(probe), model_containing(model, probe)) << "step " << step;
    if (step % 5000 == 0) {
      ASSERT_TRUE(index.consistent()) << "step " << step;
      ASSERT_EQ(walk(index), keys(model)) << "step " << step;
    }
  }
  EXPECT_EQ(index.size(), model.size());
  EXPECT_TRUE(index.consistent());
  EXPECT_EQ(walk(index), keys(model));
}

TEST(SegmentIndex, RemoveIfDropsExactlyThePickedSegmentsInAddressOrder) {
  std::vector<Segment> records(1000);
  SegmentIndex index;
  for (std::size_t i = 0; i < records.size(); ++i) {
    records[i].base = (std::uintptr_t{1} << 40) + (records.size() - i) * 4096;  // inserted high to low
    records[i].size = 4096;
    index.reserve_insert();
    index.insert(&records[i]);
  }
  std::vector<std::uintptr_t> seen;
  index.remove_if([&seen](Segment* s) {
    seen.push_back(s->base);
    return (s->base / 4096) % 3 != 0;  // keep a third
  });
  ASSERT_EQ(seen.size(), records.size());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_TRUE(index.consistent());
  for (std::uintptr_t base : walk(index)) EXPECT_EQ((base / 4096) % 3, 0u);
  EXPECT_EQ(index.size(), walk(index).size());
  index.remove_if([](Segment*) { return true; });
  EXPECT_TRUE(index.empty());
  EXPECT_TRUE(index.consistent());
  EXPECT_EQ(index.containing(records[0].base), nullptr);
  // Usable again after emptying, and after clear().
  index.reserve_insert();
  index.insert(&records[5]);
  EXPECT_EQ(index.containing(records[5].base + 100), &records[5]);
  index.clear();
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.containing(records[5].base), nullptr);
}

}  // namespace
}  // namespace luma::core
