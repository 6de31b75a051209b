// pointer_map_test.cpp - the allocator's address map (core/allocator/pointer_map.h): every key found
// with its value until taken, absent keys never found, and the keys a full bucket lends to
// later buckets found and counted back, against a std::unordered_map as the reference.
#include "allocator/pointer_map.h"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

namespace luma::core {
namespace {

using Map = PointerMap<std::uint64_t>;

// Keys as the allocator has them: nonzero multiples of 256.
std::uintptr_t key_of(std::uint64_t n) { return (n + 1) << 8; }

// Every key of the reference found with its value, the sizes equal, and each bucket's
// overflow count equal to the keys of that home stored elsewhere.
void expect_same(const Map& m, const std::unordered_map<std::uintptr_t, std::uint64_t>& ref) {
  ASSERT_EQ(m.size(), ref.size());
  for (const auto& [k, v] : ref) {
    const std::uint64_t* got = m.find(k);
    ASSERT_NE(got, nullptr) << "key " << k;
    ASSERT_EQ(*got, v) << "key " << k;
  }
  std::size_t visited = 0;
  m.for_each([&](std::uintptr_t k, std::uint64_t v) {
    ++visited;
    auto it = ref.find(k);
    ASSERT_NE(it, ref.end()) << "key " << k << " is in the map, not in the reference";
    ASSERT_EQ(it->second, v);
  });
  ASSERT_EQ(visited, ref.size());
}

TEST(PointerMap, RandomInsertsAndTakesMatchAReferenceMap) {
  std::mt19937_64 rng(7);
  Map m;
  std::unordered_map<std::uintptr_t, std::uint64_t> ref;
  std::vector<std::uintptr_t> keys;
  for (int step = 0; step < 200000; ++step) {
    if (keys.empty() || rng() % 100 < 55) {
      const std::uintptr_t k = key_of(rng() % (1u << 24));
      if (ref.count(k) != 0) continue;
      m.reserve_for(m.size() + 1);
      const std::uint64_t v = rng();
      m.insert(k, v);
      ref[k] = v;
      keys.push_back(k);
    } else {
      const std::size_t i = rng() % keys.size();
      const std::uintptr_t k = keys[i];
      std::uint64_t v = 0;
      ASSERT_TRUE(m.take(k, &v)) << "step " << step;
      ASSERT_EQ(v, ref[k]);
      ref.erase(k);
      keys[i] = keys.back();
      keys.pop_back();
      ASSERT_EQ(m.find(k), nullptr) << "taken key still found, step " << step;
    }
    if (step % 20000 == 0) expect_same(m, ref);
  }
  expect_same(m, ref);
  std::uint64_t unused = 0;
  EXPECT_FALSE(m.take(0, &unused));
  EXPECT_EQ(m.find(0), nullptr);
}

// Many keys of one home bucket: the first four stay home, the rest are overflowed into later
// buckets; every one is found, taken in any order, and the count goes back to 0; a key
// of that home that was never inserted is not found, even while others are overflowed.
TEST(PointerMap, KeysAFullBucketLendsOutAreFoundAndCountedBack) {
  Map m;
  m.reserve_for(1000);  // no growth below: homes stay fixed
  const std::size_t buckets = m.bucket_count();
  ASSERT_GE(buckets, 256u);
  const std::size_t target = m.home(key_of(12345));
  std::vector<std::uintptr_t> same_home;
  for (std::uint64_t n = 0; same_home.size() < 11; ++n)
    if (m.home(key_of(n)) == target) same_home.push_back(key_of(n));
  const std::uintptr_t never_inserted = same_home.back();
  same_home.pop_back();

  std::unordered_map<std::uintptr_t, std::uint64_t> ref;
  // Fill the next buckets partly too, so overflowed keys land past more than one of them.
  for (std::uint64_t n = 0, placed = 0; placed < 6; ++n) {
    const std::uintptr_t k = key_of(1'000'000 + n);
    if (m.home(k) != ((target + 1) & (buckets - 1))) continue;
    m.insert(k, n);
    ref[k] = n;
    ++placed;
  }
  for (std::size_t i = 0; i < same_home.size(); ++i) {
    m.insert(same_home[i], 100 + i);
    ref[same_home[i]] = 100 + i;
  }
  EXPECT_EQ(m.overflowed(target), same_home.size() - PointerMap<std::uint64_t>::kWays);
  expect_same(m, ref);
  EXPECT_EQ(m.find(never_inserted), nullptr);

  // Take the ones at home first: the overflowed ones must still be found.
  for (std::size_t i = 0; i < same_home.size(); i += 2) {
    std::uint64_t v = 0;
    ASSERT_TRUE(m.take(same_home[i], &v));
    EXPECT_EQ(v, 100 + i);
    ref.erase(same_home[i]);
    expect_same(m, ref);
    EXPECT_EQ(m.find(never_inserted), nullptr);
  }
  for (std::size_t i = 1; i < same_home.size(); i += 2) {
    std::uint64_t v = 0;
    ASSERT_TRUE(m.take(same_home[i], &v));
    ref.erase(same_home[i]);
  }
  EXPECT_EQ(m.overflowed(target), 0u);
  expect_same(m, ref);
  // Freed room at home is used again, and nothing overflows.
  m.insert(never_inserted, 7);
  EXPECT_EQ(m.overflowed(target), 0u);
  ASSERT_NE(m.find(never_inserted), nullptr);
}

TEST(PointerMap, GrowingKeepsEveryKey) {
  Map m;
  std::unordered_map<std::uintptr_t, std::uint64_t> ref;
  for (std::uint64_t n = 0; n < 100000; ++n) {
    m.reserve_for(m.size() + 1);
    m.insert(key_of(n * 977), n);
    ref[key_of(n * 977)] = n;
  }
  EXPECT_GE(m.bucket_count() * Map::kWays, ref.size() * Map::kLoadDenominator);
  expect_same(m, ref);
}

}  // namespace
}  // namespace luma::core
