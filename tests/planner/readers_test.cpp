// readers_test.cpp - format detection and the planner CSV / RMM log readers, including
// the errors for malformed input (each must name the source and the line).
#include <gtest/gtest.h>

#include <sstream>

#include "planner/input/lifetime_reader.h"
#include "planner/input/rmm_log_reader.h"

namespace luma::core {
namespace {

std::vector<Lifetime> read(const std::string& text) {
  return read_lifetimes_text(text, "in.csv", builtin_readers());
}

std::string error_of(const std::string& text) {
  try {
    read(text);
  } catch (const PlanInputError& e) {
    return e.what();
  }
  return "";
}

TEST(PlannerCsv, ReadsRows) {
  auto lts = read("id,lower,upper,size\nb1,0,3,4\nb2,3,9,8\r\n");
  ASSERT_EQ(lts.size(), 2u);
  EXPECT_EQ(lts[0].id, "b1");
  EXPECT_EQ(lts[1].lower, 3u);
  EXPECT_EQ(lts[1].upper, 9u);
  EXPECT_EQ(lts[1].size, 8u);
  EXPECT_EQ(lts[1].alignment, 1u);
}

TEST(PlannerCsv, OptionalAlignmentColumn) {
  auto lts = read("id,lower,upper,size,alignment\n0,0,1,100,64\n");
  ASSERT_EQ(lts.size(), 1u);
  EXPECT_EQ(lts[0].alignment, 64u);
}

TEST(PlannerCsv, ErrorsNameTheLine) {
  EXPECT_EQ(error_of("id,lower,upper,size\n0,0,1,4\n1,0,x,4\n"),
            "in.csv:3: upper is not an unsigned integer: 'x'");
  EXPECT_EQ(error_of("id,lower,upper,size\n0,5,1,4\n"), "in.csv:2: upper (1) is below lower (5)");
  EXPECT_EQ(error_of("id,lower,upper,size\n0,0,1\n"), "in.csv:2: expected 4 fields, found 3");
  EXPECT_EQ(error_of("id,lower,upper,size,alignment\n0,0,1,4,3\n"),
            "in.csv:2: alignment must be a power of two, got 3");
  EXPECT_EQ(error_of("id,lower,upper,size\n0,0,1,-4\n"),
            "in.csv:2: size is not an unsigned integer: '-4'");
  EXPECT_EQ(error_of("id,lower,upper,size\n0,0,1,99999999999999999999999\n"),
            "in.csv:2: size is not an unsigned integer: '99999999999999999999999'");
}

// Sizes that add up past 2^62, or times past it, would overflow the planners' offset sums
// and the checker's doubled times (six 2^62-byte buffers got overlapping offsets): refused.
TEST(PlannerCsv, InputsNoArenaCouldHoldAreRefused) {
  std::string six = "id,lower,upper,size\n";
  for (int i = 1; i <= 6; ++i) {  // appended piece by piece: GCC 12 -O3's false -Wrestrict
    six += 'b';
    six += std::to_string(i);
    six += ",0,10,4611686018427387904\n";
  }
  EXPECT_NE(error_of(six).find("add up to more than 2^62 bytes"), std::string::npos) << error_of(six);
  EXPECT_NE(error_of("id,lower,upper,size\na,0,18446744073709551615,4\n").find("time beyond 2^62"),
            std::string::npos);
  EXPECT_EQ(error_of("id,lower,upper,size\na,0,4611686018427387904,4611686018427387903\n"), "");
}

TEST(RmmLog, LifetimesFromEventIndices) {
  auto lts = read(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,t,allocate,0x100,1024,0x0\n"
      "1,t,allocate failure,0x0,99,0x0\n"
      "1,t,allocate,0x200,512,0x0\n"
      "1,t,free,0x100,1024,0x0\n"
      "1,t,allocate,0x100,2048,0x0\n");  // reused pointer: a new buffer, never freed
  ASSERT_EQ(lts.size(), 3u);
  EXPECT_EQ(lts[0].lower, 0u);
  EXPECT_EQ(lts[0].upper, 2u);
  EXPECT_EQ(lts[1].lower, 1u);
  EXPECT_EQ(lts[1].upper, 4u);  // never freed: to the end of the log (4 events)
  EXPECT_EQ(lts[2].lower, 3u);
  EXPECT_EQ(lts[2].upper, 4u);
  EXPECT_EQ(lts[2].size, 2048u);
  EXPECT_EQ(lts[0].alignment, 256u);
}

TEST(RmmLog, ReadLogTellsFreedOnTheLastRowFromNeverFreedAndKeepsFailures) {
  std::istringstream in(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,t,allocate,0x100,1024,0x0\n"
      "1,t,allocate,0x200,512,0x0\n"
      "1,t,allocate failure,0x0,18446744073709551615,0x0\n"  // any size may be refused
      "1,t,free,0x100,1024,0x0\n"
      "1,t,allocate failure,0x0,4096,0x0\n");
  const RmmLog log = RmmLogReader().read_log(in, "in.csv");
  ASSERT_EQ(log.lifetimes.size(), 2u);
  EXPECT_EQ(log.rows, 3u);
  EXPECT_EQ(log.lifetimes[0].upper, 2u);
  EXPECT_EQ(log.lifetimes[1].upper, 3u);
  EXPECT_EQ(log.freed, (std::vector<bool>{true, false}));
  ASSERT_EQ(log.failures.size(), 2u);
  EXPECT_EQ(log.failures[0].time, 2u);  // before the free (row time 2)
  EXPECT_EQ(log.failures[0].size, ~std::uint64_t{0});
  EXPECT_EQ(log.failures[1].time, 3u);  // after the last row
  EXPECT_EQ(log.failures[1].size, 4096u);
  // The last row's free ends its buffer at the same time as a buffer never freed: only
  // `freed` tells them apart.
  std::istringstream last("Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x1,256,0x0\n"
                          "1,t,free,0x1,256,0x0\n");
  EXPECT_EQ(RmmLogReader().read_log(last, "in.csv").freed, std::vector<bool>{true});
}

TEST(RmmLog, TheTimeColumnIsKeptAsAClockWhenEveryRowHasOne) {
  EXPECT_EQ(parse_rmm_time("16:49:21.999306"), std::optional<std::uint64_t>(((16 * 60 + 49) * 60 + 21) * 1'000'000'000ull + 999'306'000));
  EXPECT_EQ(parse_rmm_time("00:00:01"), std::optional<std::uint64_t>(1'000'000'000));
  EXPECT_EQ(parse_rmm_time("00:00:00.123456789"), std::optional<std::uint64_t>(123'456'789));
  for (const char* bad : {"24:00:00", "1:00:00", "00:60:00", "00:00:00.", "00:00:00.1234567890", "12", "00:00:00x"})
    EXPECT_FALSE(parse_rmm_time(bad).has_value()) << bad;
  const std::string head = "Thread,Time,Action,Pointer,Size,Stream\n";
  std::istringstream good(head + "1,10:00:00.000010,allocate,0x10,256,0x0\n"
                                 "2,10:00:00.000005,allocate,0x20,256,0x0\n"  // another thread, logged late
                                 "1,10:00:00.000030,free,0x10,256,0x0\n");
  const RmmLog log = RmmLogReader().read_log(good, "good.csv");
  EXPECT_EQ(log.row_time_ns, (std::vector<std::uint64_t>{0, 0, 20'000}));
  std::istringstream mixed(head + "1,10:00:00.000010,allocate,0x10,256,0x0\n"
                                  "1,7,free,0x10,256,0x0\n");
  const RmmLog no_clock = RmmLogReader().read_log(mixed, "mixed.csv");
  EXPECT_TRUE(no_clock.row_time_ns.empty());
  EXPECT_EQ(no_clock.lifetimes.size(), 1u);  // the lifetimes need no clock
}

TEST(RmmLog, FreeOfUnknownPointerNamesTheLine) {
  EXPECT_EQ(error_of("Thread,Time,Action,Pointer,Size,Stream\n"
                     "1,t,allocate,0x100,1024,0x0\n"
                     "1,t,free,0x300,1024,0x0\n"),
            "in.csv:3: free of unknown pointer 0x300");
  EXPECT_EQ(error_of("Thread,Time,Action,Pointer,Size,Stream\n1,t,resize,0x1,1,0x0\n"),
            "in.csv:2: unknown action 'resize' (expected allocate, free or allocate failure)");
  EXPECT_EQ(error_of("Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x1,1\n"),
            "in.csv:2: expected 6 fields, found 5");
}

TEST(Detection, UnknownFormatNamesWhatWasExpected) {
  std::string e = error_of("hello,world\n1,2\n");
  EXPECT_NE(e.find("in.csv: unrecognised input format"), std::string::npos) << e;
  EXPECT_NE(e.find("id,lower,upper,size"), std::string::npos) << e;
  EXPECT_NE(e.find("Thread,Time,Action,Pointer,Size,Stream"), std::string::npos) << e;
  EXPECT_NE(error_of("").find("unrecognised"), std::string::npos);
}

TEST(Detection, MissingFile) {
  try {
    read_lifetimes_file("/nonexistent/x.csv", builtin_readers());
    FAIL();
  } catch (const PlanInputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/x.csv: cannot open the file");
  }
}

}  // namespace
}  // namespace luma::core
