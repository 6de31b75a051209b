// live_record.h - the live-statistics record: what one process under luma shows about
// its device memory while it runs (`luma top`, `luma exporter`), in a small file of
// shared memory (docs/live-record.md is the specification: layout, versioning, the
// sequence-lock protocol, the liveness rule). This header is that layout, written once:
// the writer (live_writer.h, in libluma.so) and the reader (live_reader.h, in the tool)
// both use it.
//
// Plain words at fixed offsets (static_asserts below), native byte order (a record is
// read on the machine that wrote it). Every word another process may read while it
// changes is a lock-free std::atomic of its plain size, so a mapping of the file is the
// struct itself; all-zero bytes are an empty slot.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace luma::core::live {

inline constexpr std::uint64_t kMagic = 0x6576696c'616d756cULL;  // "lumalive" in memory
// The layout's version: a reader refuses another (never misreads it). Fields added in
// the reserved bytes of the header or of a slot, which older readers may ignore, keep
// the version; anything else changes it.
inline constexpr std::uint32_t kVersion = 1;
// Allocators (one per CUDA context) a process publishes at once; a destroyed context's
// slot is taken over by the next allocator of its device (live_writer.h).
inline constexpr std::uint32_t kSlots = 64;

inline constexpr std::size_t kExeBytes = 64;       // the executable's name, NUL-padded
inline constexpr std::size_t kGroupBytes = 72;     // limit_group names are 1..64 bytes
inline constexpr std::size_t kCommandBytes = 256;  // the command line, cut, NUL-padded

// The record's state (Header::state).
enum class RecordState : std::uint32_t {
  making = 0,  // being laid out (never seen under the record's name: it is renamed there)
  live = 1,    // the process publishes
  closed = 2,  // the process is exiting; the file is being removed
};

struct Header {
  std::uint64_t magic;          // kMagic
  std::uint32_t version;        // kVersion
  std::uint32_t header_bytes;   // sizeof(Header): where the slots begin
  std::uint32_t slot_bytes;     // sizeof(Slot)
  std::uint32_t slot_count;     // kSlots
  std::uint32_t pid;            // the publishing process
  std::uint32_t uid;            // its effective user id
  std::uint64_t start_time;     // its start time (/proc/PID/stat field 22, clock ticks since boot)
  std::uint64_t created_unix_ns;  // when it published (CLOCK_REALTIME)
  std::uint64_t map_address;    // where the process mapped this record, and how many bytes:
  std::uint64_t map_bytes;      //   /proc/PID/map_files/<from>-<to> exists while it does
  std::atomic<std::uint32_t> state;       // RecordState
  std::atomic<std::uint32_t> slots_used;  // slots [0, slots_used) have been claimed
  char exe[kExeBytes];
  char group[kGroupBytes];      // limit_group in use ("" for none, or the group table failed)
  char command[kCommandBytes];  // argv joined by spaces
  std::uint8_t reserved[512 - 464];
};

// Slot flags.
inline constexpr std::uint32_t kSlotInUse = 1u << 0;     // claimed by an allocator
inline constexpr std::uint32_t kSlotHasLimit = 1u << 1;  // limit_bytes applies
inline constexpr std::uint32_t kSlotGroupLimit = 1u << 2;  // the limit is the group's budget

// One allocator's figures (bytes are the allocator's rounded sizes, as its statistics).
// Written by one thread at a time (under the allocator's lock) inside a sequence lock:
// seq is odd while a write is underway; a reader keeps what it read only if seq was the
// same even number before and after (docs/live-record.md).
struct alignas(64) Slot {
  std::atomic<std::uint64_t> seq;
  std::atomic<std::int32_t> device;   // the CUDA device index
  std::atomic<std::uint32_t> flags;   // kSlot*
  std::atomic<std::uint64_t> allocated_bytes;  // held by the program
  std::atomic<std::uint64_t> reserved_bytes;   // reserved from the driver (segments, arenas)
  std::atomic<std::uint64_t> peak_allocated_bytes;
  std::atomic<std::uint64_t> peak_reserved_bytes;
  std::atomic<std::uint64_t> pending_free_bytes;  // freed by the program, fence not yet done
  std::atomic<std::uint64_t> limit_bytes;      // the device's memory limit (kSlotHasLimit)
  std::atomic<std::uint64_t> oom_count;        // allocations failed with out-of-memory
  std::uint8_t reserved[128 - 72];
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4);
static_assert(sizeof(Header) == 512);
static_assert(offsetof(Header, state) == 64 && offsetof(Header, exe) == 72 &&
              offsetof(Header, group) == 136 && offsetof(Header, command) == 208);
static_assert(sizeof(Slot) == 128);
static_assert(offsetof(Slot, allocated_bytes) == 16 && offsetof(Slot, oom_count) == 64);

// The whole record: the header, then kSlots slots.
inline constexpr std::size_t kRecordBytes = sizeof(Header) + kSlots * sizeof(Slot);

inline Slot* slot_at(void* base, std::uint32_t i) noexcept {
  return reinterpret_cast<Slot*>(static_cast<unsigned char*>(base) + sizeof(Header)) + i;
}
inline const Slot* slot_at(const void* base, std::uint32_t i) noexcept {
  return reinterpret_cast<const Slot*>(static_cast<const unsigned char*>(base) + sizeof(Header)) + i;
}

// The directory records live in unless LUMA_LIVE_DIR names another.
inline constexpr const char* kDefaultDir = "/dev/shm";

// A record's file name: "luma-live.UID.PID" (the uid first, so a reader lists its own).
std::string record_file_name(unsigned uid, unsigned pid);
// The uid and pid a record's file name holds; nullopt for any other name.
struct RecordName {
  unsigned uid = 0;
  unsigned pid = 0;
};
std::optional<RecordName> parse_record_file_name(std::string_view name);

}  // namespace luma::core::live
