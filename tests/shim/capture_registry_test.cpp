// capture_registry_test.cpp - which calls a stream capture forbids, by the capture's mode
// and the calling thread's own mode (cuThreadExchangeStreamCaptureMode), as the CUDA
// Driver API documents them.
#include "capture_registry.h"

#include <gtest/gtest.h>

#include <thread>

namespace luma::shim {
namespace {

CUcontext ctx(int i) { return reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(0x1000 + i)); }
CUstream stream(int i) { return reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(0x2000 + i)); }
constexpr std::uint64_t kCapturer = 1, kOther = 2;

TEST(CaptureRegistry, NothingIsForbiddenWithoutACapture) {
  CaptureRegistry r;
  EXPECT_FALSE(r.any());
  EXPECT_FALSE(r.forbids_unsafe_call(kCapturer, CaptureMode::global));
  EXPECT_FALSE(r.any_in(ctx(0)));
}

TEST(CaptureRegistry, AGlobalCaptureForbidsEveryGlobalModeThread) {
  CaptureRegistry r;
  r.begin(ctx(0), stream(1), CaptureMode::global, kCapturer);
  EXPECT_TRUE(r.forbids_unsafe_call(kCapturer, CaptureMode::global));
  EXPECT_TRUE(r.forbids_unsafe_call(kOther, CaptureMode::global));
  EXPECT_FALSE(r.forbids_unsafe_call(kOther, CaptureMode::thread_local_mode));
  EXPECT_TRUE(r.forbids_unsafe_call(kCapturer, CaptureMode::thread_local_mode));
  EXPECT_FALSE(r.forbids_unsafe_call(kCapturer, CaptureMode::relaxed));
  r.end(stream(1));
  EXPECT_FALSE(r.forbids_unsafe_call(kCapturer, CaptureMode::global));
}

TEST(CaptureRegistry, AThreadLocalCaptureForbidsOnlyItsThread) {
  CaptureRegistry r;
  r.begin(ctx(0), stream(1), CaptureMode::thread_local_mode, kCapturer);
  EXPECT_TRUE(r.forbids_unsafe_call(kCapturer, CaptureMode::global));
  EXPECT_TRUE(r.forbids_unsafe_call(kCapturer, CaptureMode::thread_local_mode));
  EXPECT_FALSE(r.forbids_unsafe_call(kOther, CaptureMode::global));
}

TEST(CaptureRegistry, ARelaxedCaptureForbidsNothingButIsStillUnderway) {
  CaptureRegistry r;
  r.begin(ctx(0), stream(1), CaptureMode::relaxed, kCapturer);
  EXPECT_FALSE(r.forbids_unsafe_call(kCapturer, CaptureMode::global));
  EXPECT_TRUE(r.any_in(ctx(0)));
  EXPECT_FALSE(r.any_in(ctx(1)));
  EXPECT_TRUE(r.capturing(stream(1)));
  EXPECT_FALSE(r.capturing(stream(2)));
}

TEST(CaptureRegistry, EndingAContextEndsItsCaptures) {
  CaptureRegistry r;
  r.begin(ctx(0), stream(1), CaptureMode::global, kCapturer);
  r.begin(ctx(1), stream(2), CaptureMode::relaxed, kOther);
  r.end_context(ctx(0));
  EXPECT_FALSE(r.capturing(stream(1)));
  EXPECT_TRUE(r.capturing(stream(2)));
  EXPECT_FALSE(r.forbids_unsafe_call(kOther, CaptureMode::global));
}

TEST(CaptureRegistry, ThreadIdsAndModesArePerThread) {
  EXPECT_EQ(thread_capture_mode(), CaptureMode::global);
  thread_capture_mode() = CaptureMode::relaxed;
  std::uint64_t other_id = 0;
  CaptureMode other_mode = CaptureMode::relaxed;
  std::thread([&] {
    other_id = this_thread_id();
    other_mode = thread_capture_mode();
  }).join();
  EXPECT_NE(other_id, this_thread_id());
  EXPECT_EQ(other_mode, CaptureMode::global);
  thread_capture_mode() = CaptureMode::global;
}

}  // namespace
}  // namespace luma::shim
