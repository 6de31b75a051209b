// plan_loader.h - LUMA_PLAN: the plan file read and checked once per process, when the
// first context's allocator is built (cuInit has run, so the devices can be named), and
// handed to every context's core::ContextAllocator. A plan that cannot be read, has no
// fingerprint, or was made for another run (core::match_fingerprint: executable, arguments,
// devices) is refused with one log line, and every device is served by the caching
// allocator. docs/plan-replay.md says what is matched and why.
// Not thread-safe by itself: called under ContextTable's lock (find_or_create's make()).
// Never throws.
#pragma once

#include <memory>
#include <string>

#include "plan/plan_file.h"
#include "driver/real_driver.h"
#include "replay/plan_replay.h"
#include "replay/replay_stats.h"

namespace luma::shim {

class PlanLoader {
 public:
  void configure(const std::string& path) noexcept;
  bool wanted() const noexcept { return !path_.empty(); }

  // The accepted plan (loaded on the first call), or nullptr: no plan wanted or refused.
  const core::PlanFile* plan_for_new_allocator(const RealDriver& driver) noexcept;

  // Whether it was taken, and why not (for the statistics at exit).
  const core::ReplaySummary& summary() const noexcept { return summary_; }

 private:
  void load(const RealDriver& driver);

  std::string path_;
  bool tried_ = false;
  std::unique_ptr<core::PlanFile> plan_;
  core::ReplaySummary summary_;
};

}  // namespace luma::shim

namespace luma::shim {

// Hears each device's divergence from its plan (once per device, no allocator lock held)
// and says so in one log line naming the sequence number and the reason.
class DivergenceLog final : public core::DivergenceSink {
 public:
  void on_divergence(int device, const core::Divergence& divergence) noexcept override;
};

}  // namespace luma::shim
