// fake_state.h - internal state of the stand-in driver (a TEST DOUBLE for libcuda.so.1):
// settings, devices with their primary contexts, the allocation registry, counters, and the
// stream machinery (one worker thread per stream, FIFO, legacy-stream dependencies).
// Everything is created on first use and never destroyed: worker threads may still run when
// the process exits, so no static destructor may join them or free what they use.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "driver/cuda_abi.h"

namespace luma::fake {

// Why 512: the real driver aligns cuMemAlloc results to at least 256 bytes; 512 keeps
// every block a multiple of what programs (and the shim's carving) may assume.
inline constexpr size_t kAlignment = 512;
inline constexpr uint64_t kDefaultCapacity = 1ULL << 30;  // per device; safe on small hosts
inline constexpr int kDefaultDevices = 2;
inline constexpr int kMaxDevices = 8;
inline constexpr int kDriverVersion = 13000;  // the newest version the stand-in can play
// The oldest LUMA_FAKE_DRIVER_VERSION: cuGetProcAddress came in 11.3 and the stand-in
// (like luma) finds everything through it, so an older driver could not be played.
inline constexpr int kOldestDriverVersion = 11030;
// What every call returns once the device is lost (LUMA_FAKE_LOST_AFTER): cuda.h's
// CUDA_ERROR_DEVICE_UNAVAILABLE. Defined here, not in shim/driver/cuda_abi.h, because only the
// stand-in produces it; luma must treat it like any other driver error.
inline constexpr CUresult kLostDeviceError = 46;
// What an injected event or stream failure returns (LUMA_FAKE_FAIL_EVENTS): the code the
// real driver gives for trouble it cannot name.
inline constexpr CUresult kInjectedEventError = CUDA_ERROR_UNKNOWN;

struct DeviceCounters {
  std::atomic<uint64_t> alloc_calls{0}, free_calls{0}, live_allocations{0}, live_bytes{0},
      peak_bytes{0}, failed_allocs{0};
  // The device's memory at its peak, both kinds (note_device_bytes), and the successful
  // cuMemCreate / cuMemRelease calls naming the device: luma's expandable segments take
  // their memory with cuMemCreate, which live_bytes never sees.
  std::atomic<uint64_t> device_peak_bytes{0}, mem_create_calls{0}, mem_release_calls{0};
};

struct Context;
struct Stream;
struct Capture;
using StreamPtr = std::shared_ptr<Stream>;
using CapturePtr = std::shared_ptr<Capture>;

// One queued operation: runs on the stream's worker after its dependencies completed.
struct Op {
  uint64_t seq = 0;
  std::vector<std::pair<StreamPtr, uint64_t>> deps;
  std::function<void()> fn;
  bool async = false;  // *Async calls: delayed by the configured delay and held by the gate
};

struct Stream {
  Context* ctx = nullptr;
  unsigned flags = 0;
  bool legacy = false;  // the context's NULL / CU_STREAM_LEGACY stream

  std::mutex m;
  std::condition_variable cv;
  std::deque<Op> queue;
  uint64_t submitted = 0;
  uint64_t completed = 0;
  bool stop = false;
  std::thread worker;
  CapturePtr capture;  // the capture sequence this stream takes part in; guarded by capture_m

  bool blocking() const { return legacy || (flags & CU_STREAM_NON_BLOCKING) == 0; }
  bool done(uint64_t seq);
  void wait(uint64_t seq);
};

// A recorded event completes when its stream has run everything queued before the record
// (cuEventRecord: one mark), or every stream of its context has (cuCtxRecordEvent: a mark
// per stream with work queued; none when all were idle).
using Marks = std::vector<std::pair<StreamPtr, uint64_t>>;
struct Event {
  std::mutex m;
  Context* ctx = nullptr;  // current at cuEventCreate (cuCtxRecordEvent wants the same)
  uint64_t generation = 0;  // ctx's generation then: the event dies with that incarnation
  Marks marks;  // empty until recorded: an unrecorded event counts as complete
  unsigned flags = 0;
  // Last recorded inside a capture sequence (then stream/seq are stale): queries and
  // synchronization give CUDA_ERROR_CAPTURED_EVENT, waits join the capture.
  CapturePtr captured;
  StreamPtr captured_on;     // the capturing stream it was recorded on
  size_t captured_pos = 0;   // that stream's node count at the record
};

struct Context {
  int device = 0;
  bool primary = true;               // the device's primary context (else cuCtxCreate's)
  std::atomic<bool> alive{true};     // false once cuCtxDestroy destroyed it (handles stay unique)
  // While cuCtxDestroy, a primary context's reset or its last release runs: a call naming
  // the context, or an event of it, is one the documentation forbids (fake_driver.cpp).
  std::atomic<bool> destroying{false};
  // Destructions so far: an event made before the last one is gone with that incarnation.
  std::atomic<uint64_t> generation{0};
  StreamPtr legacy;
  std::mutex m;                  // guards streams, orders submissions
  std::vector<StreamPtr> streams;  // created and per-thread streams (not legacy)
};

// What made an allocation; decides which calls accept it and what pointer queries say.
enum class MemKind {
  kDevice,      // cuMemAlloc_v2 / cuMemAllocPitch_v2 (legacy-IPC capable)
  kAsync,       // cuMemAllocAsync (stream-ordered pool memory: not legacy-IPC capable)
  kGraph,       // cuMemAllocAsync captured into a graph (a graph memory node)
  kManaged,     // cuMemAllocManaged
  kHost,        // cuMemAllocHost_v2 / cuMemHostAlloc (page-locked host memory)
  kImported,    // mapped by cuIpcOpenMemHandle_v2 from another process
  kMapped,      // a cuMemMap mapping of cuMemCreate memory (fake_vmm.cpp owns its pages)
};

struct Allocation {
  size_t size = 0;  // requested size (the block is rounded up to kAlignment)
  int device = 0;
  Context* ctx = nullptr;  // the context it belongs to: its destruction frees it
  uint64_t buffer_id = 0;
  MemKind kind = MemKind::kDevice;
  unsigned flags = 0;        // cuMemHostAlloc / cuMemAllocManaged flags
  const void* graph = nullptr;  // kGraph: the capture's graph that allocated it
  bool counted() const {     // device memory: counted in the per-device counters
    return kind == MemKind::kDevice || kind == MemKind::kAsync || kind == MemKind::kGraph;
  }
  bool stream_ordered() const { return kind == MemKind::kAsync || kind == MemKind::kGraph; }
};

// A device's memory: one memfd, sized kArenaBytes (sparse) and mapped MAP_SHARED once, from
// which every allocation of the device is carved, so another process can map the same bytes
// (cuIpcOpenMemHandle_v2) through /proc/<pid>/fd/<fd> with one descriptor per device. Best
// fit over free ranges, coalesced on free; freed blocks >= kMmapThreshold give their pages
// back (fallocate PUNCH_HOLE), so untouched or released capacity costs nothing. Guarded by
// State::mem_m.
struct Arena {
  int fd = -1;
  uintptr_t base = 0;
  size_t size = 0;
  std::map<size_t, size_t> free_by_offset;        // offset -> length
  std::multimap<size_t, size_t> free_by_length;   // length -> offset
};

struct Settings {
  std::atomic<uint64_t> capacity{kDefaultCapacity};
  std::atomic<uint64_t> fail_every{0};
  std::atomic<uint64_t> delay_us{0};
  // Microseconds a thread stays inside cuStreamBeginCapture* once its capture is underway,
  // and inside cuStreamEndCapture once it has ended (LUMA_FAKE_CAPTURE_HOLD_US): the window
  // in which the calling thread was preempted, held open.
  std::atomic<uint64_t> capture_hold_us{0};
  // Microseconds a thread stays inside cuMemAlloc_v2 once it has served the allocation
  // (luma_fake_set_alloc_hold_us), holding no lock of the stand-in.
  std::atomic<uint64_t> alloc_hold_us{0};
  // Microseconds a thread stays inside cuCtxDestroy_v2, cuDevicePrimaryCtxReset_v2 and a
  // last cuDevicePrimaryCtxRelease_v2 while the context is being destroyed
  // (luma_fake_set_ctx_destroy_hold_us), holding no lock of the stand-in.
  std::atomic<uint64_t> ctx_destroy_hold_us{0};
  std::atomic<uint64_t> fail_events{0};  // every Nth event/stream call fails; 0: never
  std::atomic<uint64_t> lost_after{0};   // the device is lost after N more calls; 0: never
  // The version cuDriverGetVersion reports; cuGetProcAddress hides later entry points.
  std::atomic<int> driver_version{kDriverVersion};
};

struct State {
  int device_count = kDefaultDevices;
  uint64_t env_capacity = kDefaultCapacity, env_fail_every = 0, env_delay_us = 0;
  uint64_t env_capture_hold_us = 0;
  uint64_t env_fail_events = 0, env_lost_after = 0;
  int env_driver_version = kDriverVersion;
  Settings settings;
  std::atomic<uint64_t> alloc_attempts{0};
  std::atomic<uint64_t> event_calls{0};   // event/stream calls since fail_events was set
  std::atomic<uint64_t> device_calls{0};  // calls since lost_after was set
  std::atomic<bool> lost{false};          // every call returns kLostDeviceError
  std::atomic<uint64_t> injected_event_failures{0};
  // Calls that named a context being destroyed or destroyed, or an event of one (refused).
  std::atomic<uint64_t> destroyed_context_uses{0};
  DeviceCounters counters[kMaxDevices];
  Context contexts[kMaxDevices];
  // Primary contexts: retain/release count (cuDevicePrimaryCtxRelease_v2 at 0 destroys its
  // memory, as cuDevicePrimaryCtxReset_v2 does; the handle stays the same, as a re-created
  // primary context may on the real driver). Contexts made by cuCtxCreate_v2 live in a
  // deque (stable addresses), never freed. Guarded by ctx_m.
  std::mutex ctx_m;
  int primary_refs[kMaxDevices] = {};
  std::deque<Context> created_contexts;
  std::atomic<uint64_t> context_resets{0};  // primary resets + destroyed contexts

  std::mutex mem_m;
  std::map<uintptr_t, Allocation> allocations;
  uint64_t next_buffer_id = 1;
  Arena arenas[kMaxDevices];

  std::mutex handles_m;
  std::unordered_map<const void*, StreamPtr> streams;  // live created streams by handle
  std::unordered_map<const void*, std::shared_ptr<Event>> events;  // live events

  std::mutex gate_m;
  std::condition_variable gate_cv;
  bool gate_open = true;

  std::atomic<bool> initialized{false};
  std::atomic<bool> forked_child{false};  // a child forked after cuInit cannot use CUDA
  int load_pid = 0;
};

State& state();  // created on first call, never destroyed

// Fault injection (fake_control.cpp). Whether this event or stream call is one that fails.
bool event_call_fails();
// Counts one call against LUMA_FAKE_LOST_AFTER; true when the device is (now) lost.
bool device_lost();

// Page-locked host memory (fake_host_memory.cpp): the cost of pinning (LUMA_FAKE_HOST_ALLOC_US)
// paid by each successful cuMemHostAlloc, and the host counters.
void pinned_allocated(size_t size);
void pinned_freed(size_t size);
void reset_host_memory();  // luma_fake_reset: the call counters (live ones keep counting)

// Streams (fake_streams.cpp).
StreamPtr make_stream(Context* ctx, unsigned flags, bool legacy);
void destroy_stream(const StreamPtr& s);  // drains, stops and joins its worker
// Queues fn on s with legacy-stream dependencies; returns its sequence number.
uint64_t submit(const StreamPtr& s, std::function<void()> fn, bool async);
void synchronize_context(Context* ctx);
// cuCtxRecordEvent: the last operation queued so far on every stream of ctx (legacy,
// created, per-thread) that has one; the event completes once each has run, the moment
// the last one does (as on a GPU, with no host thread of its own in between).
Marks context_tails(Context* ctx);
bool marks_done(const Marks& marks);
void wait_marks(const Marks& marks);
uint64_t stream_count(Context* ctx);  // streams of ctx, the legacy one included
StreamPtr per_thread_stream(Context* ctx);  // this thread's default stream (blocking)

// Shared helpers of the entry points (fake_driver.cpp).
CUresult ready();       // initialised, not forked, device not lost
CUresult ready_host();  // initialised, not forked (context bookkeeping)
Context* current();     // this thread's current context, or null
// Maps a stream handle to its stream; `ptds` says whether NULL means this thread's default
// stream (the _ptsz/_ptds entry points) or the legacy stream.
CUresult resolve(CUstream h, bool ptds, StreamPtr& out);
CUcontext handle(Context* c);
// The live allocation containing [p, p + n), or allocations.end(). Caller holds mem_m.
std::map<uintptr_t, Allocation>::iterator containing(State& st, uintptr_t p, size_t n);
size_t rounded_size(size_t n);
// Registers memory at addr as an allocation (new buffer id) and counts it when counted().
// Caller holds mem_m.
void register_allocation(State& st, uintptr_t addr, Allocation a);
// Raises device_peak_bytes of `device` to what it holds now (live_bytes plus the
// cuMemCreate memory not yet freed) if that is higher; called after either grows. Lock-free:
// the two sums are atomics updated under different locks (mem_m, the VMM's), and each
// caller adds before it reads, so of two growths at once at least one sees both.
void note_device_bytes(int device);
// Removes the allocation starting exactly at p (any kind), uncounting it; false if none.
bool unregister(CUdeviceptr p, Allocation* out);
// Gives the memory of an unregistered allocation back (arena, mmap or heap by kind).
void release_memory(uintptr_t p, const Allocation& a);

// What the virtual memory calls hold now (fake_vmm.cpp), for the exit report: memory from
// cuMemCreate not yet freed, per device, and the live handles, reservations and mappings.
struct VmmReport {
  uint64_t physical_bytes[kMaxDevices] = {};
  uint64_t handles = 0, reservations = 0, mappings = 0;
};
VmmReport vmm_report();
// The cuMemCreate memory of a device not yet freed; lock-free (cuMemAlloc and cuMemGetInfo
// count it against the capacity, as a GPU's memory holds both).
uint64_t vmm_physical_bytes(int device);

// Device memory arenas (fake_arena.cpp). Caller holds mem_m.
uintptr_t arena_alloc(State& st, int device, size_t rounded);  // 0 when full
void arena_free(State& st, int device, uintptr_t p, size_t rounded);
// The arena of device holding p: its fd and p's offset; false when p is in none.
bool arena_locate(State& st, int device, uintptr_t p, int* fd, uint64_t* offset);

}  // namespace luma::fake
