// trace_header.h - what a trace says about the process that wrote it (the header block's
// tagged fields), and the error every trace reader throws. Encoding and decoding only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace luma::core {

struct TraceDevice {
  std::uint32_t index = 0;
  std::uint64_t total_bytes = 0;
  std::string name;
};

struct TraceHeader {
  std::uint32_t format_version = 0;  // set by the writer, checked by the reader
  std::string luma_version;
  std::uint64_t pid = 0;
  std::string host;
  std::vector<std::string> command_line;
  std::uint64_t start_unix_ns = 0;  // wall clock at open
  std::uint64_t clock_base_ns = 0;  // event times passed to the writer minus this are stored
  std::vector<TraceDevice> devices;
  std::string settings;             // the settings in force, "key:value,..." form
  std::uint32_t stack_depth = 0;    // most return addresses per alloc; 0: no call sites
  std::string mappings;             // /proc/self/maps at open, when call sites are recorded
};

// A trace that cannot be read: names the file and the byte offset of the problem.
class TraceError : public std::runtime_error {
 public:
  TraceError(const std::string& source, std::uint64_t offset, const std::string& what);
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::uint64_t offset_;
};

namespace trace {

// The whole padded header block (a multiple of kHeaderAlign bytes), close fields zero.
std::string encode_header(const TraceHeader& header);

struct ParsedHeader {
  TraceHeader header;
  std::uint64_t header_bytes = 0;  // where slots start
  bool closed = false;             // the writer closed the file cleanly
  std::uint64_t closed_slots = 0;  // slots used, when closed
};

// Validates and decodes the header block at the start of `file` (the whole file's bytes).
// Throws TraceError naming `source` and the offset of the first problem.
ParsedHeader parse_header(std::string_view file, const std::string& source);

// True when `head` starts with the trace magic.
bool has_trace_magic(std::string_view head) noexcept;

}  // namespace trace
}  // namespace luma::core
