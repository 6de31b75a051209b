// driver_device.h - core::Device over the real driver, for one context: segments are real
// cuMemAlloc_v2 allocations made in that context, fences are pooled events that cover all
// the context's work (free_sync:event; the pool: fence_slots.h; the events: context_fence.h,
// one cuCtxRecordEvent, or stream by stream on older drivers), or nothing (free_sync:none),
// or a cuCtxSynchronize at free time (free_sync:device). docs/architecture.md, "Fences with
// many streams", has the design. Expandable segments (the virtual memory part of
// core/base/device.h) are address ranges from cuMemAddressReserve into which memories (one
// cuMemCreate handle each) are mapped whole, each mapping granted to the context's device
// and every device that can reach it as a peer in one cuMemSetAccess (docs/cuda-facts.md,
// "Virtual memory").
//
// Called only with the owning allocator's lock held (core/base/device.h), so it keeps its pools
// without a lock of its own. Must never call luma's hooks, never throw, and never report a
// fence as done before the driver says its events completed.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "settings/config.h"
#include "base/device.h"
#include "device/capture_registry.h"
#include "device/context_fence.h"
#include "device/fence_slots.h"
#include "driver/real_driver.h"
#include "device/stream_order.h"
#include "device/stream_registry.h"

namespace luma::shim {

class DriverDevice final : public core::Device {
 public:
  // `order`: the process's stream order (stream_order.h), whose legacy order lets a fence
  // be one barrier on the legacy stream; nullptr: always a fence.
  DriverDevice(const RealDriver& driver, CUcontext ctx, core::FreeSync policy,
               StreamRegistry& streams, const CaptureRegistry& captures,
               const StreamOrder* order = nullptr) noexcept
      : driver_(driver), ctx_(ctx), policy_(policy), streams_(streams), captures_(captures), order_(order) {}
  ~DriverDevice() override = default;  // events are left to the driver: see process exit

  core::Reservation reserve(std::size_t bytes) noexcept override;
  // Whether p lies in the span of every segment this device ever reserved (it never
  // shrinks): a pointer outside it is no block of this context's, found without the
  // allocator's lock. Contexts of different devices have disjoint spans (unified
  // addressing gives each device its own range), so a free asks one allocator.
  bool may_hold(const void* p) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= lo_.load(std::memory_order_relaxed) && a < hi_.load(std::memory_order_relaxed);
  }
  bool release(void* base, std::size_t bytes) noexcept override;

  // Virtual memory (core/base/device.h). virtual_memory() asks the driver once: the
  // minimum granularity of pinned memory on the context's device, and an address range of
  // the device's memory and an eighth more (as PyTorch reserves). Page 0 when the driver
  // lacks any of it (one log line; the allocator then makes ordinary segments).
  // A memory is one cuMemCreate handle (its number), mapped whole from its start: cuMemMap
  // maps a handle from offset 0 only (cuda.h: "currently must be zero") and cuMemUnmap
  // takes whole mappings, which is how the allocator's page pool uses memories. Each
  // mapping is granted to the device and its peers in one cuMemSetAccess.
  // During a capture in any context luma's own calls run in relaxed capture mode, as
  // reserve()'s do; unmapping, releasing memory and freeing address space wait until no
  // capture is underway in this context, as release() does (the allocator keeps them).
  VirtualMemory virtual_memory() const noexcept override;
  core::Reservation reserve_address(std::size_t bytes) noexcept override;
  bool release_address(void* base, std::size_t bytes) noexcept override;
  Memory create_memory(std::size_t bytes) noexcept override;
  bool release_memory(std::uint64_t memory, std::size_t bytes) noexcept override;
  int map_memory(void* addr, std::uint64_t memory, std::size_t offset, std::size_t bytes) noexcept override;
  bool unmap_memory(void* addr, std::size_t bytes) noexcept override;
  // The context is gone (after the allocator's drop_device_memory()): unmaps every mapping,
  // releases every handle and frees every address range this device still holds. Whether
  // the driver frees virtual memory with a context is not documented; the stand-in keeps
  // it, and a driver that freed it answers errors, which are then only counted.
  void give_back_virtual_memory() noexcept;
  // Told of each address range reserved and freed, under the allocator's lock like every
  // call here (a tool's description of memory: nvtx_memory.h). Set before use.
  class RangeObserver {
   public:
    virtual void range_reserved(std::uintptr_t base, std::size_t bytes) noexcept = 0;
    virtual void range_released(std::uintptr_t base) noexcept = 0;

   protected:
    ~RangeObserver() = default;
  };
  void set_range_observer(RangeObserver* observer) noexcept { range_observer_ = observer; }
  // What is held now (tests): memories made and not released, mappings, address ranges.
  std::size_t memories() const noexcept { return memories_.size(); }
  std::size_t mappings() const noexcept { return mapped_.size(); }
  std::size_t address_ranges() const noexcept { return ranges_.size(); }

  // While the legacy order holds (stream_order.h) and nothing captures in the context: one
  // action on the legacy stream (cuStreamWaitEvent on it), which every later use of a
  // block on a blocking stream waits behind, and kNoFence - the epoch's blocks are
  // reusable at once (docs/architecture.md, "Stream-ordered reuse", "Several threads").
  // Otherwise a fence (fence_slots.h).
  core::Fence record_fence() noexcept override;
  // free_sync:event batches frees into epochs closed by one fence (recording it after the
  // frees is conservative, so still safe); none needs no fence; device keeps one
  // synchronization per free, its documented meaning.
  core::FenceMode fence_mode() const noexcept override {
    switch (policy_) {
      case core::FreeSync::none: return core::FenceMode::none;
      case core::FreeSync::event: return core::FenceMode::batched;
      case core::FreeSync::device: return core::FenceMode::per_free;
    }
    return core::FenceMode::per_free;
  }
  bool fence_done(core::Fence fence) noexcept override;
  // false while a capture is underway in the context (a wait could invalidate it).
  bool fence_wait(core::Fence fence) noexcept override;
  void fence_release(core::Fence fence) noexcept override;
  // A fence costs what recording it took (with many streams: a query per stream, or what
  // the driver's cuCtxRecordEvent makes of them): epochs grow with it, so that the fence
  // costs each free little (kFenceNsPerBlock).
  std::size_t fence_batch_blocks() const noexcept override {
    return static_cast<std::size_t>(cover_.cost_ns() / kFenceNsPerBlock);
  }

  CUcontext context() const noexcept { return ctx_; }
  // Waits for all the context's work (cuCtxSynchronize in it): when stream-ordered reuse
  // ends, so that no block reused at once can still be reached by work issued before its
  // free (stream_order.h). Nothing while a capture is underway in the context.
  void synchronize() noexcept { slots_.synchronize(); }
  // The context is destroyed and its events with it: forget them without a driver call.
  // After the allocator's drop_device_memory() (which gives every fence token back).
  void forget_events() noexcept;
  // cuIpcGetMemHandle exported the segment at `base`: a peer may map it from now on, so it
  // is never released to the driver. True the first time. Any thread, any time.
  bool keep_exported(const void* base) noexcept;
  // Driver errors: reserve's other than out-of-memory, release's, and fences that an
  // event call or host memory failed and a synchronization made safe (for the log and tests).
  std::uint64_t driver_errors() const noexcept { return driver_errors_; }

 private:
  // Blocks per epoch for each 40 ns the last fence took to record: the fence then costs
  // each free at most 40 ns, about half an alloc+free pair through luma with no stream.
  // A fence of one event on an idle GPU (about 1 us) is below the default 64 blocks, which
  // then stays; 16 idle streams fenced one by one (about 6 us on the stand-in's costs)
  // give 150, as the 8 blocks per driver call of the first design did (docs/architecture.md).
  static constexpr std::uint64_t kFenceNsPerBlock = 40;

  // Whether a capture is underway in this context: luma then records, queries and
  // synchronizes nothing there, and releases no segment.
  bool capture_underway() const noexcept { return slots_.capturing(); }
  // The legacy order's barrier: false when it could not be issued (a fence instead).
  bool legacy_barrier() noexcept;
  bool exported(const void* base) noexcept;
  // Widens may_hold's span to [base, base + bytes).
  void widen_span(std::uintptr_t base, std::size_t bytes) noexcept;
  // Asks the driver what virtual_memory() answers (called once).
  VirtualMemory ask_virtual_memory() const noexcept;
  // What cuMemCreate makes: one page of pinned memory on the context's device.
  CUmemAllocationProp page_prop() const noexcept;
  // Logs a failed driver call of the virtual memory part (and counts it).
  void vm_error(const char* call, std::size_t bytes, CUresult r) noexcept;

  const RealDriver& driver_;
  CUcontext ctx_;
  core::FreeSync policy_;
  StreamRegistry& streams_;
  const CaptureRegistry& captures_;
  const StreamOrder* order_;
  CUevent barrier_ = nullptr;  // recorded once on the legacy stream: what a barrier waits for
  // may_hold's span (lo_ > hi_ while nothing was reserved).
  std::atomic<std::uintptr_t> lo_{~std::uintptr_t{0}};
  std::atomic<std::uintptr_t> hi_{0};
  std::mutex exported_mutex_;             // keep_exported comes from any thread
  std::vector<const void*> exported_;     // segment bases a peer may have mapped
  ContextFence cover_;  // fence_batch_blocks() reads what a record costs
  std::uint64_t driver_errors_ = 0;
  // Virtual memory: asked once (under the allocator's lock, like every method), then the
  // answer, the context's device, and what cuMemSetAccess grants (that device and its
  // peers, read-write).
  mutable bool vm_asked_ = false;
  mutable VirtualMemory vm_{};
  mutable CUdevice device_ = -1;
  mutable std::vector<CUmemAccessDesc> access_;
  mutable bool gpu_direct_rdma_ = false;  // cuMemCreate may ask for GPUDirect RDMA
  // Each memory (its cuMemCreate handle is its number) and its bytes; each mapping (one
  // map_memory call) by address: its bytes and memory; each reserved address range.
  struct Mapping {
    std::size_t bytes = 0;
    std::uint64_t memory = 0;
  };
  std::unordered_map<std::uint64_t, std::size_t> memories_;
  std::map<std::uintptr_t, Mapping> mapped_;
  std::vector<std::pair<std::uintptr_t, std::size_t>> ranges_;
  RangeObserver* range_observer_ = nullptr;
  // Fence tokens are this pool's; free_sync:device records no event (a fence is only taken
  // in a capture, and completed by a synchronization after it).
  FenceSlots slots_{driver_, ctx_, streams_, captures_, cover_,
                    policy_ == core::FreeSync::event, driver_errors_};
};

}  // namespace luma::shim
