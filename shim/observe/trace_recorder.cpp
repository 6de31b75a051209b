// trace_recorder.cpp - see trace_recorder.h; the exit gate is described in
// trace_event_sink.h.
#include "observe/trace_recorder.h"

#include <fcntl.h>
#include <link.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "observe/call_context.h"
#include "config/log.h"
#include "observe/run_identity.h"
#include "trace/trace_format.h"

namespace luma::shim {
namespace {

// How long exit waits for events in flight on other threads before it leaves the trace
// unfinished (it still reads completely: every completed event is in the file).
constexpr std::uint64_t kCloseWaitNs = 200'000'000;
// /proc files copied into the header are cut here (the header block holds 64 MiB).
constexpr std::size_t kMaxProcFileBytes = 16u << 20;

std::uint64_t realtime_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(t.tv_nsec);
}

struct Range {
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  std::uintptr_t base = 0;
};

// The address range libluma.so's loadable segments occupy.
Range luma_range() noexcept {
  Range r;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&luma_range), &info) == 0) return r;
  r.base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  dl_iterate_phdr(
      [](dl_phdr_info* i, std::size_t, void* data) -> int {
        auto* rr = static_cast<Range*>(data);
        bool ours = false;
        for (int k = 0; k < i->dlpi_phnum; ++k) {
          const ElfW(Phdr)& p = i->dlpi_phdr[k];
          if (p.p_type != PT_LOAD) continue;
          const std::uintptr_t lo = i->dlpi_addr + p.p_vaddr;
          if (lo <= rr->base && rr->base < lo + p.p_memsz) ours = true;
        }
        if (!ours && i->dlpi_addr != rr->base) return 0;
        for (int k = 0; k < i->dlpi_phnum; ++k) {
          const ElfW(Phdr)& p = i->dlpi_phdr[k];
          if (p.p_type != PT_LOAD) continue;
          rr->lo = std::min<std::uintptr_t>(rr->lo, i->dlpi_addr + p.p_vaddr);
          rr->hi = std::max<std::uintptr_t>(rr->hi, i->dlpi_addr + p.p_vaddr + p.p_memsz);
        }
        return 1;
      },
      &r);
  return r;
}

// A file no other live process is writing: flock(LOCK_EX) on `path`, kept for the
// process's life (closed on exec, shared with fork children, which never write it). When
// another process holds it, NAME.PID instead. Returns the name to record to.
std::string claim_name(std::string path) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return path;  // TraceWriter::open reports why
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return path;  // fd leaked on purpose: the lock
    const bool busy = errno == EWOULDBLOCK;
    ::close(fd);
    if (!busy) return path;
    const std::string other = path + "." + std::to_string(getpid());
    log_noexcept(LogLevel::warn, "LUMA_TRACE: '{}' is being written by another process (use %p in the "
               "pattern); recording to '{}'",
               path, other);
    path = other;
  }
  return path;
}

}  // namespace

void TraceRecorder::configure(const ShimSettings& settings,
                              const std::string& settings_text) noexcept {
  try {
    pattern_ = settings.trace;
    settings_text_ = settings_text;
  } catch (...) {
    pattern_.clear();
  }
  if (pattern_.empty()) return;
  stack_depth_ = std::min(settings.trace_stacks, kMaxTraceStacks);
  gate_.membarrier =
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  if (stack_depth_ > 0) {
    const Range r = luma_range();  // libluma.so's frames are skipped
    stacks_.configure(stack_depth_, r.lo, r.hi);
    python_.configure(std::min(settings.trace_python, kMaxTracePython));
  }
}

core::TraceHeader TraceRecorder::make_header(const RealDriver& d) const {
  core::TraceHeader h;
  h.luma_version = LUMA_VERSION;
  h.pid = static_cast<std::uint64_t>(getpid());
  h.host = host_name();
  h.command_line = process_command_line();
  h.start_unix_ns = realtime_ns();
  h.clock_base_ns = clock_.now();
  h.settings = settings_text_;
  h.stack_depth = stack_depth_;
  if (stack_depth_ > 0) h.mappings = read_proc_file("/proc/self/maps", kMaxProcFileBytes);
  h.devices = driver_devices(d);
  return h;
}

bool TraceRecorder::open(const RealDriver& driver) noexcept {
  try {
    clock_.start();
    const std::string wanted_path = core::expand_path_pattern(pattern_, process_names().fields());
    path_ = claim_name(wanted_path);
    std::string error;
    writer_ = core::TraceWriter::open(path_, make_header(driver), &error);
    if (!writer_) {
      open_failed_.store(true);
      log_noexcept(LogLevel::warn, "LUMA_TRACE: cannot record to '{}' ({}); the program runs on without a trace",
                 path_, error);
      path_.clear();
      return false;
    }
    log_noexcept(LogLevel::info, "recording the trace to '{}'", path_);
    open_writer_.store(writer_.get(), std::memory_order_release);
    return true;
  } catch (const std::exception& e) {
    log_noexcept(LogLevel::warn, "LUMA_TRACE: cannot record ({}); the program runs on without a trace", e.what());
  } catch (...) {
  }
  open_failed_.store(true);
  writer_.reset();
  path_.clear();
  return false;
}

core::EventSink* TraceRecorder::sink_for_new_allocator(const RealDriver& driver) noexcept {
  if (pattern_.empty() || detached_.load()) return nullptr;
  {
    std::lock_guard lock(open_mutex_);
    if (!tried_) {
      tried_ = true;
      open(driver);
    }
  }
  if (!writer_) return nullptr;
  {
    std::lock_guard lock(open_mutex_);
    if (!spare_.empty()) {
      TraceEventSink* sink = spare_.back();
      spare_.pop_back();
      return sink;
    }
  }
  auto* sink = new (std::nothrow) TraceEventSink(*writer_, clock_, gate_);
  if (sink == nullptr) return nullptr;
  // Called under the context table's lock (one allocator at a time), so a plain push.
  sink->next = sinks_.load(std::memory_order_relaxed);
  sinks_.store(sink, std::memory_order_release);
  sinks_made_.fetch_add(1, std::memory_order_relaxed);
  return sink;
}

void TraceRecorder::give_back(core::EventSink* sink) noexcept {
  if (sink == nullptr) return;
  try {
    std::lock_guard lock(open_mutex_);
    spare_.push_back(static_cast<TraceEventSink*>(sink));
  } catch (...) {  // no memory for the list: this one sink is not used again
  }
}

std::size_t TraceRecorder::sinks_spare() const noexcept {
  std::lock_guard lock(open_mutex_);
  return spare_.size();
}

void TraceRecorder::record_forwarded(const RealDriver& driver,
                                     core::trace::ForwardedCall call) noexcept {
  if (pattern_.empty() || detached_.load(std::memory_order_relaxed)) return;
  core::TraceWriter* w = open_writer_.load(std::memory_order_acquire);
  if (w == nullptr) {
    if (open_failed_.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(open_mutex_);
    if (!tried_) {
      tried_ = true;
      open(driver);
    }
    w = writer_.get();
    if (w == nullptr) return;
  }
  // The writer's half of the exit gate (trace_event_sink.h), with full fences: these calls
  // are rare next to the driver's own cost.
  forwarded_busy_.fetch_add(1, std::memory_order_seq_cst);
  if (!gate_.stopping.load(std::memory_order_seq_cst)) {
    call.thread = trace_thread_id();
    call.time_ns = clock_.now();
    w->write_forwarded(call);
  }
  forwarded_busy_.fetch_sub(1, std::memory_order_release);
}

void TraceRecorder::capture_stack() noexcept {
  // Before the trace opens too: the first alloc opens it, after its stack was taken.
  if (open_failed_.load(std::memory_order_relaxed)) {
    call_context().depth = 0;
    call_context().python_depth = 0;
    return;
  }
  CallContext& c = call_context();
  stacks_.capture(c);
  c.python_depth = python_.capture(c.python);
}

void TraceRecorder::close_at_exit() noexcept {
  if (!writer_ || detached_.load() || closed_.exchange(true)) return;
  // The closer's half of the gate (trace_event_sink.h): a sequentially consistent store
  // with a full fence (an exchange), then - when the writers skip their fence - one that
  // every running thread executes.
  gate_.stopping.exchange(true, std::memory_order_seq_cst);
  if (gate_.membarrier)
    (void)::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  const std::uint64_t deadline = monotonic_ns() + kCloseWaitNs;
  for (TraceEventSink* sink = sinks_.load(std::memory_order_acquire); sink != nullptr;
       sink = sink->next) {
    while (sink->busy()) {
      // Left unfinished, the trace still reads up to its last completed event.
      if (monotonic_ns() > deadline) return;
      sched_yield();
    }
  }
  while (forwarded_busy_.load(std::memory_order_seq_cst) != 0) {
    if (monotonic_ns() > deadline) return;
    sched_yield();
  }
  writer_->close();
}

void TraceRecorder::detach_in_child() noexcept {
  if (!writer_) return;
  detached_.store(true);
  gate_.stopping.store(true);
}

}  // namespace luma::shim
