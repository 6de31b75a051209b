// fake_driver.cpp - the entry points of the stand-in libcuda.so.1, a TEST DOUBLE of the CUDA
// driver: host memory serves as device memory (device pointers are host addresses, 512-byte
// aligned, carved from per-device shared arenas: fake_arena.cpp), page-locked host and
// managed memory, pointer queries, per-device capacity and failure injection, primary
// contexts per device with a per-thread current-context stack, asynchronous streams
// (fake_streams.cpp) and events. Stream capture rules: fake_capture.cpp; IPC: fake_ipc.cpp.
// It must be linked -Wl,-Bsymbolic so that a preloaded library exporting the same names
// never replaces the calls it makes to itself. It never reads the program's memory outside
// the ranges a call names, and never frees memory at exit.
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "fake_call_cost.h"
#include "fake_capture.h"
#include "fake_state.h"

#define LUMA_FAKE_API __attribute__((visibility("default")))
#include "fake_driver_api.h"

namespace luma::fake {
namespace {

// This thread's context stack. Trivially destructible on purpose: thread_local objects with
// destructors die before atexit handlers run, and those handlers may still call CUDA.
inline constexpr int kMaxCtxDepth = 32;
struct CtxStack {
  Context* items[kMaxCtxDepth];
  int depth;
  bool empty() const { return depth == 0; }
  Context*& back() { return items[depth - 1]; }
  bool push_back(Context* c) {
    if (depth == kMaxCtxDepth) return false;
    items[depth++] = c;
    return true;
  }
  void pop_back() { --depth; }
};
thread_local CtxStack t_ctx_stack{};

}  // namespace

// Context bookkeeping (current context, device handles) is host-side and keeps working
// when the device is lost; everything that touches the device goes through ready().
CUresult ready_host() {
  State& st = state();
  if (st.forked_child.load() || !st.initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  return CUDA_SUCCESS;
}

CUresult ready() {
  State& st = state();
  if (st.forked_child.load() || !st.initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (device_lost()) return kLostDeviceError;
  return CUDA_SUCCESS;
}

namespace {
// ready(), then the injected event/stream failure (LUMA_FAKE_FAIL_EVENTS).
CUresult ready_event_call() {
  if (CUresult r = ready()) return r;
  return event_call_fails() ? kInjectedEventError : CUDA_SUCCESS;
}

}  // namespace

Context* current() { return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back(); }

namespace {
// cuCtxDestroy (cuda.h): "It is the responsibility of the calling function to ensure that no
// API call issues using ctx while cuCtxDestroy() is executing", and the context's resources
// (its events among them) must not be "passed in subsequent API calls and doing so will
// result in undefined behavior". The stand-in is strict where the driver's answer is
// undefined: such a call is refused, and counted (luma_fake_destroyed_context_uses).
bool used_while_destroyed(const Context& c) {
  if (!c.destroying.load() && c.alive.load()) return false;
  ++state().destroyed_context_uses;
  return true;
}

Context* as_context(CUcontext c) {
  State& st = state();
  for (int i = 0; i < st.device_count; ++i) {
    if (reinterpret_cast<Context*>(c) == &st.contexts[i])
      return used_while_destroyed(st.contexts[i]) ? nullptr : &st.contexts[i];
  }
  std::lock_guard lock(st.ctx_m);
  for (Context& x : st.created_contexts)
    if (reinterpret_cast<Context*>(c) == &x) return used_while_destroyed(x) ? nullptr : &x;
  return nullptr;
}

}  // namespace

CUcontext handle(Context* c) { return reinterpret_cast<CUcontext>(c); }

CUresult resolve(CUstream h, bool ptds, StreamPtr& out) {
  if (CUresult r = ready()) return r;
  if (h == nullptr || h == LUMA_CU_STREAM_LEGACY || h == LUMA_CU_STREAM_PER_THREAD) {
    Context* ctx = current();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    bool per_thread = h == LUMA_CU_STREAM_PER_THREAD || (h == nullptr && ptds);
    out = per_thread ? per_thread_stream(ctx) : ctx->legacy;
    return CUDA_SUCCESS;
  }
  State& st = state();
  std::lock_guard lock(st.handles_m);
  auto it = st.streams.find(h);
  if (it == st.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  out = it->second;
  return CUDA_SUCCESS;
}

namespace {
// The event, if live: an event of a context being destroyed, or of an incarnation that was
// destroyed, is refused (as_context, above) and counted.
bool of_destroyed_context(const Event& ev) {
  if (ev.ctx == nullptr) return false;
  if (!ev.ctx->destroying.load() && ev.ctx->generation.load() == ev.generation) return false;
  ++state().destroyed_context_uses;
  return true;
}

std::shared_ptr<Event> find_event(CUevent e) {
  State& st = state();
  std::shared_ptr<Event> ev;
  {
    std::lock_guard lock(st.handles_m);
    auto it = st.events.find(e);
    if (it != st.events.end()) ev = it->second;
  }
  return ev == nullptr || of_destroyed_context(*ev) ? nullptr : ev;
}

}  // namespace

std::map<uintptr_t, Allocation>::iterator containing(State& st, uintptr_t p, size_t n) {
  auto it = st.allocations.upper_bound(p);
  if (it == st.allocations.begin()) return st.allocations.end();
  --it;
  if (p - it->first >= it->second.size || n > it->second.size - (p - it->first)) {
    return st.allocations.end();
  }
  return it;
}

namespace {
// Whether [p, p + n) is memory a copy or memset may touch: inside one allocation, or across
// adjacent cuMemMap mappings (each page of a growing virtual range is its own mapping, and
// a GPU copies across them as across any contiguous addresses: PyTorch's expandable
// segments map one handle per 2 MiB page and place tensors across pages).
bool valid_range(CUdeviceptr p, size_t n) {
  State& st = state();
  std::lock_guard lock(st.mem_m);
  if (n == 0) n = 1;
  auto it = containing(st, p, 1);
  if (it == st.allocations.end()) return false;
  uintptr_t end = it->first + it->second.size;
  while (p + n > end) {
    if (it->second.kind != MemKind::kMapped) return false;
    ++it;
    if (it == st.allocations.end() || it->first != end || it->second.kind != MemKind::kMapped) return false;
    end += it->second.size;
  }
  return true;
}

inline constexpr size_t kPage = 4096;
size_t page_rounded(size_t n) { return (n + kPage - 1) / kPage * kPage; }

// Host-side memory (page-locked host and managed allocations): whole pages from mmap, as
// the real driver's are page-aligned; never part of a device arena, so never exportable.
// Page-locked memory is resident from the start (pinning faults every page in): populated.
uintptr_t host_pages(size_t size, bool pinned = false) {
  void* p = mmap(nullptr, page_rounded(size), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | (pinned ? MAP_POPULATE : 0), -1, 0);
  return p == MAP_FAILED ? 0 : reinterpret_cast<uintptr_t>(p);
}

}  // namespace

size_t rounded_size(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

void register_allocation(State& st, uintptr_t addr, Allocation a) {
  a.buffer_id = st.next_buffer_id++;  // never reused (CU_POINTER_ATTRIBUTE_BUFFER_ID)
  if (a.counted()) {
    DeviceCounters& c = st.counters[a.device];
    ++c.alloc_calls;
    ++c.live_allocations;
    uint64_t live = c.live_bytes += rounded_size(a.size);
    if (live > c.peak_bytes.load()) c.peak_bytes = live;
    note_device_bytes(a.device);
  }
  st.allocations[addr] = a;
}

void note_device_bytes(int device) {
  DeviceCounters& c = state().counters[device];
  const uint64_t now = c.live_bytes.load() + vmm_physical_bytes(device);
  uint64_t seen = c.device_peak_bytes.load();
  while (now > seen && !c.device_peak_bytes.compare_exchange_weak(seen, now)) {
  }
}

namespace {
void uncount(State& st, const Allocation& a) {
  if (!a.counted()) return;
  DeviceCounters& c = st.counters[a.device];
  --c.live_allocations;
  c.live_bytes -= rounded_size(a.size);
}
}  // namespace

bool unregister(CUdeviceptr p, Allocation* out) {
  State& st = state();
  std::lock_guard lock(st.mem_m);
  auto it = st.allocations.find(p);
  if (it == st.allocations.end()) return false;
  *out = it->second;
  st.allocations.erase(it);
  if (out->counted()) ++st.counters[out->device].free_calls;
  uncount(st, *out);
  return true;
}

void release_memory(uintptr_t p, const Allocation& a) {
  switch (a.kind) {
    case MemKind::kDevice:
    case MemKind::kAsync:
    case MemKind::kGraph: {
      State& st = state();
      std::lock_guard lock(st.mem_m);
      arena_free(st, a.device, p, rounded_size(a.size));
      return;
    }
    case MemKind::kHost:
    case MemKind::kManaged:
      munmap(reinterpret_cast<void*>(p), page_rounded(a.size));
      return;
    case MemKind::kMapped:  // cuMemUnmap gives the pages back (fake_vmm.cpp)
      return;
    case MemKind::kImported: {
      // Mapped from the page holding the exporter's block: see fake_ipc.cpp.
      uintptr_t base = p / kPage * kPage;
      munmap(reinterpret_cast<void*>(base), page_rounded(p - base + rounded_size(a.size)));
      return;
    }
  }
}

namespace {

// A device allocation of `kind` in the current context (cuMemAlloc_v2, cuMemAllocPitch_v2,
// cuMemAllocAsync; graph is the capture's graph for a graph memory node). `unsafe` marks
// the calls a stream capture may prohibit (cuMemAlloc_v2, cuMemAllocPitch_v2).
CUresult allocate(CUdeviceptr* dptr, size_t size, MemKind kind, const void* graph = nullptr,
                  bool unsafe = false) {
  if (CUresult r = ready()) return r;
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (unsafe) {
    if (CUresult r = check_unsafe_call()) return r;
  }
  State& st = state();
  DeviceCounters& c = st.counters[ctx->device];
  uint64_t capacity = st.settings.capacity.load();
  uint64_t fail_every = st.settings.fail_every.load();
  uint64_t attempt = ++st.alloc_attempts;
  if ((fail_every != 0 && attempt % fail_every == 0) || size > capacity) {
    ++c.failed_allocs;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  size_t rounded = rounded_size(size);
  std::lock_guard lock(st.mem_m);
  if (c.live_bytes.load() + vmm_physical_bytes(ctx->device) + rounded > capacity) {
    ++c.failed_allocs;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  uintptr_t addr = arena_alloc(st, ctx->device, rounded);
  if (addr == 0) {
    ++c.failed_allocs;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation a;
  a.size = size;
  a.device = ctx->device;
  a.ctx = ctx;
  a.kind = kind;
  a.graph = graph;
  register_allocation(st, addr, a);
  *dptr = addr;
  return CUDA_SUCCESS;
}

// Page-locked host memory or managed memory of the current context.
CUresult allocate_host_side(uintptr_t* out, size_t size, MemKind kind, unsigned flags) {
  if (CUresult r = ready()) return r;
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = check_unsafe_call()) return r;
  uintptr_t p = host_pages(size, kind == MemKind::kHost);
  if (p == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a;
  a.size = size;
  a.device = ctx->device;
  a.ctx = ctx;
  a.kind = kind;
  a.flags = flags;
  State& st = state();
  std::lock_guard lock(st.mem_m);
  register_allocation(st, p, a);
  *out = p;
  return CUDA_SUCCESS;
}

// Frees memory of one of `kinds` starting exactly at p, after synchronizing its context
// unless it is stream-ordered memory; INVALID_VALUE for anything else.
CUresult free_kind(uintptr_t p, bool host_kinds) {
  State& st = state();
  Allocation a;
  {
    std::lock_guard lock(st.mem_m);
    auto it = st.allocations.find(p);
    if (it == st.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    a = it->second;
  }
  bool is_host = a.kind == MemKind::kHost;
  if (is_host != host_kinds || a.kind == MemKind::kImported || a.kind == MemKind::kMapped)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_unsafe_call()) return r;
  // "For all other pointers, this API may perform implicit synchronization" (cuMemFree);
  // the real one does, and programs rely on it: wait for all work of the owning context.
  if (!a.stream_ordered()) synchronize_context(a.ctx);
  if (!unregister(p, &a)) return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile
  release_memory(p, a);
  return CUDA_SUCCESS;
}

// cuMemFree_v2. No current context is needed: the driver finds the allocation (and its
// context) from the pointer through unified addressing (see README.md).
CUresult free_sync(CUdeviceptr p) {
  if (CUresult r = ready()) return r;
  // cuMemFree(0) succeeds and does nothing, as on the real driver (probed by others on
  // driver 590: cuMemFree(0) = CUDA_SUCCESS), like cudaFree(nullptr).
  if (p == 0) return CUDA_SUCCESS;
  return free_kind(p, false);
}

CUresult free_async(CUdeviceptr p, CUstream h, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (p == 0) return CUDA_SUCCESS;
  State& st = state();
  if (CapturePtr cap = capture_of(s)) {
    // A graph memory free node: only for memory a graph allocation node of this capture
    // made, and once (cuGraphAddMemFreeNode); the memory stays reserved for the graph.
    std::lock_guard cap_lock(captures().m);
    if (cap->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    std::lock_guard lock(st.mem_m);
    auto it = st.allocations.find(p);
    if (it == st.allocations.end() || it->second.kind != MemKind::kGraph) {
      // Observed on an H200 (driver 580): cuMemFreeAsync of cuMemAlloc memory in a
      // global-mode capture answers CUDA_ERROR_INVALID_VALUE and the capture stays valid
      // (cuStreamEndCapture 0). Any address inside cuMemAlloc memory is taken the same
      // way (it is no graph allocation either), and every mode: global is the strictest.
      // An address in no allocation at all is not yet observed: refused and invalidating.
      auto inside = containing(st, p, 1);
      if (inside == st.allocations.end() || inside->second.kind != MemKind::kDevice)
        cap->invalidated = true;
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (it->second.graph != cap->graph.get() || it->second.flags != 0) {
      // A graph allocation of another graph, or freed twice in this one (cuda.h,
      // cuGraphAddMemFreeNode); whether the capture survives is not yet observed: strict.
      cap->invalidated = true;
      return CUDA_ERROR_INVALID_VALUE;
    }
    it->second.flags = 1;  // freed inside its graph
    cap->graph->body->owned.push_back(p);
    ++cap->nodes[s.get()];
    cap->graph->body->nodes.push_back([] {});
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard lock(st.mem_m);
    auto it = st.allocations.find(p);
    if (it == st.allocations.end() || !it->second.counted()) return CUDA_ERROR_INVALID_VALUE;
  }
  if (legacy_blocked(s)) {
    uint64_t seq = 0;
    return enqueue(s, nullptr, false, false, &seq);  // reports and invalidates
  }
  Allocation a;
  if (!unregister(p, &a)) return CUDA_ERROR_INVALID_VALUE;
  // The memory itself goes back once the stream reaches the free.
  submit(s, [p, a] { release_memory(p, a); }, false);
  return CUDA_SUCCESS;
}

CUresult alloc_async(CUdeviceptr* dptr, size_t size, CUstream h, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (CapturePtr cap = capture_of(s)) {
    // A graph memory allocation node: the address is fixed at capture and stays the
    // graph's; the stand-in reserves the memory now.
    {
      std::lock_guard cap_lock(captures().m);
      if (cap->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    CUresult r = allocate(dptr, size, MemKind::kGraph, cap->graph.get());
    if (r != CUDA_SUCCESS) return r;
    std::lock_guard cap_lock(captures().m);
    ++cap->nodes[s.get()];
    cap->graph->body->nodes.push_back([] {});
    return CUDA_SUCCESS;
  }
  if (legacy_blocked(s)) {
    uint64_t seq = 0;
    return enqueue(s, nullptr, false, false, &seq);
  }
  return allocate(dptr, size, MemKind::kAsync);  // usable at once: ordered before later work
}

// Runs fn on the stream (recorded instead when it captures); a synchronous call (!async)
// waits for it, and is one of the calls a capture may forbid.
CUresult run_on(CUstream h, bool ptds, bool async, std::function<void()> fn) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (!async && capture_of(s) == nullptr && !legacy_blocked(s)) {
    if (CUresult r = check_unsafe_call()) return r;
  }
  uint64_t seq = 0;
  if (CUresult r = enqueue(s, std::move(fn), async, !async, &seq)) return r;
  if (!async && seq != 0) s->wait(seq);
  return CUDA_SUCCESS;
}

CUresult memset_on(CUdeviceptr dst, unsigned char v, size_t n, CUstream h, bool ptds,
                   bool async) {
  if (CUresult r = ready()) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!valid_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  return run_on(h, ptds, async,
                [dst, v, n] { std::memset(reinterpret_cast<void*>(dst), v, n); });
}

CUresult copy_on(void* dst, const void* src, size_t n, CUstream h, bool ptds, bool async) {
  if (CUresult r = ready()) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return run_on(h, ptds, async, [dst, src, n] { std::memmove(dst, src, n); });
}

void* host(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

CUresult htod(CUdeviceptr dst, const void* src, size_t n, CUstream h, bool ptds, bool async) {
  if (CUresult r = ready()) return r;
  if (n != 0 && !valid_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy_on(host(dst), src, n, h, ptds, async);
}

CUresult dtoh(void* dst, CUdeviceptr src, size_t n, CUstream h, bool ptds, bool async) {
  if (CUresult r = ready()) return r;
  if (n != 0 && !valid_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy_on(dst, host(src), n, h, ptds, async);
}

CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds, bool async) {
  if (CUresult r = ready()) return r;
  if (n != 0 && (!valid_range(dst, n) || !valid_range(src, n))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return copy_on(host(dst), host(src), n, h, ptds, async);
}

CUresult stream_sync(CUstream h, bool ptds) {
  return run_on(h, ptds, false, nullptr);
}

CUresult stream_query(CUstream h, bool ptds) {
  CallCost cost(CostedCall::stream_query);
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (CapturePtr cap = capture_of(s)) {  // a capturing stream has no completion to report
    std::lock_guard lock(captures().m);
    cap->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (legacy_blocked(s)) {
    uint64_t seq = 0;
    return enqueue(s, nullptr, false, false, &seq);
  }
  if (CUresult r = check_unsafe_call()) return r;
  std::lock_guard lock(s->m);
  return s->completed >= s->submitted ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult stream_flags(CUstream h, unsigned* flags, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  // Observed on an H200 (driver 580): cuStreamGetFlags of a capturing stream answers
  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, in every mode.
  if (CUresult r = refuse_query_of_capturing(s)) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = s->legacy ? CU_STREAM_DEFAULT : s->flags;
  return CUDA_SUCCESS;
}

CUresult wait_event(CUstream h, CUevent e, unsigned flags, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  auto ev = find_event(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Marks marks;
  {
    std::lock_guard lock(ev->m);
    bool handled = false;
    CUresult r = capture_wait(s, *ev, &handled);
    if (handled) return r;
    marks = ev->marks;
  }
  uint64_t queued = 0;
  if (marks.empty()) return enqueue(s, nullptr, false, false, &queued);
  return enqueue(s, [marks] { wait_marks(marks); }, false, false, &queued);
}

CUresult record(CUevent e, CUstream h, bool ptds) {
  CallCost cost(CostedCall::event_record);
  if (CUresult r = ready_event_call()) return r;
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  auto ev = find_event(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(ev->m);
  if (CapturePtr cap = capture_of(s)) {
    std::lock_guard cap_lock(captures().m);
    if (cap->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  if (capture_record(*ev, s)) return CUDA_SUCCESS;  // a node of the capture now
  uint64_t seq = 0;
  if (CUresult r = enqueue(s, nullptr, false, false, &seq)) return r;
  ev->marks.assign(1, {s, seq});
  return CUDA_SUCCESS;
}

CUresult create_stream(CUstream* out, unsigned flags) {
  if (CUresult r = ready_event_call()) return r;
  if (out == nullptr || (flags & ~CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  StreamPtr s = make_stream(ctx, flags, false);
  State& st = state();
  std::lock_guard lock(st.handles_m);
  st.streams[s.get()] = s;
  *out = reinterpret_cast<CUstream>(s.get());
  return CUDA_SUCCESS;
}

CUresult destroy(CUstream h) {
  if (CUresult r = ready()) return r;
  State& st = state();
  StreamPtr s;
  {
    std::lock_guard lock(st.handles_m);
    auto it = st.streams.find(h);
    if (it == st.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    s = it->second;
    st.streams.erase(it);
  }
  destroy_stream(s);  // queued work still completes, as on the real driver
  return CUDA_SUCCESS;
}

// Everything of ctx goes: its work finishes, its memory is freed (what cuCtxDestroy and a
// primary context's reset or last release do on the real driver).
void destroy_context_memory(Context* ctx) {
  State& st = state();
  synchronize_context(ctx);
  std::vector<std::pair<uintptr_t, Allocation>> gone;
  {
    std::lock_guard lock(st.mem_m);
    for (auto it = st.allocations.begin(); it != st.allocations.end();) {
      if (it->second.ctx != ctx) {
        ++it;
        continue;
      }
      uncount(st, it->second);
      gone.emplace_back(it->first, it->second);
      it = st.allocations.erase(it);
    }
  }
  for (auto& [p, a] : gone) release_memory(p, a);
  ++st.context_resets;
}

// The context's destruction: from `destroying` on, calls naming it are refused; the hold
// (luma_fake_set_ctx_destroy_hold_us) keeps the window open; its memory and work go; its
// events die with this incarnation (generation).
void destroy_context(Context* c, bool created) {
  State& st = state();
  c->destroying.store(true);
  if (const uint64_t us = st.settings.ctx_destroy_hold_us.load(); us != 0)
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  destroy_context_memory(c);
  ++c->generation;
  if (created) c->alive.store(false);
  c->destroying.store(false);
}

CUresult ctx_sync(Context* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // Waiting for a context whose stream captures can never finish: refused in every mode.
  if (CUresult r = check_context_sync(ctx)) return r;
  if (CUresult r = check_unsafe_call()) return r;
  synchronize_context(ctx);
  return CUDA_SUCCESS;
}

template <typename T>
CUresult put(void* data, T value) {
  *static_cast<T*>(data) = value;
  return CUDA_SUCCESS;
}

// One attribute of the allocation a (at base) that ptr lies in (cuPointerGetAttribute).
CUresult pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr,
                           uintptr_t base, const Allocation& a) {
  bool host = a.kind == MemKind::kHost;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      return put(data, handle(a.ctx));
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      // Managed memory reports CU_MEMORYTYPE_DEVICE (IS_MANAGED tells it apart); the
      // runtime, not the driver, turns that into cudaMemoryTypeManaged.
      return put(data, host ? unsigned{CU_MEMORYTYPE_HOST} : unsigned{CU_MEMORYTYPE_DEVICE});
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
      return put(data, CUdeviceptr{ptr});  // unified addressing: the same value
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      // Device memory has no host address; host and managed memory do (the same value).
      if (a.kind != MemKind::kHost && a.kind != MemKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
      return put(data, reinterpret_cast<void*>(ptr));
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      return put(data, 1);  // the stand-in's synchronous copies always synchronize
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      return put(data, static_cast<unsigned long long>(a.buffer_id));
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      return put(data, a.kind == MemKind::kManaged ? 1 : 0);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      return put(data, a.device);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      return put(data, a.kind == MemKind::kDevice ? 1 : 0);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      return put(data, CUdeviceptr{base});
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      return put(data, a.size);
    case CU_POINTER_ATTRIBUTE_MAPPED:
      return put(data, 1);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      return put(data, static_cast<void*>(nullptr));  // no CUmemoryPool objects here
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// The default value cuPointerGetAttributes gives for a pointer CUDA does not know.
CUresult unknown_pointer_attribute(void* data, CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      return put(data, static_cast<CUcontext>(nullptr));
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      return put(data, 0u);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      return put(data, CUdeviceptr{0});
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      return put(data, static_cast<void*>(nullptr));
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      return put(data, 0ULL);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      return put(data, size_t{0});
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      return put(data, 0);  // "default NULL values" (cuPointerGetAttributes)
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
      return put(data, 0);
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace
}  // namespace luma::fake

using namespace luma::fake;

extern "C" {

CUresult cuInit(unsigned int flags) {
  State& st = state();
  if (st.forked_child.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  static std::once_flag once;
  std::call_once(once, [&] {
    for (int i = 0; i < st.device_count; ++i) {
      st.contexts[i].device = i;
      st.contexts[i].legacy = make_stream(&st.contexts[i], CU_STREAM_DEFAULT, true);
    }
    st.initialized = true;
  });
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = state().settings.driver_version.load();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = ready_host()) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = state().device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = ready_host()) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= state().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(st.ctx_m);
  ++st.primary_refs[dev];
  *ctx = handle(&st.contexts[dev]);
  return CUDA_SUCCESS;
}

// The last release destroys the primary context's memory (the handle stays valid: the next
// retain "re-creates" it). A release without a retain is an error, as on the real driver.
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  State& st = state();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  {
    std::lock_guard lock(st.ctx_m);
    if (st.primary_refs[dev] == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--st.primary_refs[dev] > 0) return CUDA_SUCCESS;
  }
  destroy_context(&st.contexts[dev], false);
  return CUDA_SUCCESS;
}

// Frees every allocation of the device's primary context; the context stays usable (the
// real one is re-created at its next use, which the runtime makes at once).
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  State& st = state();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  destroy_context(&st.contexts[dev], false);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult r = ready_host()) return r;
  State& st = state();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(st.ctx_m);
  *flags = 0;
  *active = st.primary_refs[dev] > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

// A new context, current to the calling thread (pushed), as cuCtxCreate_v2 does.
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  State& st = state();
  if (pctx == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = nullptr;
  {
    std::lock_guard lock(st.ctx_m);
    c = &st.created_contexts.emplace_back();
  }
  c->device = dev;
  c->primary = false;
  c->legacy = make_stream(c, CU_STREAM_DEFAULT, true);
  if (!t_ctx_stack.push_back(c)) return CUDA_ERROR_INVALID_VALUE;
  *pctx = handle(c);
  return CUDA_SUCCESS;
}

// cuCtxCreate's later ABIs (cudaTypedefs.h: 11040 adds execution-affinity parameters,
// 12050 a CUctxCreateParams block): without parameters they are cuCtxCreate_v2. Execution
// affinity and CIG contexts are not imitated: asked for, they are refused with
// CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY / CUDA_ERROR_NOT_SUPPORTED (codes cuda.h lists for
// the calls; what an H200 answers is not yet observed).
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int count, unsigned int flags,
                        CUdevice dev) {
  if (count < 0 || (count > 0 && params == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (count > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  return cuCtxCreate_v2(pctx, flags, dev);
}
CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  struct Params {  // CUctxCreateParams (cuda.h)
    void* exec_affinity;
    int exec_affinity_count;
    void* cig;
  };
  if (params != nullptr) {
    const auto* p = reinterpret_cast<const Params*>(params);
    if (p->exec_affinity_count > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    if (p->cig != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return cuCtxCreate_v2(pctx, flags, dev);
}

// Destroys a context made by cuCtxCreate_v2: its memory is freed, its handle is invalid
// from now on, and it leaves the calling thread's stack if it is there.
CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (CUresult r = ready_host()) return r;
  Context* c = as_context(ctx);
  if (c == nullptr || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  destroy_context(c, true);
  for (int i = t_ctx_stack.depth; i-- > 0;)
    if (t_ctx_stack.items[i] == c) {
      for (int j = i; j + 1 < t_ctx_stack.depth; ++j) t_ctx_stack.items[j] = t_ctx_stack.items[j + 1];
      t_ctx_stack.pop_back();
    }
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (CUresult r = ready_host()) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = handle(current());
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = ready_host()) return r;
  if (ctx == nullptr) {
    if (!t_ctx_stack.empty()) t_ctx_stack.pop_back();
    return CUDA_SUCCESS;
  }
  Context* c = as_context(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctx_stack.empty()) {
    (void)t_ctx_stack.push_back(c);
  } else {
    t_ctx_stack.back() = c;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (CUresult r = ready_host()) return r;
  Context* c = as_context(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return t_ctx_stack.push_back(c) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (CUresult r = ready_host()) return r;
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = handle(t_ctx_stack.back());
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) { return cuCtxGetDevice_v2(device, nullptr); }

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (CUresult r = ready_host()) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = ctx == nullptr ? current() : as_context(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = c->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  if (CUresult r = ready()) return r;
  return ctx_sync(current());
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (CUresult r = ready()) return r;
  return ctx_sync(ctx == nullptr ? current() : as_context(ctx));
}

CUresult cuMemAlloc(unsigned int*, unsigned int) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuMemFree(unsigned int) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuMemGetInfo(unsigned int*, unsigned int*) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuMemGetAddressRange(unsigned int*, unsigned int*, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  const CUresult r = allocate(dptr, bytesize, MemKind::kDevice, nullptr, true);
  // luma_fake_set_alloc_hold_us: the moment after the allocation, held open.
  if (const uint64_t us = state().settings.alloc_hold_us.load(); r == CUDA_SUCCESS && us != 0)
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return free_sync(dptr); }

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int elementSize) {
  if (CUresult r = ready()) return r;
  if (pitch == nullptr || width == 0 || height == 0 ||
      (elementSize != 4 && elementSize != 8 && elementSize != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t p = rounded_size(width);
  if (p == 0) return CUDA_ERROR_OUT_OF_MEMORY;  // width so large its rounding wrapped
  if (height > SIZE_MAX / p) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = allocate(dptr, p * height, MemKind::kDevice, nullptr, true);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (CUresult r = ready()) return r;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  State& st = state();
  uint64_t cap = st.settings.capacity.load();
  uint64_t live = st.counters[ctx->device].live_bytes.load() + vmm_physical_bytes(ctx->device);
  *free = live >= cap ? 0 : cap - live;
  *total = cap;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  if (CUresult r = ready()) return r;
  State& st = state();
  std::lock_guard lock(st.mem_m);
  auto it = containing(st, dptr, 1);
  if (it == st.allocations.end()) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = it->second.size;
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (CUresult r = ready()) return r;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  std::lock_guard lock(st.mem_m);
  auto it = containing(st, ptr, 1);
  if (it == st.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  return pointer_attribute(data, attribute, ptr, it->first, it->second);
}

// Unlike cuPointerGetAttribute, an unknown pointer is no error: every attribute gets its
// default (zero / NULL) value.
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                void** data, CUdeviceptr ptr) {
  if (CUresult r = ready()) return r;
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& st = state();
  std::lock_guard lock(st.mem_m);
  auto it = containing(st, ptr, 1);
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = it == st.allocations.end()
                     ? unknown_pointer_attribute(data[i], attributes[i])
                     : pointer_attribute(data[i], attributes[i], ptr, it->first, it->second);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  return alloc_async(dptr, bytesize, stream, false);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  return alloc_async(dptr, bytesize, stream, true);
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return free_async(dptr, stream, false);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return free_async(dptr, stream, true);
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  return memset_on(dst, value, n, nullptr, false, false);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t n) {
  return memset_on(dst, value, n, nullptr, true, false);
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  return memset_on(dst, value, n, stream, false, true);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n,
                              CUstream stream) {
  return memset_on(dst, value, n, stream, true, true);
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return htod(dst, src, bytes, nullptr, false, false);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes) {
  return htod(dst, src, bytes, nullptr, true, false);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return dtoh(dst, src, bytes, nullptr, false, false);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) {
  return dtoh(dst, src, bytes, nullptr, true, false);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return dtod(dst, src, bytes, nullptr, false, false);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return dtod(dst, src, bytes, nullptr, true, false);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                              CUstream stream) {
  return htod(dst, src, bytes, stream, false, true);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes,
                                   CUstream stream) {
  return htod(dst, src, bytes, stream, true, true);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return dtoh(dst, src, bytes, stream, false, true);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes,
                                   CUstream stream) {
  return dtoh(dst, src, bytes, stream, true, true);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                              CUstream stream) {
  return dtod(dst, src, bytes, stream, false, true);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                   CUstream stream) {
  return dtod(dst, src, bytes, stream, true, true);
}

CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return create_stream(stream, flags);
}
CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int) {
  return create_stream(stream, flags);  // priorities do not change the order of one stream
}
CUresult cuStreamDestroy(CUstream stream) { return destroy(stream); }
CUresult cuStreamDestroy_v2(CUstream stream) { return destroy(stream); }
CUresult cuStreamSynchronize(CUstream stream) { return stream_sync(stream, false); }
CUresult cuStreamSynchronize_ptsz(CUstream stream) { return stream_sync(stream, true); }
CUresult cuStreamQuery(CUstream stream) { return stream_query(stream, false); }
CUresult cuStreamQuery_ptsz(CUstream stream) { return stream_query(stream, true); }
CUresult cuStreamGetFlags(CUstream stream, unsigned int* flags) {
  return stream_flags(stream, flags, false);
}
CUresult cuStreamGetFlags_ptsz(CUstream stream, unsigned int* flags) {
  return stream_flags(stream, flags, true);
}
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  return wait_event(stream, event, flags, false);
}
CUresult cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned int flags) {
  return wait_event(stream, event, flags, true);
}

CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (CUresult r = ready_event_call()) return r;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto ev = std::make_shared<Event>();
  ev->flags = flags;
  ev->ctx = current();
  ev->generation = ev->ctx == nullptr ? 0 : ev->ctx->generation.load();
  State& st = state();
  std::lock_guard lock(st.handles_m);
  st.events[ev.get()] = ev;
  *event = reinterpret_cast<CUevent>(ev.get());
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent event, CUstream stream) { return record(event, stream, false); }
CUresult cuEventRecord_ptsz(CUevent event, CUstream stream) {
  return record(event, stream, true);
}
// cuda.h (12.5): "Captures in hEvent all the activities of the context hCtx at the time of
// this call"; event and context must be of the same context (CUDA_ERROR_INVALID_HANDLE);
// "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED if the specified context hCtx has a stream in the
// capture mode. In such a case, the call will invalidate all the conflicting captures."
// A null or destroyed hCtx: CUDA_ERROR_INVALID_CONTEXT (a choice: cuda.h does not say that
// null means the current context here, and luma always names one).
CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent) {
  Context* c = hCtx == nullptr ? nullptr : as_context(hCtx);
  CallCost cost(CostedCall::ctx_record_event, c == nullptr ? 0 : stream_count(c));
  if (CUresult r = ready_event_call()) return r;
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto ev = find_event(hEvent);
  if (ev == nullptr || ev->ctx != c) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_context_sync(c)) return r;
  std::lock_guard lock(ev->m);
  ev->captured.reset();  // an ordinary record again, like cuEventRecord outside a capture
  ev->captured_on.reset();
  ev->marks = context_tails(c);
  return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent event) {
  CallCost cost(CostedCall::event_query);
  if (CUresult r = ready_event_call()) return r;
  auto ev = find_event(event);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(ev->m);
  if (CUresult r = capture_event_use(*ev)) return r;
  if (CUresult r = check_unsafe_call()) return r;
  return marks_done(ev->marks) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventSynchronize(CUevent event) {
  if (CUresult r = ready_event_call()) return r;
  auto ev = find_event(event);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Marks marks;
  {
    std::lock_guard lock(ev->m);
    if (CUresult r = capture_event_use(*ev)) return r;
    marks = ev->marks;
  }
  if (CUresult r = check_unsafe_call()) return r;
  wait_marks(marks);
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent event) { return cuEventDestroy_v2(event); }
CUresult cuEventDestroy_v2(CUevent event) {
  if (CUresult r = ready()) return r;
  State& st = state();
  std::lock_guard lock(st.handles_m);
  auto it = st.events.find(event);
  if (it == st.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  // An event of a destroyed context went with it (of_destroyed_context counts the use).
  const bool gone = of_destroyed_context(*it->second);
  st.events.erase(it);
  return gone ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

// Page-locked host memory: page-aligned, reachable from the device at the same address
// (unified addressing), freed only by cuMemFreeHost.
CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if ((Flags & ~unsigned{CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                         CU_MEMHOSTALLOC_WRITECOMBINED}) != 0) {
    if (CUresult r = ready()) return r;
    return CUDA_ERROR_INVALID_VALUE;
  }
  uintptr_t p = 0;
  CUresult r = allocate_host_side(pp == nullptr ? nullptr : &p, bytesize, MemKind::kHost, Flags);
  if (r == CUDA_SUCCESS) {
    pinned_allocated(bytesize);
    *pp = reinterpret_cast<void*>(p);
  }
  return r;
}

// free(NULL) semantics, as the real driver (probed by others: lupinemachines/lupine#850).
CUresult cuMemFreeHost(void* p) {
  if (CUresult r = ready()) return r;
  if (p == nullptr) return CUDA_SUCCESS;
  size_t size = 0;
  {
    State& st = state();
    std::lock_guard lock(st.mem_m);
    auto it = st.allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it != st.allocations.end()) size = it->second.size;
  }
  CUresult r = free_kind(reinterpret_cast<uintptr_t>(p), true);
  if (r == CUDA_SUCCESS) pinned_freed(size);
  return r;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (CUresult r = ready()) return r;
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  State& st = state();
  std::lock_guard lock(st.mem_m);
  auto it = containing(st, reinterpret_cast<uintptr_t>(p), 1);
  if (it == st.allocations.end() || it->second.kind != MemKind::kHost) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: the same address
  return CUDA_SUCCESS;
}

// Managed memory: one address for host and device; freed by cuMemFree_v2.
CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (CUresult r = ready()) return r;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uintptr_t p = 0;
  CUresult r = allocate_host_side(dptr == nullptr ? nullptr : &p, bytesize, MemKind::kManaged,
                                  flags);
  if (r == CUDA_SUCCESS) *dptr = p;
  return r;
}

}  // extern "C"
