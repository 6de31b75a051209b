// make_golden.cpp - writes the small golden traces of tests/data from fixed calls, so that
// they are reproducible byte for byte: `make_golden DIR` writes DIR/golden_small.trace
// (two devices, every event kind, narrow and wide records, three threads, two streams) and
// DIR/golden_stacks.trace (call sites and a mappings text naming no real file).
// The trace test compares its output with the committed files: a change of the format
// shows up as a diff there. `make_golden --events N PATH` writes a plain trace of N
// alloc/free events instead (large inputs for the tools' tests: the progress bar).
// `make_golden --latin1 PATH` writes the stacks trace of a program whose name, argument
// and module path hold the byte 0xE9 (Latin-1's e-acute), which is not UTF-8.
// `make_golden --module FILE PATH` writes the stacks trace with its module at FILE.
// `make_golden --one-block PATH` writes a program's one 4 KiB block in a 2 MiB segment
// (a regression: luma stats once called that a fragmentation of 512).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trace/trace_writer.h"

using namespace luma::core;
using trace::EntryPoint;

namespace {

TraceHeader golden_header(std::uint32_t stack_depth) {
  TraceHeader h;
  h.luma_version = "0.1.0";
  h.pid = 31337;
  h.host = "golden-host";
  h.command_line = {"python3", "train.py", "--epochs", "1"};
  h.start_unix_ns = 1700000000000000000ull;  // 2023-11-14T22:13:20Z
  h.clock_base_ns = 1000000;
  h.devices = {{0, 80ull << 30, "Stand-in GPU 0"}, {1, 80ull << 30, "Stand-in GPU 1"}};
  h.settings = "alignment:256,min_split:256,max_split_size:unlimited,release_on_oom:true";
  h.stack_depth = stack_depth;
  if (stack_depth)
    h.mappings =
        "555555554000-555555556000 r--p 00000000 00:00 1 /nonexistent/golden/app\n"
        "555555556000-55555555a000 r-xp 00002000 00:00 1 /nonexistent/golden/app\n";
  return h;
}

bool small(const std::string& path) {
  auto w = TraceWriter::open(path, golden_header(0), nullptr, {.prefault_thread = false});
  if (!w) return false;
  std::uint64_t t = 1000000;
  auto ev = [&](EventKind k, int dev, std::uint64_t addr, std::uint64_t size,
                std::uint64_t req, std::uint64_t thread, std::uint64_t stream, EntryPoint e) {
    t += 1500;
    w->write({k, dev, addr, size, req}, thread, stream, e, t);
  };
  const std::uint64_t seg0 = 0x7f0000000000ull, seg1 = 0x7f0000200000ull;
  // Device 0: a 2 MiB small segment carved into blocks, one freed with a pending fence.
  ev(EventKind::segment_reserve, 0, seg0, 2 << 20, 0, 101, 0, EntryPoint::cudaMalloc);
  ev(EventKind::alloc, 0, seg0, 512, 500, 101, 0, EntryPoint::cudaMalloc);
  ev(EventKind::alloc, 0, seg0 + 512, 4096, 4000, 101, 0, EntryPoint::cudaMalloc);
  ev(EventKind::alloc, 0, seg0 + 4608, 1 << 20, (1 << 20) - 100, 102, 7, EntryPoint::cudaMallocAsync);
  ev(EventKind::free_requested, 0, seg0 + 512, 4096, 0, 101, 0, EntryPoint::cudaFree);
  ev(EventKind::free_completed, 0, seg0 + 512, 4096, 0, 101, 0, EntryPoint::cudaFree);
  ev(EventKind::alloc, 0, seg0 + 512, 2048, 2000, 101, 0, EntryPoint::cudaMalloc);
  ev(EventKind::free_requested, 0, seg0 + 4608, 1 << 20, 0, 102, 7, EntryPoint::cudaFreeAsync);
  // Device 0: a large segment, reserved, used, released by empty_cache.
  ev(EventKind::segment_reserve, 0, seg1, 20 << 20, 0, 101, 0, EntryPoint::cudaMalloc);
  ev(EventKind::alloc, 0, seg1, 12 << 20, 12 << 20, 101, 0, EntryPoint::cudaMalloc);
  ev(EventKind::free_requested, 0, seg1, 12 << 20, 0, 101, 0, EntryPoint::cudaFree);
  ev(EventKind::free_completed, 0, seg1, 12 << 20, 0, 101, 0, EntryPoint::cudaFree);
  ev(EventKind::segment_release, 0, seg1, 20 << 20, 0, 101, 0, EntryPoint::empty_cache);
  ev(EventKind::empty_cache, 0, 0, 20 << 20, 0, 101, 0, EntryPoint::empty_cache);
  // Device 0: an out-of-memory (wide: requested far above size 0).
  ev(EventKind::oom, 0, 0, 0, 100ull << 30, 101, 0, EntryPoint::cudaMalloc);
  // Device 1: a wide alloc (odd requested slack) and a never-freed block.
  const std::uint64_t seg2 = 0x7f1000000000ull;
  ev(EventKind::segment_reserve, 1, seg2, 40 << 20, 0, 103, 0, EntryPoint::cuMemAlloc);
  ev(EventKind::alloc, 1, seg2, 40 << 20, 1, 103, 0, EntryPoint::cuMemAlloc);
  ev(EventKind::free_requested, 1, seg2, 40 << 20, 0, 103, 0, EntryPoint::cuMemFree);
  ev(EventKind::free_completed, 1, seg2, 40 << 20, 0, 103, 0, EntryPoint::cuMemFree);
  ev(EventKind::alloc, 1, seg2, 8 << 20, 8 << 20, 103, 0, EntryPoint::cuMemAlloc);
  return w->close();
}

bool stacks(const std::string& path, bool latin1 = false, const std::string& module = "") {
  TraceHeader header = golden_header(4);
  if (!module.empty())
    header.mappings = "555555554000-555555556000 r--p 00000000 00:00 1 " + module + "\n" +
                      "555555556000-55555555a000 r-xp 00002000 00:00 1 " + module + "\n";
  if (latin1) {
    header.command_line = {"./prog_\xe9", "caf\xe9", "\xe9\xe9\xff"};
    header.mappings =
        "555555554000-555555556000 r--p 00000000 00:00 1 /nonexistent/r\xe9pertoire/app\n"
        "555555556000-55555555a000 r-xp 00002000 00:00 1 /nonexistent/r\xe9pertoire/app\n";
  }
  auto w = TraceWriter::open(path, header, nullptr, {.prefault_thread = false});
  if (!w) return false;
  const std::vector<std::uint64_t> a = {0x555555557010, 0x555555557120, 0x555555558000};
  const std::vector<std::uint64_t> b = {0x555555557200, 0x555555558000};
  const std::uint64_t seg = 0x7f2000000000ull;
  std::uint64_t t = 1000000;
  w->write({EventKind::segment_reserve, 0, seg, 20 << 20, 0}, 7, 0, EntryPoint::cudaMalloc, t += 10);
  for (std::uint64_t i = 0; i < 8; ++i) {
    const bool big = i % 2 == 0;
    w->write({EventKind::alloc, 0, seg + i * (2 << 20), big ? (2u << 20) : (1u << 20),
              big ? (2u << 20) : (1u << 20) - 256},
             7, 0, EntryPoint::cudaMalloc, t += 10, big ? a : b);
  }
  for (std::uint64_t i = 0; i < 8; i += 3)
    w->write({EventKind::free_requested, 0, seg + i * (2 << 20), i % 2 == 0 ? (2u << 20) : (1u << 20), 0},
             7, 0, EntryPoint::cudaFree, t += 10);
  return w->close();
}

}  // namespace

// N events: an alloc and its free in turn, on one device, thread and stream.
bool many(const std::string& path, std::uint64_t n) {
  auto w = TraceWriter::open(path, golden_header(0), nullptr);
  if (!w) return false;
  for (std::uint64_t i = 0; i < n; ++i) {
    const bool alloc = (i & 1) == 0;
    const std::uint64_t size = 512 << ((i >> 1) % 8);
    w->write({alloc ? EventKind::alloc : EventKind::free_requested, 0,
              0x7f0000000000ull + (((i >> 1) & 0xFFFF) << 20), size, alloc ? size - 100 : 0},
             1, 0, alloc ? EntryPoint::cudaMalloc : EntryPoint::cudaFree, 1000000 + 1000 * i);
  }
  return w->close() && w->dropped() == 0;
}

// One 4 KiB allocation, in the 2 MiB small segment it needed, freed before the end.
bool one_block(const std::string& path) {
  auto w = TraceWriter::open(path, golden_header(0), nullptr, {.prefault_thread = false});
  if (!w) return false;
  const std::uint64_t seg = 0x7f0000000000ull;
  w->write({EventKind::segment_reserve, 0, seg, 2 << 20, 0}, 1, 0, EntryPoint::cudaMalloc, 1001000);
  w->write({EventKind::alloc, 0, seg, 4096, 4096}, 1, 0, EntryPoint::cudaMalloc, 1002000);
  w->write({EventKind::free_requested, 0, seg, 4096, 0}, 1, 0, EntryPoint::cudaFree, 1003000);
  return w->close();
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--one-block") {
    if (!one_block(argv[2])) {
      std::fprintf(stderr, "make_golden: cannot write %s\n", argv[2]);
      return 1;
    }
    return 0;
  }
  if (argc == 4 && std::string(argv[1]) == "--events") {
    char* end = nullptr;
    const std::uint64_t n = std::strtoull(argv[2], &end, 10);
    if (end == argv[2] || *end != '\0') {
      std::fprintf(stderr, "make_golden: --events takes a count, not '%s'\n", argv[2]);
      return 2;
    }
    if (!many(argv[3], n)) {
      std::fprintf(stderr, "make_golden: cannot write %s\n", argv[3]);
      return 1;
    }
    return 0;
  }
  if (argc == 4 && std::string(argv[1]) == "--module") {
    if (!stacks(argv[3], false, argv[2])) {
      std::fprintf(stderr, "make_golden: cannot write %s\n", argv[3]);
      return 1;
    }
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--latin1") {
    if (!stacks(argv[2], /*latin1=*/true)) {
      std::fprintf(stderr, "make_golden: cannot write %s\n", argv[2]);
      return 1;
    }
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_golden DIR | make_golden --events N PATH | make_golden --latin1 PATH | make_golden --module FILE PATH | make_golden --one-block PATH\n");
    return 2;
  }
  const std::string dir = argv[1];
  if (!small(dir + "/golden_small.trace") || !stacks(dir + "/golden_stacks.trace")) {
    std::fprintf(stderr, "make_golden: cannot write into %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
