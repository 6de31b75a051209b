// trace_header.cpp - encodes and validates the header block. Every length read from the
// file is checked against the bytes that remain before it is used, so a foreign or damaged
// file can only produce a TraceError, never a crash or a large allocation.
#include "trace/trace_header.h"

#include <cstring>

#include "trace/trace_format.h"

namespace luma::core {

TraceError::TraceError(const std::string& source, std::uint64_t offset, const std::string& what)
    : std::runtime_error(source + ": at byte " + std::to_string(offset) + ": " + what),
      offset_(offset) {}

namespace trace {
namespace {

void put_u16(std::string& out, std::uint16_t v) { out.append(reinterpret_cast<char*>(&v), 2); }
void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<char*>(&v), 4); }
void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<char*>(&v), 8); }

void put_field(std::string& out, FieldTag tag, std::string_view bytes) {
  put_u16(out, static_cast<std::uint16_t>(tag));
  put_u32(out, static_cast<std::uint32_t>(bytes.size()));
  out.append(bytes);
}
std::string u64_bytes(std::uint64_t v) { return std::string(reinterpret_cast<char*>(&v), 8); }
std::string u32_bytes(std::uint32_t v) { return std::string(reinterpret_cast<char*>(&v), 4); }

template <class T>
T load(std::string_view s, std::size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

}  // namespace

bool has_trace_magic(std::string_view head) noexcept {
  return head.size() >= sizeof kMagic && std::memcmp(head.data(), kMagic, sizeof kMagic) == 0;
}

std::string encode_header(const TraceHeader& h) {
  std::string fields;
  put_field(fields, FieldTag::luma_version, h.luma_version);
  put_field(fields, FieldTag::pid, u64_bytes(h.pid));
  put_field(fields, FieldTag::host, h.host);
  std::string args;
  for (const auto& a : h.command_line) {
    args += a;
    args.push_back('\0');
  }
  put_field(fields, FieldTag::command_line, args);
  put_field(fields, FieldTag::start_unix_ns, u64_bytes(h.start_unix_ns));
  put_field(fields, FieldTag::clock_base_ns, u64_bytes(h.clock_base_ns));
  for (const auto& d : h.devices)
    put_field(fields, FieldTag::device, u32_bytes(d.index) + u64_bytes(d.total_bytes) + d.name);
  put_field(fields, FieldTag::settings, h.settings);
  put_field(fields, FieldTag::stack_depth, u32_bytes(h.stack_depth));
  if (!h.mappings.empty()) put_field(fields, FieldTag::mappings, h.mappings);

  std::string out(kMagic, sizeof kMagic);
  put_u32(out, kFormatVersion);
  const std::size_t used = kFixedHeaderBytes + fields.size();
  const std::size_t padded = (used + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
  put_u32(out, static_cast<std::uint32_t>(padded));
  put_u32(out, static_cast<std::uint32_t>(fields.size()));
  put_u32(out, 0);  // CRC, below
  put_u32(out, static_cast<std::uint32_t>(kSlotBytes));
  put_u32(out, static_cast<std::uint32_t>(kChunkSlots));
  put_u64(out, 0);  // close: slots
  put_u64(out, 0);  // close: check
  out += fields;
  const std::uint32_t crc = crc32(out.data(), out.size());
  std::memcpy(out.data() + kOffHeaderCrc, &crc, 4);
  out.resize(padded, '\0');
  return out;
}

ParsedHeader parse_header(std::string_view file, const std::string& source) {
  auto fail = [&](std::uint64_t at, const std::string& what) -> void {
    throw TraceError(source, at, what);
  };
  if (file.size() < sizeof kMagic || !has_trace_magic(file)) {
    if (file.empty()) fail(0, "empty file, not a luma trace");
    fail(0, "not a luma trace (no LUMATRC magic)");
  }
  if (file.size() < kFixedHeaderBytes)
    fail(file.size(), "truncated: the fixed header needs " + std::to_string(kFixedHeaderBytes) +
                          " bytes, the file has " + std::to_string(file.size()));
  ParsedHeader p;
  p.header.format_version = load<std::uint32_t>(file, kOffVersion);
  if (p.header.format_version < kOldestFormatVersion || p.header.format_version > kFormatVersion)
    fail(kOffVersion, "format version " + std::to_string(p.header.format_version) +
                          " is not supported (this luma reads versions " +
                          std::to_string(kOldestFormatVersion) + " to " +
                          std::to_string(kFormatVersion) + ")");
  const auto header_bytes = load<std::uint32_t>(file, kOffHeaderBytes);
  const auto fields_bytes = load<std::uint32_t>(file, kOffFieldsBytes);
  if (load<std::uint32_t>(file, kOffSlotBytes) != kSlotBytes)
    fail(kOffSlotBytes, "slot size is not " + std::to_string(kSlotBytes));
  if (load<std::uint32_t>(file, kOffChunkSlots) != kChunkSlots)
    fail(kOffChunkSlots, "chunk size is not " + std::to_string(kChunkSlots) + " slots");
  if (header_bytes % kHeaderAlign != 0 || header_bytes > kMaxHeaderBytes ||
      std::uint64_t{kFixedHeaderBytes} + fields_bytes > header_bytes)
    fail(kOffHeaderBytes, "header size " + std::to_string(header_bytes) + " with " +
                              std::to_string(fields_bytes) + " bytes of fields is invalid");
  if (header_bytes > file.size())
    fail(file.size(), "truncated inside the header (it has " + std::to_string(header_bytes) +
                          " bytes, the file " + std::to_string(file.size()) + ")");
  // CRC over the fixed part and the fields, with the CRC and the close fields as zero.
  {
    std::string copy(file.substr(0, kFixedHeaderBytes + fields_bytes));
    std::memset(copy.data() + kOffHeaderCrc, 0, 4);
    std::memset(copy.data() + kOffCloseSlots, 0, 16);
    if (crc32(copy.data(), copy.size()) != load<std::uint32_t>(file, kOffHeaderCrc))
      fail(kOffHeaderCrc, "header checksum mismatch: the header is corrupted");
  }
  const auto close_slots = load<std::uint64_t>(file, kOffCloseSlots);
  const auto close_chk = load<std::uint64_t>(file, kOffCloseCheck);
  if (close_slots != 0 || close_chk != 0) {
    if (close_chk != close_check(close_slots) || close_slots > kMaxSlots)
      fail(kOffCloseSlots, "close record is corrupted");
    p.closed = true;
    p.closed_slots = close_slots;
  }
  p.header_bytes = header_bytes;
  for (std::size_t i = kFixedHeaderBytes + fields_bytes; i < header_bytes; ++i)
    if (file[i] != '\0') fail(i, "non-zero byte in the header's padding");

  std::size_t at = kFixedHeaderBytes;
  const std::size_t end = kFixedHeaderBytes + fields_bytes;
  while (at < end) {
    if (end - at < 6) fail(at, "truncated header field");
    const auto tag = load<std::uint16_t>(file, at);
    const auto len = load<std::uint32_t>(file, at + 2);
    if (len > end - at - 6)
      fail(at + 2, "header field length " + std::to_string(len) + " runs past the header");
    std::string_view v = file.substr(at + 6, len);
    auto need = [&](std::size_t n) {
      if (len != n) fail(at + 2, "header field " + std::to_string(tag) + " must have " +
                                     std::to_string(n) + " bytes, has " + std::to_string(len));
    };
    TraceHeader& h = p.header;
    switch (static_cast<FieldTag>(tag)) {
      case FieldTag::luma_version: h.luma_version = v; break;
      case FieldTag::pid: need(8); h.pid = load<std::uint64_t>(v, 0); break;
      case FieldTag::host: h.host = v; break;
      case FieldTag::command_line: {
        std::size_t s = 0;
        while (s < v.size()) {
          std::size_t z = v.find('\0', s);
          if (z == std::string_view::npos) fail(at + 6 + s, "command line argument lacks its NUL");
          h.command_line.emplace_back(v.substr(s, z - s));
          s = z + 1;
        }
        break;
      }
      case FieldTag::start_unix_ns: need(8); h.start_unix_ns = load<std::uint64_t>(v, 0); break;
      case FieldTag::clock_base_ns: need(8); h.clock_base_ns = load<std::uint64_t>(v, 0); break;
      case FieldTag::device: {
        if (len < 12) fail(at + 2, "device field shorter than 12 bytes");
        TraceDevice d;
        d.index = load<std::uint32_t>(v, 0);
        if (d.index > kMaxTraceDevice)
          fail(at + 2, "device field names device " + std::to_string(d.index) + " (devices are 0.." +
                           std::to_string(kMaxTraceDevice) + ")");
        d.total_bytes = load<std::uint64_t>(v, 4);
        d.name = v.substr(12);
        h.devices.push_back(std::move(d));
        break;
      }
      case FieldTag::settings: h.settings = v; break;
      case FieldTag::stack_depth:
        need(4);
        h.stack_depth = load<std::uint32_t>(v, 0);
        if (h.stack_depth > kMaxStackDepth) fail(at + 6, "stack depth above the maximum");
        break;
      case FieldTag::mappings: h.mappings = v; break;
      default: break;  // unknown tags are skipped: newer writers may add fields
    }
    at += 6 + len;
  }
  return p;
}

}  // namespace trace
}  // namespace luma::core
