// record_stacks.cpp - a program that records allocs with its own call stacks (glibc's
// backtrace, as the shim will capture them) and its /proc/self/maps, so the test can
// check that `luma stats` names the function that allocated, from the recorded mappings.
//   record_stacks TRACE
#include <execinfo.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <vector>

#include "trace/trace_writer.h"

using namespace luma::core;

[[gnu::noinline]] void luma_test_allocating_function(TraceWriter& w, std::uint64_t i) {
  void* frames[8];
  const int n = backtrace(frames, 8);
  std::vector<std::uint64_t> stack;
  for (int k = 1; k < n; ++k) stack.push_back(reinterpret_cast<std::uintptr_t>(frames[k]));
  // frames[0] is inside this function; [1] the caller: record from this function on.
  stack.insert(stack.begin(), reinterpret_cast<std::uintptr_t>(frames[0]));
  // Its own segment first, as the allocator reserves one (the memviz viewer draws a
  // block only inside a segment).
  w.write({EventKind::segment_reserve, 0, (i + 1) << 20, 1 << 20, 0}, 1, 0,
          trace::EntryPoint::cudaMalloc, i);
  w.write({EventKind::alloc, 0, (i + 1) << 20, 1 << 20, 1 << 20}, 1, 0,
          trace::EntryPoint::cudaMalloc, i, stack);
  asm volatile("" ::: "memory");  // keep the call a call
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  TraceHeader h;
  h.stack_depth = 8;
  // The wall clock at open, as libluma.so records it (the memviz export's dates).
  h.start_unix_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   std::chrono::system_clock::now().time_since_epoch())
                                                   .count());
  std::ifstream maps("/proc/self/maps");
  std::ostringstream text;
  text << maps.rdbuf();
  h.mappings = text.str();
  auto w = TraceWriter::open(argv[1], h, nullptr);
  if (!w) return 1;
  for (std::uint64_t i = 0; i < 3; ++i) luma_test_allocating_function(*w, i);
  return w->close() ? 0 : 1;
}
