// live_reader.h - the reading side of a live-statistics record (live_record.h): a
// consistent copy of what a record's bytes hold, from memory the caller mapped read-only.
// Never writes to the record and never makes its writer wait: a slot being written is read
// again (a writer's update takes nanoseconds, but on a busy machine the writer may be
// preempted in the middle of one for a few scheduler periods); one still mid-update after
// `patience` belongs to a writer stopped there (SIGSTOP, a debugger): the record is "busy".
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "live/live_record.h"

namespace luma::core::live {

// One slot's figures, as Slot holds them.
struct SlotValues {
  int device = 0;
  std::uint32_t flags = 0;
  std::uint64_t allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t pending_free_bytes = 0;
  std::uint64_t limit_bytes = 0;
  std::uint64_t oom_count = 0;
};

// A record, copied.
struct RecordView {
  std::uint32_t version = 0;
  unsigned pid = 0;
  unsigned uid = 0;
  std::uint64_t start_time = 0;
  std::uint64_t created_unix_ns = 0;
  std::uint64_t map_address = 0;
  std::uint64_t map_bytes = 0;
  RecordState state = RecordState::making;
  std::string exe;
  std::string group;
  std::string command;
  std::vector<SlotValues> slots;  // the claimed slots (kSlotInUse), in slot order
};

enum class ReadStatus : std::uint8_t {
  ok,
  damaged,  // not a record of this layout (error says what is wrong)
  busy,     // a slot stayed mid-write while it was read (its writer is stopped)
};

struct ReadResult {
  ReadStatus status = ReadStatus::damaged;
  std::string error;  // a phrase naming what is wrong, for status != ok
  RecordView record;
};

// Reads the record in `base` (`size` bytes mapped). Throws only std::bad_alloc.
ReadResult read_record(const void* base, std::size_t size,
                       std::chrono::milliseconds patience = std::chrono::milliseconds(1000));

}  // namespace luma::core::live
