// fake_driver.cpp - the entry points of the stand-in libcuda.so.1, a TEST DOUBLE of the CUDA
// driver: host memory serves as device memory (device pointers are host addresses, 512-byte
// aligned), per-device capacity and failure injection, primary contexts per device with a
// per-thread current-context stack, asynchronous streams (fake_streams.cpp) and events.
// It must be linked -Wl,-Bsymbolic so that a preloaded library exporting the same names
// never replaces the calls it makes to itself. It never reads the program's memory outside
// the ranges a call names, and never frees memory at exit.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

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

// ready(), then the injected event/stream failure (LUMA_FAKE_FAIL_EVENTS).
CUresult ready_event_call() {
  if (CUresult r = ready()) return r;
  return event_call_fails() ? kInjectedEventError : CUDA_SUCCESS;
}

Context* current() { return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back(); }

Context* as_context(CUcontext c) {
  State& st = state();
  for (int i = 0; i < st.device_count; ++i) {
    if (reinterpret_cast<Context*>(c) == &st.contexts[i]) return &st.contexts[i];
  }
  std::lock_guard lock(st.ctx_m);
  for (Context& x : st.created_contexts)
    if (reinterpret_cast<Context*>(c) == &x) return x.alive.load() ? &x : nullptr;
  return nullptr;
}

CUcontext handle(Context* c) { return reinterpret_cast<CUcontext>(c); }

// Maps a stream handle to its stream; `ptds` says whether the NULL handle means this
// thread's default stream (the _ptsz/_ptds entry points) or the legacy stream.
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

std::shared_ptr<Event> find_event(CUevent e) {
  State& st = state();
  std::lock_guard lock(st.handles_m);
  auto it = st.events.find(e);
  return it == st.events.end() ? nullptr : it->second;
}

// The live allocation containing [p, p + n), or allocations.end(). Caller holds mem_m.
std::map<uintptr_t, Allocation>::iterator containing(State& st, uintptr_t p, size_t n) {
  auto it = st.allocations.upper_bound(p);
  if (it == st.allocations.begin()) return st.allocations.end();
  --it;
  if (p - it->first >= it->second.size || n > it->second.size - (p - it->first)) {
    return st.allocations.end();
  }
  return it;
}

bool valid_range(CUdeviceptr p, size_t n) {
  State& st = state();
  std::lock_guard lock(st.mem_m);
  return containing(st, p, n == 0 ? 1 : n) != st.allocations.end();
}

// Large blocks come straight from mmap: untouched pages cost nothing (a 1 GiB "device"
// fits on a small host) and malloc's MALLOC_PERTURB_ (set by meson test) never fills them.
inline constexpr size_t kMmapThreshold = size_t{1} << 20;

void* host_alloc(size_t rounded) {
  if (rounded < kMmapThreshold) return std::aligned_alloc(kAlignment, rounded);
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void host_free(uintptr_t p, size_t rounded) {
  if (rounded < kMmapThreshold) {
    std::free(reinterpret_cast<void*>(p));
  } else {
    munmap(reinterpret_cast<void*>(p), rounded);
  }
}

CUresult allocate(CUdeviceptr* dptr, size_t size, bool async) {
  if (CUresult r = ready()) return r;
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  State& st = state();
  DeviceCounters& c = st.counters[ctx->device];
  uint64_t capacity = st.settings.capacity.load();
  uint64_t fail_every = st.settings.fail_every.load();
  uint64_t attempt = ++st.alloc_attempts;
  if ((fail_every != 0 && attempt % fail_every == 0) || size > capacity) {
    ++c.failed_allocs;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard lock(st.mem_m);
  if (c.live_bytes.load() + rounded > capacity) {
    ++c.failed_allocs;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* p = host_alloc(rounded);
  if (p == nullptr) {
    ++c.failed_allocs;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto addr = reinterpret_cast<uintptr_t>(p);
  st.allocations[addr] = Allocation{size, ctx->device, ctx, st.next_buffer_id++, async};
  ++c.alloc_calls;
  ++c.live_allocations;
  uint64_t live = c.live_bytes += rounded;
  if (live > c.peak_bytes.load()) c.peak_bytes = live;
  *dptr = addr;
  return CUDA_SUCCESS;
}

size_t rounded_size(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// Removes the allocation at exactly p from the registry and the counters; false when p is
// not the start of a live allocation (unknown, interior, already freed).
bool unregister(CUdeviceptr p, Allocation* out) {
  State& st = state();
  std::lock_guard lock(st.mem_m);
  auto it = st.allocations.find(p);
  if (it == st.allocations.end()) return false;
  *out = it->second;
  st.allocations.erase(it);
  DeviceCounters& c = st.counters[out->device];
  ++c.free_calls;
  --c.live_allocations;
  c.live_bytes -= rounded_size(out->size);
  return true;
}

CUresult free_sync(CUdeviceptr p) {
  if (CUresult r = ready()) return r;
  // cuMemFree(0) succeeds and does nothing, as on the real driver (probed by others on
  // driver 590: cuMemFree(0) = CUDA_SUCCESS), like cudaFree(nullptr).
  if (p == 0) return CUDA_SUCCESS;
  if (current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  State& st = state();
  Allocation a;
  {
    std::lock_guard lock(st.mem_m);
    auto it = st.allocations.find(p);
    if (it == st.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    a = it->second;
  }
  // "For all other pointers, this API may perform implicit synchronization" (cuMemFree);
  // the real one does, and programs rely on it: wait for all work of the owning context.
  if (!a.async) synchronize_context(a.ctx);
  if (!unregister(p, &a)) return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile
  host_free(p, rounded_size(a.size));
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr p, CUstream h, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (p == 0) return CUDA_SUCCESS;
  Allocation a;
  if (!unregister(p, &a)) return CUDA_ERROR_INVALID_VALUE;
  // The memory itself goes back once the stream reaches the free.
  size_t rounded = rounded_size(a.size);
  submit(s, [p, rounded] { host_free(p, rounded); }, false);
  return CUDA_SUCCESS;
}

CUresult run_on(CUstream h, bool ptds, bool async, std::function<void()> fn) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  uint64_t seq = submit(s, std::move(fn), async);
  if (!async) s->wait(seq);
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
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  std::lock_guard lock(s->m);
  return s->completed >= s->submitted ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult stream_flags(CUstream h, unsigned* flags, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
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
  StreamPtr target;
  uint64_t seq;
  {
    std::lock_guard lock(ev->m);
    target = ev->stream;
    seq = ev->seq;
  }
  if (target != nullptr) submit(s, [target, seq] { target->wait(seq); }, false);
  return CUDA_SUCCESS;
}

CUresult record(CUevent e, CUstream h, bool ptds) {
  if (CUresult r = ready_event_call()) return r;
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  auto ev = find_event(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(ev->m);
  ev->seq = submit(s, nullptr, false);
  ev->stream = s;
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
  std::vector<std::pair<uintptr_t, size_t>> gone;
  {
    std::lock_guard lock(st.mem_m);
    for (auto it = st.allocations.begin(); it != st.allocations.end();) {
      if (it->second.ctx != ctx) {
        ++it;
        continue;
      }
      DeviceCounters& c = st.counters[it->second.device];
      --c.live_allocations;
      c.live_bytes -= rounded_size(it->second.size);
      gone.emplace_back(it->first, rounded_size(it->second.size));
      it = st.allocations.erase(it);
    }
  }
  for (auto [p, n] : gone) host_free(p, n);
  ++st.context_resets;
}

CUresult ctx_sync(Context* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  synchronize_context(ctx);
  return CUDA_SUCCESS;
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
  *version = kDriverVersion;
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

// cuDeviceTotalMem_v2 (cuda.h): "Returns in *bytes the total amount of memory available
// on the device dev in bytes"; CUDA_ERROR_INVALID_VALUE for a null bytes,
// CUDA_ERROR_INVALID_DEVICE for a device that does not exist. Here: the capacity.
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= state().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = static_cast<size_t>(state().settings.capacity.load());
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
  destroy_context_memory(&st.contexts[dev]);
  return CUDA_SUCCESS;
}

// Frees every allocation of the device's primary context; the context stays usable (the
// real one is re-created at its next use, which the runtime makes at once).
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  State& st = state();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  destroy_context_memory(&st.contexts[dev]);
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

// Destroys a context made by cuCtxCreate_v2: its memory is freed, its handle is invalid
// from now on, and it leaves the calling thread's stack if it is there.
CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (CUresult r = ready_host()) return r;
  Context* c = as_context(ctx);
  if (c == nullptr || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  destroy_context_memory(c);
  c->alive.store(false);
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
  return allocate(dptr, bytesize, false);
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
  CUresult r = allocate(dptr, p * height, false);
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
  uint64_t live = st.counters[ctx->device].live_bytes.load();
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
  const Allocation& a = it->second;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = handle(a.ctx);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = a.buffer_id;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = a.device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = it->first;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = a.size;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  StreamPtr s;
  if (CUresult r = resolve(stream, false, s)) return r;
  return allocate(dptr, bytesize, true);  // usable at once: ordered before later work
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  StreamPtr s;
  if (CUresult r = resolve(stream, true, s)) return r;
  return allocate(dptr, bytesize, true);
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
CUresult cuEventQuery(CUevent event) {
  if (CUresult r = ready_event_call()) return r;
  auto ev = find_event(event);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(ev->m);
  if (ev->stream == nullptr) return CUDA_SUCCESS;
  return ev->stream->done(ev->seq) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventSynchronize(CUevent event) {
  if (CUresult r = ready_event_call()) return r;
  auto ev = find_event(event);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  StreamPtr s;
  uint64_t seq;
  {
    std::lock_guard lock(ev->m);
    s = ev->stream;
    seq = ev->seq;
  }
  if (s != nullptr) s->wait(seq);
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent event) { return cuEventDestroy_v2(event); }
CUresult cuEventDestroy_v2(CUevent event) {
  if (CUresult r = ready()) return r;
  State& st = state();
  std::lock_guard lock(st.handles_m);
  return st.events.erase(event) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // extern "C"
