// context_fence.cpp - see context_fence.h.
#include "device/context_fence.h"

#include "config/log.h"

namespace luma::shim {

void ContextFence::refuse(int error) noexcept {
  refused_ = true;
  // Not a capture: a driver that refused the call once is not asked again; the stream by
  // stream fence is slower with many streams but always covers the same work.
  log_noexcept(LogLevel::warn, "cuCtxRecordEvent failed with error {}; fencing stream by stream from now on",
             error);
}

}  // namespace luma::shim
