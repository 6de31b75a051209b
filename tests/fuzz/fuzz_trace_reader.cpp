// fuzz_trace_reader.cpp - libFuzzer target: any bytes as a luma trace. The reader must end
// in a TraceError or read cleanly; anything else (another exception, a crash, a sanitizer
// report, a hang or an allocation beyond the input's size) is a finding.
//
// Random bytes almost never pass the header CRC and the per-slot checks, so plain
// mutations stop at the first check and the decoding behind it (events, definitions,
// blobs, stacks, the close record) is rarely reached. Inputs whose last byte is odd are
// therefore first repaired the way a writer would have written them - the header CRC,
// the check of every non-empty slot, the close check when a close count is set - so the
// fuzzer explores the decoder with structurally valid files as well as raw ones.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "trace/trace_format.h"
#include "trace/trace_reader.h"

namespace {

using namespace luma::core;

template <typename T>
T load(const std::string& s, std::size_t at) {
  T v{};
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

template <typename T>
void store(std::string& s, std::size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof v);
}

void repair(std::string& t) {
  using namespace trace;
  if (t.size() < kFixedHeaderBytes) return;
  const auto fields = load<std::uint32_t>(t, kOffFieldsBytes);
  if (fields <= t.size() - kFixedHeaderBytes) {
    std::string copy = t.substr(0, kFixedHeaderBytes + fields);
    std::memset(copy.data() + kOffHeaderCrc, 0, 4);
    std::memset(copy.data() + kOffCloseSlots, 0, 16);
    store<std::uint32_t>(t, kOffHeaderCrc, crc32(copy.data(), copy.size()));
  }
  const auto slots_closed = load<std::uint64_t>(t, kOffCloseSlots);
  if (slots_closed != 0) store<std::uint64_t>(t, kOffCloseCheck, close_check(slots_closed));
  const auto header_bytes = load<std::uint32_t>(t, kOffHeaderBytes);
  if (header_bytes < kFixedHeaderBytes || header_bytes > t.size()) return;
  for (std::size_t at = header_bytes, slot = 0; at + kSlotBytes <= t.size();
       at += kSlotBytes, ++slot) {
    const auto w0 = load<std::uint64_t>(t, at);
    const auto w1 = load<std::uint64_t>(t, at + 8);
    const auto w2 = load<std::uint64_t>(t, at + 16);
    if (w0 == 0 && w1 == 0 && w2 == 0) continue;  // an unwritten slot stays unwritten
    store<std::uint64_t>(t, at + 16, with_check(w0, w1, w2, slot));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size > 0 && (data[size - 1] & 1) != 0) repair(bytes);
  try {
    TraceReader reader(std::move(bytes), "fuzz");
    std::uint64_t seen = 0;
    TraceReadSummary s = reader.read([&](const TraceEvent& e) {
      seen += 1;
      if (e.stack != 0) (void)reader.stack(e.stack);
    });
    if (s.events != seen) __builtin_trap();  // the summary must count what it delivered
  } catch (const TraceError&) {
  }
  return 0;
}
