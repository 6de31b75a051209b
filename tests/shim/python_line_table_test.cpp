// python_line_table_test.cpp - python::line_at (shim/python/python_line_table.h) against line
// tables CPython itself wrote: the same function compiled by CPython 3.10.13, 3.11.7,
// 3.12.1 and 3.13.0 (its co_linetable, and the line of every instruction as the
// interpreter's own co_lines() gives it), then malformed and edge-case tables, which must
// give 0 and never be read past their end.
#include "python/python_line_table.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

namespace luma::shim::python {
namespace {

// The function the tables below describe (first line 1):
//   def f(a, b):
//       x = a + b
//
//       if x > 3:
//           y = [i for i in range(x)]
//       else:
//           y = (
//               a,
//               b)
//       try:
//           z = g(
//               x)
//       except KeyError:
//           pass
//       return y

std::vector<unsigned char> hex(const std::string& text) {
  std::vector<unsigned char> out;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2)
    out.push_back(static_cast<unsigned char>(std::stoi(text.substr(i, 2), nullptr, 16)));
  return out;
}

// co_lines(): (start, end, line) byte ranges; line 0 stands for CPython's None.
using Ranges = std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>>;

void expect_lines(LineFormat format, const std::string& table_hex, const Ranges& ranges,
                  std::uint32_t code_bytes) {
  const std::vector<unsigned char> table = hex(table_hex);
  std::uint32_t covered = 0;
  for (const auto& [start, end, line] : ranges) {
    for (std::uint32_t offset = start; offset < end; offset += 2) {
      EXPECT_EQ(line_at(format, table.data(), table.size(), 1, offset), line)
          << "offset " << offset;
    }
    covered = end;
  }
  EXPECT_EQ(covered, code_bytes);
  // Past the last instruction: no line.
  EXPECT_EQ(line_at(format, table.data(), table.size(), 1, code_bytes), 0u);
  EXPECT_EQ(line_at(format, table.data(), table.size(), 1, code_bytes + 1000), 0u);
}

TEST(PythonLineTable, Cpython310Pep626Table) {
  expect_lines(LineFormat::pep626,
               "0801080214010203020104fe02030201020106ff04040cfe0201040102fe",
               {{0, 8, 2}, {8, 16, 4}, {16, 36, 5}, {36, 38, 8}, {38, 40, 9}, {40, 44, 7},
                {44, 46, 10}, {46, 48, 11}, {48, 50, 12}, {50, 56, 11}, {56, 60, 15},
                {60, 72, 13}, {72, 74, 14}, {74, 78, 15}, {78, 80, 13}},
               80);
}

TEST(PythonLineTable, Cpython311LocationTable) {
  expect_lines(
      LineFormat::locations,
      "8000d80809884189058041e00708883182758075d80c21d00c219d05986199089c08d00c21d10c21d40c21"
      "88018801f006000d0ed80c0df005020d0f8801f00604050ddd0c0dd80c0df103010d0ff400010d0f8801"
      "8801f8e50b13f00001050df00001050df00001050dd8080c8804f00301050df8f8f8e00b0c8048",
      {{0, 2, 1},      {2, 4, 2},      {4, 6, 2},      {6, 10, 2},     {10, 12, 2},
       {12, 14, 4},    {14, 16, 4},    {16, 22, 4},    {22, 24, 4},    {24, 26, 5},
       {26, 28, 5},    {28, 40, 5},    {40, 42, 5},    {42, 46, 5},    {46, 56, 5},
       {56, 58, 5},    {58, 62, 5},    {62, 72, 5},    {72, 74, 5},    {74, 76, 5},
       {76, 78, 8},    {78, 80, 9},    {80, 82, 7},    {82, 84, 7},    {84, 86, 10},
       {86, 98, 11},   {98, 100, 12},  {100, 104, 11}, {104, 114, 11}, {114, 116, 11},
       {116, 118, 11}, {118, 120, 0},  {120, 132, 13}, {132, 134, 13}, {134, 136, 13},
       {136, 138, 13}, {138, 140, 14}, {140, 142, 14}, {142, 144, 13}, {144, 146, 0},
       {146, 148, 0},  {148, 150, 0},  {150, 152, 15}, {152, 154, 15}},
      154);
}

TEST(PythonLineTable, Cpython312LocationTable) {
  expect_lines(
      LineFormat::locations,
      "8000d80809884189058041e0070888318275dc181d98619b08d60c2190318a51d00c218801d10c21f006"
      "000d0ed80c0df005020d0f8801f00604050ddc0c0dd80c0df303010d0f8801f008000c0d8048f9f21500"
      "0d22f8f410000c14f20001050dd8080cd80b0c8048f00501050dfa",
      {{0, 2, 1}, {2, 12, 2}, {12, 22, 4}, {22, 72, 5}, {72, 74, 8}, {74, 76, 9},
       {76, 80, 7}, {80, 82, 10}, {82, 92, 11}, {92, 94, 12}, {94, 104, 11},
       {104, 108, 15}, {108, 112, 0}, {112, 118, 5}, {118, 120, 0}, {120, 136, 13},
       {136, 138, 14}, {138, 142, 15}, {142, 144, 13}, {144, 150, 0}},
      150);
}

TEST(PythonLineTable, Cpython313LocationTable) {
  expect_lines(
      LineFormat::locations,
      "8000d8080989058041e0070888318375dc181d98619c08d30c21990890318a5199088801d00c218801f0"
      "06000d0ed80c0df005020d0f8801f00604050ddc0c0dd80c0df303010d0f8801f008000c0d8048f9f215"
      "000d22f8f410000c14f30001050dd8080cd80b0c8048f00501050dfa",
      {{0, 2, 1}, {2, 10, 2}, {10, 22, 4}, {22, 74, 5}, {74, 76, 8}, {76, 78, 9},
       {78, 82, 7}, {82, 84, 10}, {84, 94, 11}, {94, 96, 12}, {96, 106, 11},
       {106, 110, 15}, {110, 114, 0}, {114, 120, 5}, {120, 122, 0}, {122, 140, 13},
       {140, 142, 14}, {142, 146, 15}, {146, 148, 13}, {148, 154, 0}},
      154);
}

TEST(PythonLineTable, LongFormAndNegativeDeltasFollowTheSignedVarint) {
  // Entry 1: long form (kind 14), 1 code unit, line delta +200 (svarint 400 = 0x50 0x06),
  // end-line delta 0, columns 1 and 2. Entry 2: no-columns (kind 13), 2 units, line delta
  // -150 (svarint 301 = 0x6d 0x04). Entry 3: one-line form kind 12 (+2), 1 unit.
  const std::vector<unsigned char> t = {0xF0, 0x50, 0x06, 0x00, 0x01, 0x02,
                                        0xE9, 0x6D, 0x04,
                                        0xE0, 0x00, 0x01};
  EXPECT_EQ(line_at(LineFormat::locations, t.data(), t.size(), 10, 0), 210u);
  EXPECT_EQ(line_at(LineFormat::locations, t.data(), t.size(), 10, 2), 60u);
  EXPECT_EQ(line_at(LineFormat::locations, t.data(), t.size(), 10, 4), 60u);
  EXPECT_EQ(line_at(LineFormat::locations, t.data(), t.size(), 10, 6), 62u);
  EXPECT_EQ(line_at(LineFormat::locations, t.data(), t.size(), 10, 8), 0u);
}

TEST(PythonLineTable, MalformedOrTruncatedTablesGiveNoLineAndAreNotOverread) {
  // A table that does not start an entry.
  const std::vector<unsigned char> no_start = {0x10, 0x20};
  EXPECT_EQ(line_at(LineFormat::locations, no_start.data(), no_start.size(), 5, 0), 0u);
  // A long-form entry whose varint runs off the end (bit 6 set on the last byte): the
  // table is cut one byte short, as if its end were not where the size says.
  const std::vector<unsigned char> cut = {0xF0, 0x50};
  EXPECT_EQ(line_at(LineFormat::locations, cut.data(), cut.size(), 5, 0), 0u);
  // An odd 3.10 table: the trailing byte is not half of a pair.
  const std::vector<unsigned char> odd = {0x04, 0x01, 0x08};
  EXPECT_EQ(line_at(LineFormat::pep626, odd.data(), odd.size(), 5, 2), 6u);
  EXPECT_EQ(line_at(LineFormat::pep626, odd.data(), odd.size(), 5, 4), 0u);
  // 3.10's "no line" marker (-128) and zero-width ranges that only carry a delta.
  const std::vector<unsigned char> marks = {0x00, 0x03, 0x02, 0x80, 0x02, 0x01};
  EXPECT_EQ(line_at(LineFormat::pep626, marks.data(), marks.size(), 5, 0), 0u);
  EXPECT_EQ(line_at(LineFormat::pep626, marks.data(), marks.size(), 5, 2), 9u);
  // Empty and absent tables.
  EXPECT_EQ(line_at(LineFormat::locations, no_start.data(), 0, 5, 0), 0u);
  EXPECT_EQ(line_at(LineFormat::pep626, nullptr, 10, 5, 0), 0u);
}

}  // namespace
}  // namespace luma::shim::python
