// lifetime_reader.cpp - format detection by content and dispatch to the matching reader.
#include "planner/input/lifetime_reader.h"

#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "planner/input/csv_reader.h"
#include "planner/input/rmm_log_reader.h"
#include "planner/input/trace_lifetime_reader.h"

namespace luma::core {

std::vector<std::unique_ptr<LifetimeReader>> builtin_readers() {
  std::vector<std::unique_ptr<LifetimeReader>> readers;
  readers.push_back(std::make_unique<PlannerCsvReader>());
  readers.push_back(std::make_unique<RmmLogReader>());
  readers.push_back(std::make_unique<TraceLifetimeReader>());
  return readers;
}

namespace {

const LifetimeReader& pick_reader(std::string_view head, const std::string& source,
                                  const std::vector<std::unique_ptr<LifetimeReader>>& readers) {
  for (const auto& reader : readers)
    if (reader->accepts(head)) return *reader;
  std::string expected;
  for (const auto& reader : readers) {
    if (!expected.empty()) expected += "; or ";
    expected += std::string(reader->format_name()) + " starting with '" +
                std::string(reader->expected_start()) + "'";
  }
  throw PlanInputError(source + ": unrecognised input format: expected " + expected);
}

// Every planner adds offsets and sizes, and the checker doubles times: keep all of it far
// from overflow. No real run holds anywhere near 2^62 bytes (4 EiB) or lasts 2^62 time
// units, so an input beyond either is refused here rather than planned wrongly.
constexpr std::uint64_t kMaxPlannable = std::uint64_t{1} << 62;

std::vector<Lifetime> checked(std::vector<Lifetime> lifetimes, const std::string& source) {
  std::uint64_t total = 0;
  for (const Lifetime& lt : lifetimes) {
    if (lt.upper > kMaxPlannable)
      throw PlanInputError(source + ": buffer '" + lt.id + "' has a time beyond 2^62 (" +
                           std::to_string(lt.upper) + ")");
    const std::uint64_t padded = lt.size + (lt.alignment > 0 ? lt.alignment - 1 : 0);
    if (padded < lt.size || padded > kMaxPlannable - total)
      throw PlanInputError(source + ": the buffers' sizes add up to more than 2^62 bytes "
                           "(at buffer '" + lt.id + "'): no arena could hold them");
    total += padded;
  }
  return lifetimes;
}

}  // namespace

std::vector<Lifetime> read_lifetimes_file(
    const std::string& path, const std::vector<std::unique_ptr<LifetimeReader>>& readers) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw PlanInputError(path + ": is a directory");
    // A pipe or a device can be read only once: the format check must not consume it.
    std::ifstream in(path, std::ios::binary);
    if (!in) throw PlanInputError(path + ": cannot open the file");
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) throw PlanInputError(path + ": read error");
    return read_lifetimes_text(text, path, readers);  // checked there
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PlanInputError(path + ": cannot open the file");
  std::string head(kHeadBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw PlanInputError(path + ": read error");
  const LifetimeReader& reader = pick_reader(head, path, readers);
  in.clear();
  in.seekg(0);
  return checked(reader.read(in, path), path);
}

std::vector<Lifetime> read_lifetimes_text(
    std::string_view text, const std::string& source,
    const std::vector<std::unique_ptr<LifetimeReader>>& readers) {
  const LifetimeReader& reader = pick_reader(text.substr(0, kHeadBytes), source, readers);
  std::istringstream in{std::string(text)};
  return checked(reader.read(in, source), source);
}

}  // namespace luma::core
