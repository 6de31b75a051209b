// fence_slots_test.cpp - the fences of freed memory when host memory runs out during a
// capture (shim/device/fence_slots.h, shim/pinned/host_cache_fences.h): nothing can be recorded or
// synchronized then, yet the freed memory must not be reused before the work queued ahead
// of its free has finished. Over the stand-in driver, linked in (its soname is
// libcuda.so.1, so the shim's own dlopen finds this same library and its control API).
// Host memory failure is injected by this program's own operator new.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "device/capture_registry.h"
#include "device/context_fence.h"
#include "device/context_table.h"
#include "fake_control.h"
#include "fake_driver_api.h"
#include "device/fence_slots.h"
#include "pinned/host_cache_fences.h"
#include "driver/real_driver.h"
#include "device/stream_registry.h"

namespace {
// The next this many operator new calls of this program throw (the stand-in driver, linked
// in, allocates through it too: a count, not a switch, hits only luma's own first one).
std::atomic<int> refusals{0};
}  // namespace

void* operator new(std::size_t bytes) {
  if (refusals.load(std::memory_order_relaxed) > 0 && refusals.fetch_sub(1) > 0) throw std::bad_alloc();
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
// GCC sees free() in an operator delete as a mismatch; here it pairs with the malloc above.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace luma::shim {

// This program has no dlsym of luma's (dlsym_hook.cpp is not linked): glibc's is the one.
DlsymFn real_dlsym() noexcept { return &::dlsym; }

namespace {

class FencesWithoutMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    luma_fake_reset();
    ASSERT_TRUE(load_real_driver(driver_));
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&work_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&captured_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc_v2(&buffer_, 1 << 20), CUDA_SUCCESS);
    ASSERT_EQ(cuEventCreate(&queued_done_, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  }
  void TearDown() override {
    refusals = 0;
    luma_fake_set_gate_open(1);
    cuCtxSynchronize();
    cuEventDestroy_v2(queued_done_);
    cuMemFree_v2(buffer_);
    cuStreamDestroy_v2(captured_);
    cuStreamDestroy_v2(work_);
    luma_fake_reset();
  }
  // Work on another stream that cannot start yet (the stand-in's gate), and an event after
  // it that tells when it finished: what the freed memory's fence must wait for.
  void queue_work() {
    luma_fake_set_gate_open(0);
    ASSERT_EQ(cuMemsetD8Async(buffer_, 7, 1 << 20, work_), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(queued_done_, work_), CUDA_SUCCESS);
  }
  void begin_capture() {
    ASSERT_EQ(cuStreamBeginCapture_v2(captured_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    captures_.announce(ctx_, captured_, CaptureMode::global, this_thread_id());
  }
  void end_capture() {
    CUgraph graph = nullptr;
    ASSERT_EQ(cuStreamEndCapture(captured_, &graph), CUDA_SUCCESS);
    captures_.end(captured_);
    if (graph != nullptr) cuGraphDestroy(graph);
  }
  // The queued work may start now, but only after a while: a fence reported done before
  // it finished is seen as such.
  static void release_work_slowly() {
    luma_fake_set_delay_us(200'000);
    luma_fake_set_gate_open(1);
  }
  bool queued_work_finished() const { return cuEventQuery(queued_done_) == CUDA_SUCCESS; }
  // The fence `make` gives during a capture, with no host memory for its first allocation,
  // is not done while the capture lasts (`done` says), and after it done only once the
  // work queued before it finished. Returns the fence, for the caller to release.
  template <class Make, class Done>
  auto expect_owed_through_the_capture(Make make, Done done) {
    queue_work();
    begin_capture();
    refusals = 1;
    const auto fence = make();
    EXPECT_EQ(refusals, 0) << "no host memory was asked for";
    EXPECT_NE(fence, 0u) << "the freed block would be reused at once";
    EXPECT_FALSE(done(fence)) << "done during the capture, before the queued work ran";
    end_capture();
    release_work_slowly();
    EXPECT_TRUE(done(fence));
    EXPECT_TRUE(queued_work_finished()) << "done before the work queued ahead of the free finished";
    return fence;
  }
  // ctx's entry in `contexts` (a table never frees its entries: entry_ does).
  void add_entry(ContextTable& contexts) {
    entry_ = std::make_unique<ContextEntry>(driver_, ctx_, 0, settings_, streams_, captures_);
    ASSERT_NE(contexts.find_or_create(ctx_, [&] { return entry_.get(); }), nullptr);
  }

  RealDriver driver_;
  CUcontext ctx_ = nullptr;
  CUstream work_ = nullptr;
  CUstream captured_ = nullptr;
  CUdeviceptr buffer_ = 0;
  CUevent queued_done_ = nullptr;
  StreamRegistry streams_;
  CaptureRegistry captures_;
  ContextFence cover_;
  core::Settings settings_;
  std::unique_ptr<ContextEntry> entry_;  // before any table that holds it goes
};

// A device block freed during a capture with no host memory for a fence slot: the fence
// is not done while the capture lasts, and after it, done only once the work queued
// before the free has finished (the context was synchronized).
TEST_F(FencesWithoutMemory, DeviceFenceDuringACaptureWaitsForTheWorkQueuedBefore) {
  std::uint64_t synchronizations = 0;
  FenceSlots slots(driver_, ctx_, streams_, captures_, cover_, true, synchronizations);
  const FenceSlots::Token token = expect_owed_through_the_capture(
      [&] { return slots.fence(); },
      [&](FenceSlots::Token t) {
        const bool polled = slots.poll(t);
        EXPECT_EQ(slots.wait(t), polled) << "a wait answers as a poll: false during the capture";
        return polled;
      });
  EXPECT_EQ(synchronizations, 1u);
  slots.release(token);
}

// One synchronization after the capture settles every such fence given during it.
TEST_F(FencesWithoutMemory, OneSynchronizationSettlesEveryOwedDeviceFence) {
  std::uint64_t synchronizations = 0;
  FenceSlots slots(driver_, ctx_, streams_, captures_, cover_, true, synchronizations);
  begin_capture();
  refusals = 1;
  const FenceSlots::Token a = slots.fence();
  refusals = 1;
  const FenceSlots::Token b = slots.fence();
  EXPECT_EQ(refusals, 0) << "no host memory was asked for";
  EXPECT_NE(a, FenceSlots::kNone);
  EXPECT_NE(b, FenceSlots::kNone);
  end_capture();
  EXPECT_TRUE(slots.wait(a));
  EXPECT_TRUE(slots.poll(b));
  EXPECT_EQ(synchronizations, 1u);
  // Outside a capture, no host memory means a synchronization at once and no fence.
  refusals = 1;
  const FenceSlots::Token c = slots.fence();
  EXPECT_EQ(refusals, 0) << "no host memory was asked for";
  EXPECT_EQ(c, FenceSlots::kNone);
  EXPECT_EQ(synchronizations, 2u);
}

// The pinned host cache's fence, with no host memory for it during a capture: not done
// while the capture lasts, and after it only once the queued work finished.
TEST_F(FencesWithoutMemory, HostFenceDuringACaptureWaitsForTheWorkQueuedBefore) {
  ContextTable contexts;
  add_entry(contexts);
  DriverHostFences fences(driver_, contexts, streams_, captures_);
  const core::HostFence fence = expect_owed_through_the_capture(
      [&] { return fences.record(); }, [&](core::HostFence f) { return fences.done(f); });
  fences.release(fence);
}

// Host memory for the fence but not for its context's pool of fences: the same holds.
TEST_F(FencesWithoutMemory, HostFenceWithoutItsContextsPoolDuringACaptureWaits) {
  ContextTable contexts;
  DriverHostFences fences(driver_, contexts, streams_, captures_);
  // With no context yet, a fence has no part: its slot is made and left free, so below it
  // is reused without memory and only the context's pool cannot be made.
  ASSERT_EQ(fences.record(), core::kNoHostFence);
  add_entry(contexts);
  const core::HostFence fence = expect_owed_through_the_capture(
      [&] { return fences.record(); }, [&](core::HostFence f) { return fences.done(f); });
  fences.release(fence);
}

}  // namespace
}  // namespace luma::shim
