// fake_control.h - the control and inspection API of the stand-in driver (libcuda.so.1 in
// tests/fake), a TEST DOUBLE: tests read its counters of real allocations and change its
// capacity, failure injection and stream delay at run time. Plain C so any test can use it.
// Never include this from shim/ or core/: it exists only in the stand-in.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifndef LUMA_FAKE_API
#define LUMA_FAKE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Counters of one device since load (or the last luma_fake_reset). "Real" allocations are
// the driver-level ones: each successful cuMemAlloc_v2 / cuMemAllocPitch_v2 /
// cuMemAllocAsync counts once in mem_alloc_calls; each successful free once in
// mem_free_calls; a refused allocation (capacity, injected failure) only in failed_allocs.
struct luma_fake_counters {
  uint64_t mem_alloc_calls;
  uint64_t mem_free_calls;
  uint64_t live_allocations;
  uint64_t live_bytes;   // requested sizes rounded up to the 512-byte alignment
  uint64_t peak_bytes;   // highest live_bytes seen
  uint64_t failed_allocs;
  // The device's memory at its peak as the driver holds it: the highest live_bytes plus
  // the bytes of cuMemCreate handles not yet freed seen at once (luma's expandable segments
  // take memory with cuMemCreate, which live_bytes never sees). A measurement of the
  // stand-in, not a driver behaviour.
  uint64_t device_peak_bytes;
  uint64_t mem_create_calls;   // successful cuMemCreate of memory of this device
  uint64_t mem_release_calls;  // successful cuMemRelease of such a handle
};

// Fills *out for device `device`; returns 0, or -1 for a device that does not exist.
LUMA_FAKE_API int luma_fake_get_counters(int device, struct luma_fake_counters* out);
// Number of stand-in devices (LUMA_FAKE_DEVICES).
LUMA_FAKE_API int luma_fake_device_count(void);
// Capacity of every device in bytes; allocations past it fail with CUDA_ERROR_OUT_OF_MEMORY.
LUMA_FAKE_API void luma_fake_set_capacity(uint64_t bytes);
// Every Nth allocation call fails with CUDA_ERROR_OUT_OF_MEMORY; 0 turns injection off.
// Restarts the count.
LUMA_FAKE_API void luma_fake_set_fail_every(uint64_t n);
// Delay before each asynchronous stream operation runs, in microseconds.
LUMA_FAKE_API void luma_fake_set_delay_us(uint64_t us);
// Microseconds a thread is held inside cuStreamBeginCapture* after its capture is underway,
// and inside cuStreamEndCapture after it has ended (no lock of the stand-in held): the
// moment a preempted thread leaves other threads, held open. 0: none (the default).
LUMA_FAKE_API void luma_fake_set_capture_hold_us(uint64_t us);
// Microseconds a thread is held inside cuMemAlloc_v2 after the allocation was served (no
// lock of the stand-in held): a thread preempted on its way out of the call. 0: none.
LUMA_FAKE_API void luma_fake_set_alloc_hold_us(uint64_t us);
// Microseconds a thread is held inside cuCtxDestroy_v2, cuDevicePrimaryCtxReset_v2 and a
// last cuDevicePrimaryCtxRelease_v2 while the context is being destroyed (no lock of the
// stand-in held): the destruction's window, held open. 0: none.
LUMA_FAKE_API void luma_fake_set_ctx_destroy_hold_us(uint64_t us);
// Calls since load (or the last reset) that named a context while it was being destroyed
// or after it was, or an event of such a context: each was refused (CUDA_ERROR_INVALID_CONTEXT
// for the context, CUDA_ERROR_INVALID_HANDLE for the event).
LUMA_FAKE_API uint64_t luma_fake_destroyed_context_uses(void);
// Gate for asynchronous stream operations: while closed (0) no queued *Async operation
// starts, so a test can observe "still running" without timing. Default open (1).
LUMA_FAKE_API void luma_fake_set_gate_open(int open);
// Every Nth event or stream call (cuEventCreate, cuEventRecord, cuEventQuery,
// cuEventSynchronize, cuStreamCreate*) fails with CUDA_ERROR_UNKNOWN (999); 0 turns it
// off. Restarts the count.
LUMA_FAKE_API void luma_fake_set_fail_events(uint64_t n);
// How many event/stream calls have failed by injection since load (or the last reset).
LUMA_FAKE_API uint64_t luma_fake_injected_event_failures(void);
// The device disappears after n more device calls (memory, copies, streams, events,
// synchronization): from then on each returns CUDA_ERROR_DEVICE_UNAVAILABLE (46). Context
// and device-handle bookkeeping keeps working. 0: never. Restarts the count.
LUMA_FAKE_API void luma_fake_set_lost_after(uint64_t n);
// The device disappears now (every device call returns 46).
LUMA_FAKE_API void luma_fake_lose_device(void);
// The device is back (a test double's luxury: real lost devices stay lost).
LUMA_FAKE_API void luma_fake_restore_device(void);
// The driver version the stand-in plays (cuDriverGetVersion's answer; cuGetProcAddress knows
// no entry point that came later, as an older driver does not): 11030..13000, else -1 and
// nothing changes. For luma's paths on older drivers (cuCtxRecordEvent came in 12050).
LUMA_FAKE_API int luma_fake_set_driver_version(int version);
// Page-locked host memory (cuMemAllocHost_v2 / cuMemHostAlloc / cuMemFreeHost), all
// devices: successful calls since load (or the last reset) and what is live now.
struct luma_fake_host_counters {
  uint64_t alloc_calls;
  uint64_t free_calls;
  uint64_t live_allocations;
  uint64_t live_bytes;  // requested sizes
};
LUMA_FAKE_API void luma_fake_get_host_counters(struct luma_fake_host_counters* out);
// The cost of pinning: each successful cuMemHostAlloc / cuMemAllocHost_v2 takes this many
// microseconds more (the real driver's take milliseconds). 0: none (the default).
LUMA_FAKE_API void luma_fake_set_host_alloc_us(uint64_t us);
// Zeroes the counters (live_* keep describing live memory; peak_bytes restarts from it,
// device_peak_bytes from it plus the cuMemCreate memory held; the call counts of the exit
// report, the uses of destroyed contexts) and resets capacity, failure injection
// (allocations, events, lost device), delay, the capture, allocation and context
// destruction holds, gate and driver version to their environment defaults.
LUMA_FAKE_API void luma_fake_reset(void);

#ifdef __cplusplus
}
#endif
