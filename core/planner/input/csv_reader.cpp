// csv_reader.cpp - reads MiniMalloc's planner CSV into lifetimes.
#include "planner/input/csv_reader.h"

#include <string>

#include "planner/input/text_fields.h"

namespace luma::core {

namespace {

bool is_csv_header(const std::vector<std::string_view>& f) {
  return (f.size() == 4 || f.size() == 5) && f[0] == "id" && f[1] == "lower" &&
         f[2] == "upper" && f[3] == "size" && (f.size() == 4 || f[4] == "alignment");
}

}  // namespace

bool PlannerCsvReader::accepts(std::string_view head) const {
  return is_csv_header(text::split_commas(text::first_line(head)));
}

std::vector<Lifetime> PlannerCsvReader::read(std::istream& in, const std::string& source) const {
  std::vector<Lifetime> lifetimes;
  std::string line;
  std::size_t line_no = 0;
  std::size_t columns = 0;
  auto fail = [&](const std::string& what) -> void {
    throw PlanInputError(source + ":" + std::to_string(line_no) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view view = line_no == 1 ? text::first_line(line) : text::trim(line);
    if (line_no == 1) {
      auto header = text::split_commas(view);
      if (!is_csv_header(header)) fail("expected the header 'id,lower,upper,size[,alignment]'");
      columns = header.size();
      continue;
    }
    if (view.empty()) continue;  // a trailing blank line is harmless
    auto f = text::split_commas(view);
    if (f.size() != columns)
      fail("expected " + std::to_string(columns) + " fields, found " + std::to_string(f.size()));
    Lifetime lt;
    lt.id = std::string(f[0]);
    if (lt.id.empty()) fail("empty id");
    const char* names[] = {"lower", "upper", "size", "alignment"};
    std::uint64_t values[4] = {0, 0, 0, 1};
    for (std::size_t c = 1; c < columns; ++c) {
      auto v = text::parse_u64(f[c]);
      if (!v) fail(std::string(names[c - 1]) + " is not an unsigned integer: '" +
                   std::string(f[c]) + "'");
      values[c - 1] = *v;
    }
    lt.lower = values[0];
    lt.upper = values[1];
    lt.size = values[2];
    lt.alignment = values[3];
    if (lt.upper < lt.lower) fail("upper (" + std::to_string(lt.upper) + ") is below lower (" +
                                  std::to_string(lt.lower) + ")");
    if (lt.alignment == 0 || (lt.alignment & (lt.alignment - 1)) != 0)
      fail("alignment must be a power of two, got " + std::to_string(lt.alignment));
    // Keep offset + size far from overflow: no real buffer is anywhere near 2^62 bytes.
    if (lt.size > (std::uint64_t{1} << 62) || lt.alignment > (std::uint64_t{1} << 40))
      fail("size or alignment is implausibly large");
    lifetimes.push_back(std::move(lt));
  }
  if (line_no == 0) throw PlanInputError(source + ": empty file");
  return lifetimes;
}

}  // namespace luma::core
