// fuzz_trace_reader.cpp - libFuzzer target: any bytes as a luma trace. The reader must end
// in a TraceError or read cleanly; anything else (another exception, a crash, a sanitizer
// report, a hang or an allocation beyond the input's size) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "trace/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace luma::core;
  try {
    TraceReader reader(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
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
