// trace_format.h - the luma trace file format (docs/trace-format.md is its specification):
// the header block, the 24-byte slot and how each record kind is packed into slots, the
// per-slot check value. Shared by the writer and the reader so the two can never disagree.
// Pure functions and constants only: no I/O, no allocation, no platform calls.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/constants.h"
#include "base/event.h"

namespace luma::core::trace {

static_assert(std::endian::native == std::endian::little,
              "the trace is little-endian and written by plain stores");

// "LUMATRC" + a version-independent tag byte; a text file never starts with it.
inline constexpr char kMagic[8] = {'L', 'U', 'M', 'A', 'T', 'R', 'C', '\x01'};
// Version 2 adds the forwarded_call record, the python_stack_def record and the Python
// stack id in a callsite's second word; a reader of version 2 reads version 1
// (kOldestFormatVersion) unchanged (a version-1 trace simply has none of them).
inline constexpr std::uint32_t kFormatVersion = 2;
inline constexpr std::uint32_t kOldestFormatVersion = 1;

// Every record is made of fixed 24-byte slots: one slot per ordinary event, which is the
// format's bound ("at most 24 bytes per event", docs/trace-format.md). Fixed slots let the
// writer claim a place with one atomic add (slot index == global sequence number) and let a
// reader find the valid prefix of a killed process's file without a footer: an unwritten
// slot is zero.
inline constexpr std::size_t kSlotBytes = 24;
// The file grows by chunks of 2^18 slots (6 MiB, a multiple of the page size); each chunk
// is one MAP_SHARED mapping. 2^14 chunks (96 GiB, 4.3e9 slots) keep the mapping count
// under Linux's default vm.max_map_count (65530) with room to spare.
inline constexpr std::uint32_t kChunkSlotsLog2 = 18;
inline constexpr std::uint64_t kChunkSlots = std::uint64_t{1} << kChunkSlotsLog2;
inline constexpr std::uint64_t kChunkBytes = kChunkSlots * kSlotBytes;
inline constexpr std::uint64_t kMaxChunks = std::uint64_t{1} << 14;
inline constexpr std::uint64_t kMaxSlots = kChunkSlots * kMaxChunks;
// The header block is padded to this so that chunk mappings start page-aligned.
inline constexpr std::size_t kHeaderAlign = 4096;
static_assert(kChunkBytes % kHeaderAlign == 0, "chunks must map at page offsets");

// Header block layout (all little-endian), see docs/trace-format.md.
inline constexpr std::size_t kOffMagic = 0;        // 8 bytes
inline constexpr std::size_t kOffVersion = 8;      // u32 format version
inline constexpr std::size_t kOffHeaderBytes = 12; // u32 size of the padded header block
inline constexpr std::size_t kOffFieldsBytes = 16; // u32 bytes of tagged fields
inline constexpr std::size_t kOffHeaderCrc = 20;   // u32 CRC-32 of [0, 48+fields)
inline constexpr std::size_t kOffSlotBytes = 24;   // u32 = 24
inline constexpr std::size_t kOffChunkSlots = 28;  // u32 = 2^18
inline constexpr std::size_t kOffCloseSlots = 32;  // u64 slots used, written at close
inline constexpr std::size_t kOffCloseCheck = 40;  // u64 close_check(slots)
inline constexpr std::size_t kFixedHeaderBytes = 48;
// A header larger than this is refused (the mappings text of a big process is ~100 KiB).
inline constexpr std::size_t kMaxHeaderBytes = 64u << 20;

// Tagged header fields: u16 tag, u32 length, then length bytes.
enum class FieldTag : std::uint16_t {
  luma_version = 1,   // UTF-8 text
  pid = 2,            // u64
  host = 3,           // text
  command_line = 4,   // the arguments, each followed by a NUL byte
  start_unix_ns = 5,  // u64 wall-clock time at open (ns since 1970)
  clock_base_ns = 6,  // u64 the clock reading that event times are relative to
  device = 7,         // u32 index, u64 total bytes, then the name (text); repeated
  settings = 8,       // text, LUMA_CONF form
  stack_depth = 9,    // u32 most return addresses recorded per alloc (0: none)
  mappings = 10,      // text, /proc/self/maps of the process at open
};

// Slot kinds: the low 4 bits of the first byte. 0 is never written (an empty slot).
enum class SlotKind : std::uint8_t {
  empty = 0,
  // 1..7 are core::EventKind values, packed "narrow" (see encode_narrow).
  thread_def = 8,    // id (12 bits) -> the writer's thread id (u64)
  stream_def = 9,    // id (12 bits) -> the stream handle (u64)
  callsite = 10,     // stack id (u32) of the event in the NEXT slot; since version 2 the
                     // second word is its Python stack id (0: none)
  blob_head = 11,    // a byte string spread over this and continuation slots
  blob_cont = 12,
};
inline constexpr std::uint8_t kMaxEventKind = 7;

enum class BlobType : std::uint8_t {
  wide_event = 1,  // an event whose fields do not fit one slot (kWideEventBytes)
  stack_def = 2,   // u32 id, u32 n, n x u64 return addresses
  forwarded_call = 3,  // (version 2) a call luma forwarded to the driver: see below
  // Version 2: u32 id, u32 n, then n frames, innermost first, each u32 line, u16 file
  // bytes, u16 function bytes, the file name, the function name (UTF-8, not terminated).
  python_stack_def = 4,
};
// Python frames per allocation and bytes per name are bounded so that a record is at most
// 8 + 64 x (8 + 2 x 1024) bytes and a damaged length is caught before it sizes anything.
inline constexpr std::uint32_t kMaxPythonFrames = 64;
inline constexpr std::uint32_t kMaxPythonNameBytes = 1024;
inline constexpr std::uint32_t kPythonFrameFixedBytes = 8;
inline constexpr std::uint32_t kMaxPythonStackBytes =
    8 + kMaxPythonFrames * (kPythonFrameFixedBytes + 2 * kMaxPythonNameBytes);
inline constexpr std::size_t kBlobHeadData = 17;  // data bytes in the head slot
inline constexpr std::size_t kBlobContData = 21;  // data bytes in each continuation
inline constexpr std::size_t kWideEventBytes = 56;
// Stacks longer than this are cut (and a stack_def blob stays a few hundred bytes).
inline constexpr std::uint32_t kMaxStackDepth = 128;

inline constexpr std::uint64_t blob_slots(std::uint64_t length) noexcept {
  return length <= kBlobHeadData ? 1 : 1 + (length - kBlobHeadData + kBlobContData - 1) /
                                               kBlobContData;
}

// forwarded_call (version 2): an allocation call luma does not serve but forwards to the
// driver (stream-ordered pools, managed and pinned host memory, virtual memory), recorded
// once the driver succeeded. kForwardedCallBytes of fixed fields, then the path's name
// (the shim's name of the group of calls it counts together, 1..kMaxForwardedPathBytes):
//   u8 op (ForwardedOp), u8 entry (ForwardedEntry), u16 0, u32 0,
//   u64 thread, u64 stream (0: none), u64 time (ns since the clock base),
//   u64 address (the pointer or mapped address; 0: none or unknown),
//   u64 bytes (0: unknown), u64 handle (a cuMemCreate handle; 0: none)
inline constexpr std::size_t kForwardedCallBytes = 56;
inline constexpr std::size_t kMaxForwardedPathBytes = 64;

enum class ForwardedOp : std::uint8_t {
  alloc = 1,  // memory came into being (its bytes)
  free = 2,   // memory went (bytes when the call names them, else 0)
  map = 3,    // cuMemMap: a range of a handle's memory mapped at an address
  unmap = 4,  // cuMemUnmap
};
inline constexpr std::uint8_t kMaxForwardedOp = 4;

// X(name, value): the driver entry points a forwarded_call may name. Values are the format:
// never renumber one.
// clang-format off
#define LUMA_FORWARDED_ENTRIES(X) \
  X(unknown, 0) \
  X(cuMemAllocAsync, 1) \
  X(cuMemAllocFromPoolAsync, 2) \
  X(cuMemFreeAsync, 3) \
  X(cuMemAllocManaged, 4) \
  X(cuMemFree, 5) \
  X(cuMemAllocHost, 6) \
  X(cuMemHostAlloc, 7) \
  X(cuMemFreeHost, 8) \
  X(cuMemCreate, 9) \
  X(cuMemRelease, 10) \
  X(cuMemMap, 11) \
  X(cuMemUnmap, 12)
// clang-format on
enum class ForwardedEntry : std::uint8_t {
#define LUMA_X(name, value) name = value,
  LUMA_FORWARDED_ENTRIES(LUMA_X)
#undef LUMA_X
};
inline constexpr std::uint8_t kForwardedEntries = 0
#define LUMA_X(name, value) +1
    LUMA_FORWARDED_ENTRIES(LUMA_X)
#undef LUMA_X
    ;

// One forwarded_call record, as written and as read.
struct ForwardedCall {
  std::uint64_t seq = 0;  // read: the record's slot (the writer's global order)
  ForwardedOp op = ForwardedOp::alloc;
  ForwardedEntry entry = ForwardedEntry::unknown;
  std::string_view path;  // read: valid during the callback only
  std::uint64_t thread = 0, stream = 0, time_ns = 0, address = 0, bytes = 0, handle = 0;
};
std::string_view forwarded_entry_name(ForwardedEntry e) noexcept;
std::string_view forwarded_op_name(ForwardedOp op) noexcept;  // "alloc", "free", "map", "unmap"

// Which API call led to the event; chosen by the shim, named by the tools.
enum class EntryPoint : std::uint8_t {
  unknown = 0,
  cudaMalloc = 1,
  cudaFree = 2,
  cudaMallocAsync = 3,
  cudaFreeAsync = 4,
  cudaMallocFromPoolAsync = 5,
  cudaMallocManaged = 6,
  cudaMallocPitch = 7,
  cuMemAlloc = 8,
  cuMemFree = 9,
  cuMemAllocAsync = 10,
  cuMemFreeAsync = 11,
  cuMemAllocPitch = 12,
  cuMemAllocManaged = 13,
  empty_cache = 14,  // reserved for a call of luma's own empty_cache: no such call exists
                     // in libluma.so today (out-of-memory releases carry the allocation's
                     // entry point), so luma writes none; readers name it (the format and
                     // the golden traces keep the value)
  internal = 15,     // the allocator on its own (fence completion, exit)
};
inline constexpr std::uint8_t kEntryPoints = 16;
std::string_view entry_point_name(EntryPoint e) noexcept;
std::string_view event_kind_name(EventKind k) noexcept;  // "alloc", "free_requested", ...

// The largest device index a trace may name (an event's, or the header's device list).
// CUDA numbers the devices a process sees from 0, and no machine has thousands; a bigger
// index is a damaged or forged trace, refused so that a reader never sizes anything by it
// (an export that keeps one list per device up to the largest would write gigabytes).
inline constexpr std::int64_t kMaxTraceDevice = 4095;

// Narrow event field limits. An event outside them is written as a wide_event blob.
inline constexpr unsigned kDeviceBits = 6;   // devices 0..63
inline constexpr unsigned kEntryBits = 5;
inline constexpr unsigned kIdBits = 12;      // interned thread and stream ids: 4096 each
inline constexpr unsigned kSlackBits = 13;   // requested encoded against size, see below
inline constexpr unsigned kTimeBits = 48;    // ns since clock base: 78 hours
inline constexpr unsigned kAddressBits = 44; // address / 256: addresses below 2^52
inline constexpr unsigned kSizeBits = 32;    // size / 256: sizes below 1 TiB
// The unit of a narrow event's address and size is cudaMalloc's alignment (the format
// shifts by 8: changing either would change the format).
static_assert(kCudaMallocAlignment == std::size_t{1} << 8, "narrow events count in 256-byte units");
inline constexpr std::uint64_t kIds = std::uint64_t{1} << kIdBits;
static_assert(4 + kDeviceBits + kEntryBits + 2 * kIdBits + kSlackBits + kTimeBits +
                      kAddressBits + kSizeBits + 16 ==
                  kSlotBytes * 8,
              "a narrow event fills exactly one slot");

constexpr std::uint64_t mask(unsigned bits) noexcept {
  return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
}

// One event as stored: ids instead of thread/stream values.
struct NarrowFields {
  std::uint8_t kind = 0;
  std::uint8_t device = 0;
  std::uint8_t entry = 0;
  std::uint16_t thread_id = 0;
  std::uint16_t stream_id = 0;
  std::uint64_t time = 0;
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t requested = 0;
};

// "requested" is stored as R: 0 means requested == 0 (frees, segments), otherwise
// requested = size - (R - 1): the rounding slack, below 8191 bytes in every allocator
// whose alignment and min_split are small.
inline constexpr bool fits_narrow(const NarrowFields& f) noexcept {
  return f.device < (1u << kDeviceBits) && f.time <= mask(kTimeBits) &&
         (f.address & 255) == 0 && (f.address >> 8) <= mask(kAddressBits) &&
         (f.size & 255) == 0 && (f.size >> 8) <= mask(kSizeBits) &&
         (f.requested == 0 ||
          (f.requested <= f.size && f.size - f.requested < mask(kSlackBits)));
}

// The check: 16 bits mixing the three words (check bits zero) and the slot index, never
// zero, so that the third word (written last) is non-zero exactly when the slot is
// committed, and a record moved to another slot fails its check.
inline constexpr std::uint64_t kCheckMask = ~(mask(16) << 48);
inline constexpr std::uint16_t slot_check(std::uint64_t w0, std::uint64_t w1, std::uint64_t w2,
                                          std::uint64_t slot) noexcept {
  std::uint64_t h = w0 * 0x9E3779B97F4A7C15ull;
  h ^= (w1 + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
  h ^= ((w2 & kCheckMask) + slot) * 0x165667B19E3779F9ull;
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  auto c = static_cast<std::uint16_t>(h >> 48);
  return c == 0 ? 1 : c;
}
inline constexpr std::uint64_t with_check(std::uint64_t w0, std::uint64_t w1, std::uint64_t w2,
                                          std::uint64_t slot) noexcept {
  return (w2 & kCheckMask) | (std::uint64_t{slot_check(w0, w1, w2, slot)} << 48);
}

// Narrow layout (bit 0 = least significant):
//   w0: kind 0-3 | device 4-9 | entry 10-14 | thread 15-26 | stream 27-38 | R 39-51 |
//       size/256 bits 20-31 in 52-63
//   w1: time 0-47 | size/256 bits 0-15 in 48-63
//   w2: address/256 0-43 | size/256 bits 16-19 in 44-47 | check 48-63
struct Words {
  std::uint64_t w0, w1, w2;
};

inline constexpr Words encode_narrow(const NarrowFields& f) noexcept {
  const std::uint64_t units = f.size >> 8;
  const std::uint64_t r = f.requested == 0 ? 0 : f.size - f.requested + 1;
  Words w{};
  w.w0 = std::uint64_t{f.kind} | std::uint64_t{f.device} << 4 | std::uint64_t{f.entry} << 10 |
         std::uint64_t{f.thread_id} << 15 | std::uint64_t{f.stream_id} << 27 | r << 39 |
         (units >> 20) << 52;
  w.w1 = f.time | (units & 0xFFFF) << 48;
  w.w2 = (f.address >> 8) | ((units >> 16) & 0xF) << 44;
  return w;
}

inline constexpr NarrowFields decode_narrow(const Words& w) noexcept {
  NarrowFields f;
  f.kind = static_cast<std::uint8_t>(w.w0 & 0xF);
  f.device = static_cast<std::uint8_t>((w.w0 >> 4) & mask(kDeviceBits));
  f.entry = static_cast<std::uint8_t>((w.w0 >> 10) & mask(kEntryBits));
  f.thread_id = static_cast<std::uint16_t>((w.w0 >> 15) & mask(kIdBits));
  f.stream_id = static_cast<std::uint16_t>((w.w0 >> 27) & mask(kIdBits));
  const std::uint64_t r = (w.w0 >> 39) & mask(kSlackBits);
  const std::uint64_t units =
      (w.w1 >> 48) | ((w.w2 >> 44) & 0xF) << 16 | (w.w0 >> 52) << 20;
  f.time = w.w1 & mask(kTimeBits);
  f.address = (w.w2 & mask(kAddressBits)) << 8;
  f.size = units << 8;
  f.requested = r == 0 ? 0 : f.size - (r - 1);
  return f;
}

// Definitions: w0 = kind | id << 4 (thread/stream) or kind | stack id << 4 (callsite);
// w1 = value (callsite: the Python stack id, version 2); w2 = check only.
inline constexpr std::uint64_t close_check(std::uint64_t slots) noexcept {
  std::uint64_t h = (slots ^ 0x4C554D41434C4F53ull) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;

}  // namespace luma::core::trace
