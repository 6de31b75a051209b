// memory_budget.h - how many bytes one device may hold from the driver (LUMA_CONF
// memory_limit / memory_fraction): an interface, so the process's own counter and a
// budget shared by a group of processes (shim/budgets/group_budget.h) sit behind the same
// decorator (limited_device.h). Every method is lock-free and never throws.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace luma::core {

class MemoryBudget {
 public:
  virtual ~MemoryBudget() = default;

  // Takes `bytes` from the budget: true when what is held (by every holder of this budget)
  // stays at or below limit() with them, else false and nothing changed.
  virtual bool take(std::size_t bytes) noexcept = 0;
  // Gives back bytes taken earlier.
  virtual void give_back(std::size_t bytes) noexcept = 0;
  // The most that may be held at once.
  virtual std::size_t limit() const noexcept = 0;
  // What is held now, by every holder (for a group: every live member process).
  virtual std::size_t used() const noexcept = 0;
};

// One process's budget for one device: a counter, taken with a compare-and-swap so that
// concurrent takers never pass the limit together.
class ProcessBudget final : public MemoryBudget {
 public:
  explicit ProcessBudget(std::size_t limit) noexcept : limit_(limit) {}

  bool take(std::size_t bytes) noexcept override {
    std::size_t held = used_.load(std::memory_order_relaxed);
    do {
      if (held > limit_ || bytes > limit_ - held) return false;
    } while (!used_.compare_exchange_weak(held, held + bytes, std::memory_order_acq_rel,
                                          std::memory_order_relaxed));
    return true;
  }
  void give_back(std::size_t bytes) noexcept override {
    used_.fetch_sub(bytes, std::memory_order_acq_rel);
  }
  std::size_t limit() const noexcept override { return limit_; }
  std::size_t used() const noexcept override { return used_.load(std::memory_order_acquire); }

 private:
  const std::size_t limit_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace luma::core
