// limited_mem_info_test.cpp - cuMemGetInfo's answer under a memory limit
// (core/limits/limited_mem_info.h): the limit is the total, what is left under it is free,
// and free is never negative, never wrapped, never above the total or the device's free
// memory (HAMi-core's issues list each of these).
#include "limits/limited_mem_info.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "base/constants.h"

namespace luma::core {
namespace {

MemInfoInput limited(std::size_t real_free, std::size_t real_total, std::size_t limit,
                     std::size_t used, std::size_t cached = 0) {
  MemInfoInput in;
  in.real_free = real_free;
  in.real_total = real_total;
  in.limited = true;
  in.limit = limit;
  in.used = used;
  in.cached = cached;
  return in;
}

TEST(LimitedMemInfo, TheLimitIsTheTotalAndWhatIsLeftUnderItIsFree) {
  const MemInfo m = limited_mem_info(limited(70 * GiB, 80 * GiB, 8 * GiB, 3 * GiB));
  EXPECT_EQ(m.total, 8 * GiB);
  EXPECT_EQ(m.free, 5 * GiB);
}

TEST(LimitedMemInfo, NeverAboveWhatTheDeviceHasFree) {
  // Others hold most of the device: 1 GiB free really, though 5 are left under the limit.
  const MemInfo m = limited_mem_info(limited(1 * GiB, 80 * GiB, 8 * GiB, 3 * GiB));
  EXPECT_EQ(m.free, 1 * GiB);
}

TEST(LimitedMemInfo, NeverNegativeNorWrappedWhenMoreIsHeldThanTheLimit) {
  // A group member with a larger limit (or a limit lowered) holds more than this limit.
  const MemInfo m = limited_mem_info(limited(70 * GiB, 80 * GiB, 8 * GiB, 9 * GiB));
  EXPECT_EQ(m.free, 0u);
  EXPECT_EQ(m.total, 8 * GiB);
  const MemInfo huge = limited_mem_info(limited(SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX));
  EXPECT_LE(huge.free, huge.total);
}

TEST(LimitedMemInfo, CachedBytesAreFreeToTheProgramButNeverAboveTheTotal) {
  // 8 GiB held, 6 of them cached: 6 free under the limit.
  EXPECT_EQ(limited_mem_info(limited(70 * GiB, 80 * GiB, 8 * GiB, 8 * GiB, 6 * GiB)).free, 6 * GiB);
  // Cached bytes cannot lift free above the total, nor wrap it.
  const MemInfo m = limited_mem_info(limited(79 * GiB, 80 * GiB, 8 * GiB, 1 * GiB, SIZE_MAX));
  EXPECT_EQ(m.free, 8 * GiB);
}

TEST(LimitedMemInfo, ALimitAboveTheDeviceIsTheDevice) {
  const MemInfo m = limited_mem_info(limited(20 * GiB, 80 * GiB, 100 * GiB, 0));
  EXPECT_EQ(m.total, 80 * GiB);
  EXPECT_EQ(m.free, 20 * GiB);
}

TEST(LimitedMemInfo, WithoutALimitTheDriversAnswerPlusTheCache) {
  MemInfoInput in;
  in.real_free = 10 * GiB;
  in.real_total = 80 * GiB;
  in.cached = 2 * GiB;
  EXPECT_EQ(limited_mem_info(in).free, 12 * GiB);
  EXPECT_EQ(limited_mem_info(in).total, 80 * GiB);
  in.real_free = 79 * GiB;
  in.cached = SIZE_MAX;
  EXPECT_EQ(limited_mem_info(in).free, 80 * GiB);  // capped, not wrapped
  in.real_free = 90 * GiB;  // a driver answering free > total is not trusted past total
  in.cached = 0;
  EXPECT_EQ(limited_mem_info(in).free, 80 * GiB);
}

TEST(LimitedMemInfo, AZeroLimitLeavesNothingFree) {
  const MemInfo m = limited_mem_info(limited(70 * GiB, 80 * GiB, 0, 0, 0));
  EXPECT_EQ(m.total, 0u);
  EXPECT_EQ(m.free, 0u);
}

}  // namespace
}  // namespace luma::core
