// sample_program.h - a deterministic sample "program" for capture-plan-replay tests: per
// device, a warm-up (three weight buffers kept to the end) and then training-like steps
// (an activation for the step, a temporary freed at once, a gradient kept into the next
// step), computing with the data it writes into its buffers. Its result depends only on
// that data, never on addresses, so a replay that overlapped two live blocks would change
// it. Also: capture (run it on ContextAllocators over host memory with a trace writer), the
// recorded header, and a trace file of a run.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "replay/context_allocator.h"
#include "host_device.h"
#include "trace/trace_header.h"
#include "trace_sink.h"
#include "trace/trace_writer.h"

namespace luma::core::testing {

// What the program allocates through (a ContextAllocator per device, in the tests).
class ProgramMemory {
 public:
  virtual ~ProgramMemory() = default;
  virtual void* alloc(int device, std::size_t bytes) = 0;
  virtual void release(int device, void* p) = 0;
};

inline void fill(void* p, std::size_t n, std::uint64_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((seed * 131 + i * 7) >> 3);
}
inline std::uint64_t sum(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < n; ++i) s = s * 31 + b[i];
  return s;
}

// Allocation sizes are deliberately not multiples of 256 (requested != size).
inline std::vector<std::uint64_t> run_sample_program(ProgramMemory& m, int devices, int steps) {
  std::vector<std::uint64_t> result;
  struct Weights {
    void* w[3];
  };
  const std::size_t wsize[3] = {100000, 30000, 5000};
  std::vector<Weights> weights(static_cast<std::size_t>(devices));
  std::vector<void*> grad(static_cast<std::size_t>(devices), nullptr);
  for (int d = 0; d < devices; ++d)
    for (int i = 0; i < 3; ++i) {
      weights[d].w[i] = m.alloc(d, wsize[i] + static_cast<std::size_t>(d));
      fill(weights[d].w[i], wsize[i], static_cast<std::uint64_t>(d * 10 + i));
    }
  for (int step = 0; step < steps; ++step) {
    for (int d = 0; d < devices; ++d) {
      void* act = m.alloc(d, 50000);
      fill(act, 50000, static_cast<std::uint64_t>(step));
      void* tmp = m.alloc(d, 7000);
      std::memcpy(tmp, weights[d].w[2], 5000);
      std::memcpy(static_cast<char*>(tmp) + 5000, act, 2000);
      const std::uint64_t t = sum(tmp, 7000);
      m.release(d, tmp);
      if (grad[d] != nullptr) {  // last step's gradient, used once more, then freed
        result.push_back(sum(grad[d], 30000) ^ t);
        m.release(d, grad[d]);
      }
      void* g = m.alloc(d, 30000);
      std::memcpy(g, weights[d].w[1], 30000);
      static_cast<unsigned char*>(g)[static_cast<std::size_t>(step) % 30000] ^= static_cast<unsigned char>(t);
      grad[d] = g;
      result.push_back(sum(act, 50000) + sum(weights[d].w[0], 100000));
      m.release(d, act);
    }
  }
  for (int d = 0; d < devices; ++d) {
    if (grad[d] != nullptr) result.push_back(sum(grad[d], 30000));
    // The program exits without freeing its weights or its last gradient.
  }
  return result;
}

// ContextAllocators over host memory, one per device, optionally on a plan and traced.
class HostMemory final : public ProgramMemory {
 public:
  HostMemory(int devices, const PlanFile* plan, EventSink* sink = nullptr, bool fences = false) {
    for (int d = 0; d < devices; ++d) {
      auto dev = std::make_unique<HostDevice>();
      if (fences) {
        dev->set_fences(true);
        dev->set_fence_mode(FenceMode::per_free);
      }
      allocators_.push_back(std::make_unique<ContextAllocator>(*dev, d, AllocatorOptions{}, plan));
      if (sink != nullptr) allocators_.back()->set_event_sink(sink);
      devices_.push_back(std::move(dev));
    }
  }
  void* alloc(int device, std::size_t bytes) override {
    const AllocResult r = allocators_[static_cast<std::size_t>(device)]->allocate(bytes);
    EXPECT_EQ(r.status, AllocStatus::ok);
    return r.ptr;
  }
  void release(int device, void* p) override {
    EXPECT_EQ(allocators_[static_cast<std::size_t>(device)]->free(p), FreeStatus::ok);
  }
  ContextAllocator& allocator(int d) { return *allocators_[static_cast<std::size_t>(d)]; }
  HostDevice& device(int d) { return *devices_[static_cast<std::size_t>(d)]; }

 private:
  std::vector<std::unique_ptr<HostDevice>> devices_;
  std::vector<std::unique_ptr<ContextAllocator>> allocators_;
};

// The header a capture of the sample program records.
inline TraceHeader sample_header(int devices, const std::vector<std::string>& command) {
  TraceHeader h;
  h.luma_version = "test";
  h.pid = 1;
  h.host = "test";
  h.command_line = command;
  h.clock_base_ns = 0;
  for (int d = 0; d < devices; ++d)
    h.devices.push_back({static_cast<std::uint32_t>(d), 1ull << 30, "Host device " + std::to_string(d)});
  return h;
}

class SteadyContext final : public EventContextSource {
 public:
  EventContext current(const Event&) noexcept override {
    EventContext c;
    c.thread = 1;
    c.time_ns = ++time_;
    return c;
  }

 private:
  std::uint64_t time_ = 0;
};

// Runs the sample program under a trace writer on the caching allocator (no plan) or on
// `plan`, writing the trace to `path`; returns the program's result.
inline std::vector<std::uint64_t> capture_sample(const std::string& path, int devices, int steps,
                                                 const std::vector<std::string>& command,
                                                 const PlanFile* plan = nullptr) {
  std::string error;
  auto writer = TraceWriter::open(path, sample_header(devices, command), &error);
  EXPECT_NE(writer, nullptr) << error;
  if (writer == nullptr) return {};
  SteadyContext context;
  TraceSink sink(*writer, context);
  std::vector<std::uint64_t> result;
  {
    HostMemory memory(devices, plan, &sink);
    result = run_sample_program(memory, devices, steps);
  }
  EXPECT_TRUE(writer->close());
  return result;
}

inline std::string temp_file(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/luma-replay-" + std::to_string(::getpid()) + "-" + name;
}

}  // namespace luma::core::testing
