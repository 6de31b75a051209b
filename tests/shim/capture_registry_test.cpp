// capture_registry_test.cpp - which calls a stream capture forbids, by the capture's mode
// and the calling thread's own mode (cuThreadExchangeStreamCaptureMode), as the CUDA
// Driver API documents them; and the gate that orders luma's own calls against a capture's
// announcement (docs/architecture.md, "Stream capture").
#include "device/capture_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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
  r.announce(ctx(0), stream(1), CaptureMode::global, kCapturer);
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
  r.announce(ctx(0), stream(1), CaptureMode::thread_local_mode, kCapturer);
  EXPECT_TRUE(r.forbids_unsafe_call(kCapturer, CaptureMode::global));
  EXPECT_TRUE(r.forbids_unsafe_call(kCapturer, CaptureMode::thread_local_mode));
  EXPECT_FALSE(r.forbids_unsafe_call(kOther, CaptureMode::global));
}

TEST(CaptureRegistry, ARelaxedCaptureForbidsNothingButIsStillUnderway) {
  CaptureRegistry r;
  r.announce(ctx(0), stream(1), CaptureMode::relaxed, kCapturer);
  EXPECT_FALSE(r.forbids_unsafe_call(kCapturer, CaptureMode::global));
  EXPECT_TRUE(r.any_in(ctx(0)));
  EXPECT_FALSE(r.any_in(ctx(1)));
  EXPECT_TRUE(r.capturing(stream(1)));
  EXPECT_FALSE(r.capturing(stream(2)));
}

TEST(CaptureRegistry, EndingAContextEndsItsCaptures) {
  CaptureRegistry r;
  r.announce(ctx(0), stream(1), CaptureMode::global, kCapturer);
  r.announce(ctx(1), stream(2), CaptureMode::relaxed, kOther);
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

// A capture announced while another thread is inside a Hold (it checked that no capture
// is underway and is about to make its driver call) is not in place until that Hold ends:
// the check and the call see the same captures.
TEST(CaptureGate, AnAnnouncementWaitsForEveryHoldInFlight) {
  CaptureRegistry r;
  std::atomic<bool> announced{false};
  std::thread capturer;
  {
    const auto held = r.hold();
    EXPECT_FALSE(r.any_in(ctx(0)));
    capturer = std::thread([&] {
      r.announce(ctx(0), stream(1), CaptureMode::relaxed, kCapturer);
      announced = true;
    });
    // Give the announcement every chance to overtake the Hold: it must not.
    for (int i = 0; i < 50; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_FALSE(announced.load());
      ASSERT_FALSE(r.any());
    }
  }
  capturer.join();
  EXPECT_TRUE(announced.load());
  const auto held = r.hold();
  EXPECT_TRUE(r.any_in(ctx(0)));
}

// A Hold is re-entrant: a thread already inside one (luma's fence inside its release, say)
// takes another while an announcement waits, without deadlock.
TEST(CaptureGate, ANestedHoldDoesNotWaitForAWaitingAnnouncement) {
  CaptureRegistry r;
  std::atomic<bool> announced{false};
  std::thread capturer;
  {
    const auto outer = r.hold();
    capturer = std::thread([&] {
      r.announce(ctx(0), stream(1), CaptureMode::global, kCapturer);
      announced = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto inner = r.hold();
    EXPECT_FALSE(announced.load());
  }
  capturer.join();
  EXPECT_TRUE(r.any());
}

// The driver refused the capture: its announcement goes, and only it.
TEST(CaptureGate, AWithdrawnAnnouncementLeavesTheOthers) {
  CaptureRegistry r;
  const std::uint64_t first = r.announce(ctx(0), stream(1), CaptureMode::global, kCapturer);
  const std::uint64_t second = r.announce(ctx(0), stream(1), CaptureMode::global, kCapturer);
  EXPECT_NE(first, second);
  r.withdraw(second);  // e.g. CUDA_ERROR_ILLEGAL_STATE: the stream captures already
  EXPECT_TRUE(r.capturing(stream(1)));
  r.withdraw(first);
  EXPECT_FALSE(r.any());
}

// A capture ended on a stream while another thread had announced the next one on it:
// the end takes the older announcement, the new capture stays known.
TEST(CaptureGate, AnEndTakesTheStreamsOldestAnnouncement) {
  CaptureRegistry r;
  r.announce(ctx(0), stream(1), CaptureMode::global, kCapturer);
  r.announce(ctx(0), stream(1), CaptureMode::relaxed, kOther);
  r.end(stream(1));
  EXPECT_TRUE(r.capturing(stream(1)));
  EXPECT_FALSE(r.forbids_unsafe_call(kOther, CaptureMode::global));  // the relaxed one is left
  r.end(stream(1));
  EXPECT_FALSE(r.any());
}

// A context's announced end keeps luma's calls out of it (any_in) without being a capture:
// no stream captures, nothing the program calls is forbidden, a stream's end (even of the
// NULL stream) leaves it; the withdrawal or the context's end takes it.
TEST(CaptureRegistry, AContextsAnnouncedEndIsNoCapture) {
  CaptureRegistry r;
  const std::uint64_t ticket = r.announce_context_end(ctx(0));
  EXPECT_TRUE(r.any());
  EXPECT_TRUE(r.any_in(ctx(0)));
  EXPECT_FALSE(r.any_in(ctx(1)));
  EXPECT_FALSE(r.capturing(nullptr));
  for (CaptureMode m : {CaptureMode::global, CaptureMode::thread_local_mode, CaptureMode::relaxed})
    EXPECT_FALSE(r.forbids_unsafe_call(this_thread_id(), m));
  r.end(nullptr);
  EXPECT_TRUE(r.any_in(ctx(0)));
  r.withdraw(ticket);
  EXPECT_FALSE(r.any());
  r.announce_context_end(ctx(0));
  r.announce(ctx(0), stream(1), CaptureMode::global, kCapturer);
  r.end_context(ctx(0));
  EXPECT_FALSE(r.any());
}

// Like a capture's, a context's announced end waits for the Holds in flight: a fence
// decided before it reaches the driver before the destruction begins.
TEST(CaptureGate, AContextsAnnouncedEndWaitsForEveryHoldInFlight) {
  CaptureRegistry r;
  std::atomic<bool> announced{false};
  std::thread destroyer;
  {
    const auto held = r.hold();
    destroyer = std::thread([&] {
      r.announce_context_end(ctx(0));
      announced = true;
    });
    for (int i = 0; i < 50; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_FALSE(announced.load());
      ASSERT_FALSE(r.any_in(ctx(0)));
    }
  }
  destroyer.join();
  EXPECT_TRUE(r.any_in(ctx(0)));
}

}  // namespace
}  // namespace luma::shim
