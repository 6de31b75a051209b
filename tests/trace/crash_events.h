// crash_events.h - the event stream of the SIGKILL test, a pure function of (thread, i),
// shared by the recording program and the test that checks what it left.
#pragma once

#include <cstdint>
#include <span>

#include "base/event.h"
#include "trace/trace_format.h"

namespace luma::core::testing {

inline constexpr std::uint32_t kCrashStackDepth = 4;

struct CrashEvent {
  Event event;
  std::uint64_t thread, stream, time;
  trace::EntryPoint entry;
  std::span<const std::uint64_t> stack;
};

inline CrashEvent crash_event(std::uint64_t t, std::uint64_t i) {
  static const std::uint64_t frames[8] = {0x401000, 0x402000, 0x403000, 0x404000,
                                          0x405000, 0x406000, 0x407000, 0x408000};
  CrashEvent c{};
  const bool wide = i % 97 == 5;  // an odd address cannot be packed narrow
  c.event = {i % 2 ? EventKind::free_requested : EventKind::alloc, static_cast<int>(t % 2),
             ((t + 1) << 40) + ((i + 1) << 8) + (wide ? 1 : 0), 256 * (i % 7 + 1),
             i % 2 ? 0 : 256 * (i % 7 + 1) - 5};
  c.thread = 1000 + t;
  c.stream = i % 3;
  c.time = 10000 + i;
  c.entry = i % 2 ? trace::EntryPoint::cudaFree : trace::EntryPoint::cudaMalloc;
  if (i % 2 == 0 && i % 5 == 0) c.stack = std::span<const std::uint64_t>(frames + i % 4, 3);
  return c;
}

}  // namespace luma::core::testing
