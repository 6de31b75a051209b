// serve.cpp - the serving logic behind the hooks (serve.h): which allocator a call goes
// to, what luma answers, and what the real driver must still be asked.
//
// One interception point at the driver: both CUDA runtimes (static and shared) reach the
// driver only through dlopen("libcuda.so.1") + dlsym(handle, "cuGetProcAddress_v2") +
// cuGetProcAddress_v2 (docs/architecture.md). luma's dlsym hands out its own
// cuGetProcAddress_v2, which hands out luma's cuMem* for the ABI luma implements; the same
// cuMem* are exported for programs linked with -lcuda. So all three kinds of program end
// up in the same few functions below.
#include "serve.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "observe/call_context.h"
#include "device/capture_registry.h"
#include "device/current_context.h"
#include "driver/dlsym_hook.h"
#include "context_entries.h"
#include "forwarded_calls.h"
#include "limits/limited_mem_info.h"
#include "config/log.h"
#include "observe/nvtx_memory.h"
#include "driver/proc_address.h"
#include "threads/recursion_guard.h"
#include "signal_flush.h"
#include "stats/oom_report.h"

namespace luma::shim {
namespace {

using luma::core::trace::EntryPoint;

// pitch alignment cuMemAllocPitch gives: the driver's texture pitch alignment on every
// architecture CUDA 13 supports is at most 512 bytes.
constexpr std::size_t kPitchAlignment = 512;

void* as_ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
CUdeviceptr as_dptr(const void* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
}

// One warning per allocation that finally failed (the core released its cache and retried
// first): what was asked, what the device and luma hold, and a hint when fragmentation is
// the cause (core/stats/oom_report.h). The device's memory is the real driver's answer in
// the entry's context, current on this thread. With a trace on, the top call sites and the
// snapshot (LUMA_OOM_SNAPSHOT) follow (oom_watch.h). Runs after the allocator returned:
// no allocator lock is held, and nothing here allocates device memory.
void report_oom(State& s, ContextEntry& e, std::size_t bytes) noexcept {
  try {
    core::OomReport r = core::make_oom_report(e.allocator.stats(), e.allocator.cache().options(),
                                              e.allocator.cache().largest_free_block(), bytes);
    std::size_t free = 0, total = 0;
    if (s.driver.mem_get_info != nullptr && s.driver.mem_get_info(&free, &total) == CUDA_SUCCESS) {
      r.device_known = true;
      r.device_free = free;
      r.device_total = total;
    }
    if (e.limited != nullptr) r.memory_limit = e.limited->budget().limit();
    const OomWatch::Evidence evidence = s.oom.gather(&e.allocator);
    s.oom.add_top_sites(evidence, r);
    log_noexcept(LogLevel::warn, "{}", core::describe_oom(r));
    s.oom.write_snapshot(evidence, e.allocator.cache(), r, s.settings_text, call_context().stream);
  } catch (...) {  // no memory for the text either: the error code says enough
  }
}

// Whether an allocation gets a driver allocation of its own (allocate_own_segment: its
// pointer is the start of what an IPC handle maps): LUMA_CONF=ipc_own_segment asks it by
// size; a caching allocator of the program's own (program_cache.h) for all.
[[gnu::always_inline]] inline bool own_segment(State& s, std::size_t bytes) noexcept {
  if (s.program_cache.active()) [[unlikely]]
    return true;
  const std::size_t ipc = s.settings.core.ipc_own_segment;
  if (ipc != 0 && bytes >= ipc) [[unlikely]]
    return true;
  if (ProgramCacheWatch::segment_sized(bytes) && s.settings.core.program_cache && s.program_cache.due()) [[unlikely]] {
    s.program_cache.check(true);
    return s.program_cache.active();
  }
  return false;
}

[[gnu::always_inline]] inline CUresult allocate(State& s, CUdeviceptr* dptr, std::size_t bytes,
                                                EntryPoint entry) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CallScope scope(entry);
  if (s.recorder.stack_depth() > 0) s.recorder.capture_stack();
  ContextEntry* e = current_entry(s);
  if (e == nullptr) return s.driver.mem_alloc(dptr, bytes);  // no context: the driver's error
  core::AllocResult r = own_segment(s, bytes) ? e->allocator.cache().allocate_own_segment(bytes)
                                              : e->allocator.allocate(bytes);
  switch (r.status) {
    case core::AllocStatus::ok:
      *dptr = as_dptr(r.ptr);
      return CUDA_SUCCESS;
    case core::AllocStatus::invalid_size:
      return CUDA_ERROR_INVALID_VALUE;
    case core::AllocStatus::out_of_memory:
      report_oom(s, *e, bytes);
      return CUDA_ERROR_OUT_OF_MEMORY;
    case core::AllocStatus::device_error:  // the driver's own code, as the real call gives it
      return static_cast<CUresult>(r.device_error);
  }
  return CUDA_ERROR_UNKNOWN;
}

// The live entry whose memory (a segment or an arena, live, free or pending) holds ptr.
ContextEntry* owner_of(State& s, const void* ptr, core::SegmentRange* segment) noexcept {
  ContextEntry* owner = nullptr;
  s.contexts.for_each_live([&](ContextEntry& e) {
    if (owner == nullptr && e.driver_device.may_hold(ptr) && e.allocator.segment_of(ptr, segment)) owner = &e;
  });
  return owner;
}

// While a stream capture forbids the calling thread's potentially unsafe calls
// (docs/cuda-facts.md), the driver alone would refuse cuMemAlloc / cuMemFree with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture. luma must give the
// same answer and the same invalidation, which only the driver can do: it asks the driver
// for one byte. Refused: that code. Served after all (the rules said no, the driver yes):
// the byte goes back and nullopt says luma may serve the call. Under the capture gate: a
// capture announced between the probe's allocation and its free would otherwise receive
// that free (the driver may end a capture before luma learns of it, so luma can probe when
// no capture forbids anything any more) and be invalidated by it.
std::optional<CUresult> refused_by_capture(State& s) noexcept {
  const auto held = s.captures.hold();
  if (!s.captures.forbids_unsafe_call(this_thread_id(), thread_capture_mode())) return std::nullopt;
  CUdeviceptr probe = 0;
  const CUresult r = s.driver.mem_alloc(&probe, 1);
  if (r == CUDA_SUCCESS) {
    s.driver.mem_free(probe);
    return std::nullopt;
  }
  return r;
}

// Whether `stream` captures: a capture luma saw begin, or one it could not see (begun by an
// entry point luma does not hook, say one of a later CUDA), which only the driver
// knows: cuStreamIsCapturing is made to be asked during a capture (cuda.h). The NULL
// handle of a _ptsz call is the thread's per-thread stream.
bool stream_captures(const State& s, CUstream stream, bool per_thread) noexcept {
  if (s.captures.capturing(stream)) return true;
  if (s.driver.stream_is_capturing == nullptr) return false;
  if (stream == nullptr && per_thread) stream = LUMA_CU_STREAM_PER_THREAD;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = s.driver.stream_is_capturing(stream, &status);
  // The legacy stream while a blocking stream captures answers
  // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: a use of it would join that capture.
  return r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || (r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE);
}


// A free luma answers: CUDA_SUCCESS (the block went into the cache), CUDA_ERROR_INVALID_VALUE
// (a luma segment, but not the start of a live block: a double or interior free), or
// nullopt (not luma's memory: the driver's business). Any context's allocator: a free may
// come from another thread with another device current.
[[gnu::always_inline]] inline std::optional<CUresult> free_in_cache(State& s, void* p) noexcept {
  const std::size_t n = s.contexts.slots_used();
  for (std::size_t i = 0; i < n; ++i) {
    ContextEntry* e = s.contexts.slot(i);
    if (e == nullptr || !e->driver_device.may_hold(p) || e->retired.load(std::memory_order_relaxed))
      continue;
    switch (e->allocator.free(p)) {
      case luma::core::FreeStatus::ok: return CUDA_SUCCESS;
      case luma::core::FreeStatus::invalid: return CUDA_ERROR_INVALID_VALUE;
      case luma::core::FreeStatus::not_owned: break;
    }
  }
  return std::nullopt;
}

}  // namespace

const RealDriver* loaded_driver() noexcept {
  State* s = state_if_ready();
  return (s != nullptr && s->driver_loaded) ? &s->driver : nullptr;
}

void log_internal_error(const char* where) noexcept {
  log_noexcept(LogLevel::err, "internal error in {}; forwarding the call to the driver", where);
}

// ---- memory ----------------------------------------------------------------------------

CUresult serve_mem_alloc(State& s, CUdeviceptr* dptr, std::size_t bytes) {
  // Where a capture forbids it, the program's own call goes to the driver: its refusal
  // (and the capture's invalidation) is what the program would get without luma.
  if (s.captures.any() && s.captures.forbids_unsafe_call(this_thread_id(), thread_capture_mode()))
    return s.driver.mem_alloc(dptr, bytes);
  return allocate(s, dptr, bytes, EntryPoint::cuMemAlloc);
}

CUresult serve_mem_alloc_pitch(State& s, CUdeviceptr* dptr, std::size_t* pitch,
                               std::size_t width, std::size_t height, unsigned element_size) {
  // The driver's rules: element sizes 4, 8 or 16 bytes, no empty dimension.
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0 ||
      (element_size != 4 && element_size != 8 && element_size != 16))
    return CUDA_ERROR_INVALID_VALUE;
  if (width > SIZE_MAX - kPitchAlignment) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t row = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (height > SIZE_MAX / row) return CUDA_ERROR_OUT_OF_MEMORY;
  if (s.captures.any() && s.captures.forbids_unsafe_call(this_thread_id(), thread_capture_mode()))
    return s.driver.mem_alloc_pitch(dptr, pitch, width, height, element_size);
  CUresult r = allocate(s, dptr, row * height, EntryPoint::cuMemAllocPitch);
  if (r == CUDA_SUCCESS) *pitch = row;
  return r;
}

CUresult serve_mem_free(State& s, CUdeviceptr dptr) {
  // A null pointer: the driver's own answer.
  if (dptr == 0) return s.driver.mem_free(dptr);
  CallScope scope(EntryPoint::cuMemFree);
  if (s.captures.any() && owner_of(s, as_ptr(dptr), nullptr) != nullptr)
    if (std::optional<CUresult> refused = refused_by_capture(s)) return *refused;
  if (std::optional<CUresult> r = free_in_cache(s, as_ptr(dptr))) return *r;
  // Allocated before luma was active, or by a path luma does not serve.
  return s.driver.mem_free(dptr);
}

// CUDA accepts a stream-ordered free of cuMemAlloc memory, so a program may hand one a
// luma block; given to the driver, that pointer would free the segment under every other
// block carved from it (or fail). luma takes it into its cache like cuMemFree_v2: its
// fence covers all work issued before the free, on every stream luma tracks, which
// includes the work the free is ordered after. Anything else (cuMemAllocAsync memory above
// all) goes to the driver's function the request named.
CUresult serve_mem_free_async(State& s, CUdeviceptr dptr, CUstream stream,
                              PFN_cuMemFreeAsync real, bool per_thread) {
  if (dptr == 0) return real(dptr, stream);
  // In a capture the driver makes a stream-ordered free a graph node, and answers memory
  // no allocation node of the graph returned - cuMemAlloc memory, so luma's blocks - with
  // CUDA_ERROR_INVALID_VALUE, freeing nothing; the capture stays valid (observed on an
  // H200, driver 580: docs/cuda-facts.md). luma gives that answer for its blocks itself:
  // forwarded, a block's address would name a piece of a segment to the driver.
  if (owner_of(s, as_ptr(dptr), nullptr) != nullptr && stream_captures(s, stream, per_thread))
    return CUDA_ERROR_INVALID_VALUE;
  // On the legacy stream with no current context there is no stream to order the free
  // after: the driver's answer is CUDA_ERROR_INVALID_CONTEXT (tests/fake/README.md; a GPU
  // check), and luma's block must not be freed by it either.
  if (stream == nullptr || stream == LUMA_CU_STREAM_LEGACY) {
    CUcontext ctx = nullptr;
    if (current_context(s, &ctx) && ctx == nullptr &&
        owner_of(s, as_ptr(dptr), nullptr) != nullptr)
      return CUDA_ERROR_INVALID_CONTEXT;
  }
  CallScope scope(EntryPoint::cuMemFreeAsync);
  if (std::optional<CUresult> r = free_in_cache(s, as_ptr(dptr))) return *r;
  // Not luma's block: the program's own stream-ordered (or other driver) memory.
  const CUresult r = real(dptr, stream);
  if (r == CUDA_SUCCESS) {
    on_forwarded_call(s, ForwardedPath::stream_ordered,
                      call_of(core::trace::ForwardedOp::free, core::trace::ForwardedEntry::cuMemFreeAsync,
                              dptr, 0, reinterpret_cast<std::uint64_t>(stream)));
  }
  return r;
}

CUresult serve_mem_get_info(State& s, std::size_t* free, std::size_t* total) {
  CUresult r = s.driver.mem_get_info(free, total);
  if (r != CUDA_SUCCESS || free == nullptr) return r;
  const bool limited = DeviceLimits::wanted(s.settings.core);
  if (!limited && !s.settings.core.report_cached_as_free) return r;
  // Memory the cache holds but the program does not is free to the program: it gets it
  // from luma without a driver call (programs size themselves from this number). Under a
  // memory limit the limit is the total and what is left under it is free
  // (core/limits/limited_mem_info.h): the device's entry is made now if need be, so a
  // program asking before its first allocation already sees its limit.
  ContextEntry* e = nullptr;
  if (limited) {
    e = current_entry(s);
  } else {
    CUcontext ctx = nullptr;
    if (current_context(s, &ctx) && ctx != nullptr) e = s.contexts.find(ctx);
  }
  if (e == nullptr) return r;
  luma::core::MemInfoInput in;
  in.real_free = *free;
  in.real_total = total != nullptr ? *total : SIZE_MAX;
  in.cached = s.settings.core.report_cached_as_free ? e->allocator.cached_bytes() : 0;
  if (e->limited != nullptr) {
    const luma::core::MemoryBudget& budget = e->limited->budget();
    in.limited = true;
    in.limit = budget.limit();
    in.used = budget.used();
  }
  const luma::core::MemInfo out = luma::core::limited_mem_info(in);
  *free = out.free;
  if (total != nullptr) *total = out.total;
  return r;
}

CUresult serve_ipc_get_mem_handle(State& s, CUipcMemHandle* handle, CUdeviceptr dptr) {
  core::SegmentRange segment;
  ContextEntry* e = owner_of(s, as_ptr(dptr), &segment);
  if (e != nullptr && segment.expandable) {
    // Virtual memory has no legacy IPC handle (cuda.h, cuIpcGetMemHandle: memory "created
    // with cuMemAlloc"): the driver's refusal is the right answer, and nothing is exported,
    // so the pages stay free to be unmapped. Said once per process, with the way out.
    const CUresult r = s.driver.ipc_get_mem_handle(handle, dptr);
    static std::atomic<bool> said{false};
    if (!said.exchange(true, std::memory_order_relaxed))
      log_noexcept(LogLevel::warn,
                   "cuIpcGetMemHandle({}): the block lies in an expandable segment, virtual memory "
                   "that legacy IPC cannot export (the driver answered {}); LUMA_CONF=ipc_own_segment:SIZE "
                   "gives allocations of SIZE or more a segment of their own from cuMemAlloc, "
                   "exportable, or expandable_segments:0 turns expandable segments off",
                   as_ptr(dptr), static_cast<int>(r));
    return r;
  }
  // A block's own segment is the program's allocation, exactly as the driver would have
  // made it: its free goes back to the driver as the program's own cuMemFree would.
  if (e != nullptr && !segment.own) {
    // The handle maps the whole segment in the peer: it must never go back to the driver
    // (and to another allocation) while a peer may have it open.
    const bool first = e->driver_device.keep_exported(segment.base);
    core::SegmentRange block;
    if (first && e->allocator.block_of(as_ptr(dptr), &block) && block.base != segment.base)
      log_noexcept(LogLevel::warn,
                   "cuIpcGetMemHandle({}): this block starts {} bytes into a luma segment of {} "
                   "bytes, and the handle maps the whole segment; a peer that adds the offset "
                   "from cuMemGetAddressRange sees this block, a peer that uses the opened "
                   "pointer itself sees the segment's start (LUMA_CONF=ipc_own_segment:SIZE "
                   "gives allocations of SIZE or more a segment of their own)",
                   as_ptr(dptr), static_cast<const char*>(block.base) - static_cast<const char*>(segment.base),
                   segment.size);
  }
  return s.driver.ipc_get_mem_handle(handle, dptr);
}

namespace {

// The live block of an expandable segment holding ptr, and its entry; nullptr for any
// other pointer (and at once while expandable segments are off: the common case costs one
// load).
ContextEntry* expandable_block(State& s, CUdeviceptr ptr, core::SegmentRange* block) noexcept {
  if (!s.settings.core.allocator.expandable_segments) return nullptr;
  core::SegmentRange segment;
  ContextEntry* e = owner_of(s, as_ptr(ptr), &segment);
  if (e == nullptr || !segment.expandable || !e->allocator.block_of(as_ptr(ptr), block)) return nullptr;
  return e;
}

}  // namespace

CUresult serve_mem_get_address_range(State& s, CUdeviceptr* pbase, std::size_t* psize, CUdeviceptr dptr) {
  core::SegmentRange block;
  if (expandable_block(s, dptr, &block) == nullptr) return s.driver.mem_get_address_range(pbase, psize, dptr);
  // Both out-pointers are optional (cuda.h: "If one of them is NULL, it is ignored").
  if (pbase != nullptr) *pbase = as_dptr(block.base);
  if (psize != nullptr) *psize = block.size;
  return CUDA_SUCCESS;
}

CUresult serve_pointer_get_attribute(State& s, void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  const bool range = attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                     attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE;
  core::SegmentRange block;
  if ((!range && attribute != CU_POINTER_ATTRIBUTE_BUFFER_ID) || data == nullptr ||
      expandable_block(s, ptr, &block) == nullptr)
    return s.driver.pointer_get_attribute(data, attribute, ptr);
  if (attribute == CU_POINTER_ATTRIBUTE_BUFFER_ID)
    return s.driver.pointer_get_attribute(data, attribute, as_dptr(block.base));
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
    *static_cast<CUdeviceptr*>(data) = as_dptr(block.base);
  else
    *static_cast<std::size_t*>(data) = block.size;
  return CUDA_SUCCESS;
}

CUresult serve_pointer_get_attributes(State& s, unsigned count, CUpointer_attribute* attributes,
                                      void** data, CUdeviceptr ptr) {
  const CUresult r = s.driver.pointer_get_attributes(count, attributes, data, ptr);
  core::SegmentRange block;
  if (r != CUDA_SUCCESS || attributes == nullptr || data == nullptr ||
      expandable_block(s, ptr, &block) == nullptr)
    return r;
  for (unsigned i = 0; i < count; ++i) {
    if (data[i] == nullptr) continue;
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data[i]) = as_dptr(block.base); break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data[i]) = block.size; break;
      case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        (void)s.driver.pointer_get_attribute(data[i], CU_POINTER_ATTRIBUTE_BUFFER_ID, as_dptr(block.base));
        break;
      default: break;
    }
  }
  return r;
}

// ---- observers -------------------------------------------------------------------------

void on_stream_created(State& s, CUstream stream, unsigned flags) noexcept {
  // A blocking stream takes part in the legacy stream's synchronization: only the
  // one-thread order ends (stream_order.h).
  if (s.stream_order.observe((flags & CU_STREAM_NON_BLOCKING) == 0 ? core::FreePathFact::blocking_stream
                                                                   : core::FreePathFact::unordered_stream))
    stream_order_ended(s);
  if ((flags & CU_STREAM_NON_BLOCKING) == 0) return;  // the legacy stream covers it
  if (!s.serves()) return;
  CUcontext ctx = nullptr;
  if (!current_context(s, &ctx)) return;
  try {
    s.streams.add(ctx, stream);
  } catch (...) {
    log_internal_error("cuStreamCreate (stream not tracked)");
  }
}

void on_stream_destroying(State& s, CUstream stream) noexcept {
  s.streams.remove(stream);  // before the real destroy: no fence on a dead stream
}

// Called before the driver is asked to begin the capture: from the announcement until its
// end, luma makes no call the capture could refuse (capture_registry.h), and asks the
// driver nothing about that stream (docs/cuda-facts.md, "Calls during a capture": a query
// such as cuStreamGetFlags is refused and invalidates the capture). cuCtxGetCurrent is
// allowed in a capture (observed on an H200), and here none has begun yet.
std::uint64_t on_capture_beginning(State& s, CUstream stream, CUstreamCaptureMode mode) noexcept {
  // A capture ends stream-ordered reuse (before it begins: the synchronization that ends
  // the order cannot be made during a capture; stream_order.h).
  if (s.stream_order.observe(core::FreePathFact::capture)) stream_order_ended(s);
  CUcontext ctx = nullptr;
  if (!current_context(s, &ctx)) ctx = nullptr;
  try {
    return s.captures.announce(ctx, stream, static_cast<CaptureMode>(mode), this_thread_id());
  } catch (...) {
    log_internal_error("cuStreamBeginCapture (capture not tracked)");
    return 0;
  }
}

void on_capture_refused(State& s, std::uint64_t ticket) noexcept {
  if (ticket != 0) s.captures.withdraw(ticket);
}

void on_capture_ended(State& s, CUstream stream) noexcept { s.captures.end(stream); }

void on_current_context(State& s, CUcontext ctx) noexcept { note_current(s, ctx); }
void on_current_context_unknown(State& s) noexcept {
  CurrentContext::forget_here();
  // A context made (or found) current on this thread: the thread counts.
  if (s.stream_order.saw_current(nullptr, StreamOrder::thread_number())) stream_order_ended(s);
}
void on_contexts_changed() noexcept { CurrentContext::forget_everywhere(); }
void on_green_stream_created(State& s) noexcept {
  if (s.stream_order.observe(core::FreePathFact::unordered_stream)) stream_order_ended(s);
}

void on_thread_capture_mode(CUstreamCaptureMode mode) noexcept {
  thread_capture_mode() = static_cast<CaptureMode>(mode);
}

}  // namespace luma::shim
