// lifetime_reader.h - turning an input file into lifetimes, with the format detected by
// content (never by file name). Each format is one LifetimeReader; the luma trace reader
// plugs in by implementing the same interface and being passed to read_lifetimes_file.
// Readers throw PlanInputError naming the file, the line and what was expected; they never
// crash or allocate without bound on bad input.
#pragma once

#include <istream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "planner/lifetime.h"

namespace luma::core {

class PlanInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LifetimeReader {
 public:
  virtual ~LifetimeReader() = default;
  // A short name for messages ("planner CSV").
  virtual std::string_view format_name() const = 0;
  // What this format starts with, for the error when no reader accepts a file.
  virtual std::string_view expected_start() const = 0;
  // True when `head` (the first bytes of the input, at most kHeadBytes) is this format.
  virtual bool accepts(std::string_view head) const = 0;
  // Reads the whole input; `source` names it in error messages.
  virtual std::vector<Lifetime> read(std::istream& in, const std::string& source) const = 0;
};

inline constexpr std::size_t kHeadBytes = 4096;

// The readers built into core: planner CSV, RMM log and luma trace.
std::vector<std::unique_ptr<LifetimeReader>> builtin_readers();

// Detects the format of `path` among `readers` and reads it. Throws PlanInputError when
// the file cannot be opened or no reader accepts it (naming the file and the formats).
std::vector<Lifetime> read_lifetimes_file(
    const std::string& path, const std::vector<std::unique_ptr<LifetimeReader>>& readers);

// The same for an in-memory input (tests).
std::vector<Lifetime> read_lifetimes_text(
    std::string_view text, const std::string& source,
    const std::vector<std::unique_ptr<LifetimeReader>>& readers);

}  // namespace luma::core
