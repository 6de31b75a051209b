// rmm_log_reader.h - RMM's logging_resource_adaptor CSV: header
// `Thread,Time,Action,Pointer,Size,Stream`. Time is the row's index among allocate/free
// rows (the Time column, the wall clock as HH:MM:SS.ffffff, is kept beside it for the
// tools that replay in real time: RmmLog::row_time_ns); a pointer reused after its free is a new buffer; a buffer never freed lives to the
// end of the log; "allocate failure" rows hand nothing out, so they take no time and make
// no lifetime (read_log reports them); freeing an unknown pointer is an error naming its
// line.
#pragma once

#include <optional>
#include <string_view>

#include "planner/input/lifetime_reader.h"

namespace luma::core {

// An "allocate failure" row: `size` bytes were refused just before the allocate/free row
// whose time is `time` (time == rows: after the last one).
struct RmmFailure {
  std::uint64_t time = 0;
  std::uint64_t size = 0;
};

// All an RMM log says, for the tools that turn it back into events. A buffer freed on the
// last row and one never freed both end at `rows`, so lifetimes alone cannot tell them
// apart: `freed` does.
struct RmmLog {
  std::vector<Lifetime> lifetimes;
  std::vector<bool> freed;            // parallel to lifetimes: a free row ended it
  std::vector<RmmFailure> failures;   // in row order
  std::uint64_t rows = 0;             // allocate and free rows: the end of the log's time
  // The Time column of each allocate/free row in ns since the first one, never decreasing
  // (a row logged by another thread a little earlier takes its predecessor's time; a time
  // that goes back by more than 12 hours has passed midnight). Empty when some row's Time
  // is not HH:MM:SS[.fraction]: lifetimes need no clock, so that is no error.
  std::vector<std::uint64_t> row_time_ns;
  // Each allocate/free row's Thread and Stream fields, as the index of the distinct value
  // in `threads` / `streams`, in order of first appearance (what `luma simulate` decides
  // the free path from: core/free_path).
  std::vector<std::uint32_t> row_thread, row_stream;
  std::vector<std::string> threads, streams;
};

// An RMM Time field (HH:MM:SS with up to 9 fraction digits, as spdlog's %H:%M:%S.%f writes
// it) in ns since midnight; nullopt when it is not one.
std::optional<std::uint64_t> parse_rmm_time(std::string_view field);

class RmmLogReader final : public LifetimeReader {
 public:
  std::string_view format_name() const override { return "RMM log"; }
  std::string_view expected_start() const override {
    return "Thread,Time,Action,Pointer,Size,Stream";
  }
  bool accepts(std::string_view head) const override;
  std::vector<Lifetime> read(std::istream& in, const std::string& source) const override;
  // The same reading, with what lifetimes leave out.
  RmmLog read_log(std::istream& in, const std::string& source) const;
};

}  // namespace luma::core
