// trace_reader.h - reads a trace file: validates the header, every slot's check, every
// id and length, and hands the events to a callback in file (= sequence) order.
//
// Bad input of any kind (foreign, a cut header, corrupted) ends in one TraceError naming
// the file and the byte offset; nothing read from the file sizes an allocation beyond what
// the file itself can hold. The file is memory-mapped, read once, front to back.
// A trace its writer never closed (the process was killed) is read up to its last
// committed slot; slots claimed but never committed by threads that died mid-write are
// counted in unwritten_slots and skipped.
// A trace cut short after its header (a copy that stopped, a disk that filled) is read up
// to the cut, and truncation() says how much is missing; a record the cut splits is not
// part of what is read (docs/trace-format.md, "Truncated files").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/event.h"
#include "trace/trace_format.h"
#include "trace/trace_header.h"

namespace luma::core {

struct TraceEvent {
  std::uint64_t seq = 0;    // slot index: the writer's global order
  std::uint64_t index = 0;  // position among the trace's events, from 0
  EventKind kind = EventKind::alloc;
  trace::EntryPoint entry = trace::EntryPoint::unknown;
  int device = 0;
  std::uint64_t thread = 0;
  std::uint64_t stream = 0;
  std::uint64_t time_ns = 0;  // since the header's clock base
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t requested = 0;
  std::uint32_t stack = 0;  // call-site stack id (TraceReader::stack), 0: none
  std::uint32_t python_stack = 0;  // Python stack id (TraceReader::python_stack), 0: none
};

// One Python frame of a call site (format version 2).
struct TracePythonFrame {
  std::string file;
  std::string function;
  std::uint32_t line = 0;
};

struct TraceReadSummary {
  std::uint64_t events = 0;
  std::uint64_t slots = 0;            // slots up to the last committed one
  std::uint64_t unwritten_slots = 0;  // claimed but never committed (writer killed)
  std::uint64_t stacks = 0;
  std::uint64_t python_stacks = 0;
  std::uint64_t forwarded_calls = 0;  // forwarded_call records (version 2)
};

// What a trace cut short after its header lacks. A closed trace's header says how long
// it was, so the loss is exact; an unfinished one grows by whole chunks, so the cut only
// bounds it: the rest of the chunk the file ends in may or may not have held events.
struct TraceTruncation {
  bool truncated = false;
  bool exact = false;                // closed trace: expected_bytes is what the writer wrote
  std::uint64_t file_bytes = 0;      // what the file holds
  std::uint64_t expected_bytes = 0;  // exact, or the end of the chunk the file ends in
  std::uint64_t lost_slots = 0;      // slots past the last whole one (exact or at most);
                                     // each lost event had at least one of them
  std::uint64_t missing_bytes() const noexcept { return expected_bytes - file_bytes; }
  // One line: what is missing and what was read ("" when not truncated).
  std::string describe() const;
};

class TraceReader {
 public:
  using EventFn = std::function<void(const TraceEvent&)>;
  // Called now and then with (bytes read, bytes in all).
  using ProgressFn = std::function<void(std::uint64_t, std::uint64_t)>;

  // Maps and checks the header of `path`. Throws TraceError.
  explicit TraceReader(const std::string& path);
  // Reads from memory (tests); `source` names it in errors.
  TraceReader(std::string bytes, std::string source);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const TraceHeader& header() const noexcept { return parsed_.header; }
  bool closed_cleanly() const noexcept { return parsed_.closed; }
  const std::string& source() const noexcept { return source_; }
  std::uint64_t file_bytes() const noexcept { return data_.size(); }
  // Whether the file was cut short after its header, and how much is missing.
  const TraceTruncation& truncation() const noexcept { return truncation_; }

  // Reads every record, calling on_event for each event (and the forwarded-call handler,
  // when one is set, for each forwarded_call record, in the same file order). Throws
  // TraceError. May be called again (it reads from the start, and delivers everything again).
  TraceReadSummary read(const EventFn& on_event, const ProgressFn& progress = {});

  // Calls luma forwarded to the driver (format version 2): read() skips them unless a
  // handler is set here.
  using ForwardedFn = std::function<void(const trace::ForwardedCall&)>;
  void set_forwarded_handler(ForwardedFn fn) { on_forwarded_ = std::move(fn); }

  // The frames of a call-site stack seen so far (innermost first); empty for id 0.
  const std::vector<std::uint64_t>& stack(std::uint32_t id) const noexcept;
  std::size_t stack_count() const noexcept { return stacks_.size(); }
  // The Python frames of a Python stack seen so far (innermost first); empty for id 0.
  const std::vector<TracePythonFrame>& python_stack(std::uint32_t id) const noexcept;
  std::size_t python_stack_count() const noexcept { return python_stacks_.size(); }

  // True when `head` (the first bytes of a file) is a luma trace.
  static bool accepts(std::string_view head) noexcept { return trace::has_trace_magic(head); }

 private:
  void init();

  std::string source_;
  std::string owned_;  // in-memory input
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  std::string_view data_;
  trace::ParsedHeader parsed_;
  std::uint64_t slots_ = 0;  // whole slots to read
  TraceTruncation truncation_;
  std::vector<std::vector<std::uint64_t>> stacks_;
  std::vector<std::vector<TracePythonFrame>> python_stacks_;
  ForwardedFn on_forwarded_;
};

// Reads the whole trace into memory (small traces, tests).
std::vector<TraceEvent> read_all_events(TraceReader& reader);

}  // namespace luma::core
