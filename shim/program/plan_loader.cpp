// plan_loader.cpp - see plan_loader.h.
#include "program/plan_loader.h"

#include <exception>
#include <new>

#include "config/log.h"
#include "plan/plan_fingerprint.h"
#include "replay/replay_stats_format.h"
#include "observe/run_identity.h"

namespace luma::shim {

void PlanLoader::configure(const std::string& path) noexcept {
  try {
    path_ = path;
    summary_.plan = path;
  } catch (...) {
    path_.clear();
  }
}

const core::PlanFile* PlanLoader::plan_for_new_allocator(const RealDriver& driver) noexcept {
  if (path_.empty()) return nullptr;
  if (!tried_) {
    tried_ = true;
    try {
      load(driver);
    } catch (const std::exception& e) {
      plan_.reset();
      summary_.accepted = false;
      try {
        summary_.refused = e.what();
      } catch (...) {
      }
      // The reader's message names the file and what is wrong with it.
      log_noexcept(LogLevel::warn, "LUMA_PLAN: {}; allocations are served by the caching allocator", e.what());
    }
  }
  return plan_.get();
}

void PlanLoader::load(const RealDriver& driver) {
  auto plan = std::make_unique<core::PlanFile>(core::read_plan_file(path_));
  if (!plan->fingerprint) {
    summary_.refused =
        "the plan has no fingerprint (only plans made from a luma trace can be replayed)";
    log_noexcept(LogLevel::warn, "LUMA_PLAN: refused '{}': {}; allocations are served by the caching allocator",
               path_, summary_.refused);
    return;
  }
  core::TraceHeader current;
  current.command_line = process_command_line();
  current.devices = driver_devices(driver);
  const core::FingerprintMatch m =
      core::match_fingerprint(*plan->fingerprint, core::fingerprint_of(current));
  if (!m.match) {
    summary_.refused = m.reason;
    log_noexcept(LogLevel::warn, "LUMA_PLAN: refused '{}': made for another run ({}); allocations are served by "
               "the caching allocator",
               path_, m.reason);
    return;
  }
  plan_ = std::move(plan);
  summary_.accepted = true;
  log_noexcept(LogLevel::info, "LUMA_PLAN: serving {} device(s) from '{}'", plan_->devices.size(), path_);
}

}  // namespace luma::shim

namespace luma::shim {

void DivergenceLog::on_divergence(int device, const core::Divergence& divergence) noexcept {
  try {
    log_noexcept(LogLevel::warn, "LUMA_PLAN: device {} left its plan: {}; the caching allocator serves it from "
               "now on (blocks already placed stay where they are)",
               device, core::describe_divergence(divergence));
  } catch (...) {
  }
}

}  // namespace luma::shim
