// record_allocator.cpp - end to end through the real allocator: a CachingAllocator on
// the host stand-in device, its events traced through TraceSink, a workload of mixed
// sizes with frees, an out-of-memory and empty_cache. Writes TRACE and prints the
// allocator's own statistics as JSON, which the test compares with `luma stats --json`.
// With --expandable the allocator makes expandable segments, on a device with virtual
// memory (tests/doubles/paged_device.h): its blocks span pages, which are mapped as it
// grows and unmapped by empty_cache (the memviz export's expandable case).
//   record_allocator TRACE [--expandable]
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "allocator/caching_allocator.h"
#include "host_device.h"
#include "paged_device.h"
#include "trace_sink.h"
#include "trace/trace_writer.h"

using namespace luma::core;

namespace {
struct FixedContext final : EventContextSource {
  std::uint64_t clock = 0;
  EventContext current(const Event&) noexcept override {
    EventContext c;
    c.thread = 1;
    c.stream = 0;
    c.entry = trace::EntryPoint::cudaMalloc;
    c.time_ns = clock += 1000;
    return c;
  }
};
}  // namespace

int main(int argc, char** argv) {
  const bool expandable = argc == 3 && std::strcmp(argv[2], "--expandable") == 0;
  if (argc != 2 && !expandable) return 2;
  TraceHeader h;
  h.luma_version = "test";
  h.host = "host";
  h.start_unix_ns = 1700000000000000000ull;  // as make_golden's: the exports' dates start here
  h.devices = {{0, 64u << 20, "host stand-in"}};
  if (expandable) h.settings = "expandable_segments:true";
  std::string err;
  auto w = TraceWriter::open(argv[1], h, &err);
  if (!w) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 1;
  }
  HostDevice host(64u << 20);
  PagedDevice paged(std::size_t{2} << 20, 64u << 20, 128u << 20);
  AllocatorOptions options;
  options.expandable_segments = expandable;
  CachingAllocator alloc(expandable ? static_cast<Device&>(paged) : static_cast<Device&>(host), 0,
                         options);
  FixedContext ctx;
  TraceSink sink(*w, ctx);
  alloc.set_event_sink(&sink);
  std::vector<void*> live;
  std::uint64_t seed = 42;
  for (int i = 0; i < 3000; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t size = 1 + (seed >> 33) % (3u << 20);
    if (live.size() > 20 || (!live.empty() && (seed >> 20) % 3 == 0)) {
      const std::size_t k = (seed >> 8) % live.size();
      alloc.free(live[k]);
      live.erase(live.begin() + static_cast<long>(k));
    } else if (auto r = alloc.allocate(size); r.ptr) {
      live.push_back(r.ptr);
    }
  }
  (void)alloc.allocate(std::size_t{1} << 40);  // out of memory
  for (std::size_t k = 0; k + 1 < live.size(); ++k) alloc.free(live[k]);
  alloc.empty_cache();
  const DeviceStats s = alloc.stats();
  alloc.set_event_sink(nullptr);
  w->close();
  std::printf("{\"peak_allocated_bytes\": %lld, \"peak_reserved_bytes\": %lld, "
              "\"allocations\": %llu, \"frees\": %llu, \"segment_reserves\": %llu, "
              "\"segment_releases\": %llu, \"ooms\": %llu}\n",
              static_cast<long long>(s.allocated_bytes.all.peak),
              static_cast<long long>(s.reserved_bytes.all.peak),
              static_cast<unsigned long long>(s.alloc_calls),
              static_cast<unsigned long long>(s.free_calls),
              static_cast<unsigned long long>(s.num_device_alloc),
              static_cast<unsigned long long>(s.num_device_free),
              static_cast<unsigned long long>(s.num_ooms));
  alloc.release_all();
  return 0;
}
