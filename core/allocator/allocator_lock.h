// allocator_lock.h - the per-device lock of the caching allocator: an uncontended
// lock + unlock is one compare-exchange and one exchange, with no call into the C
// library; a waiter spins briefly, then sleeps in std::atomic::wait (a futex on Linux).
//
// Why not std::mutex: glibc's pthread_mutex_lock/unlock are out-of-line calls with type
// dispatch (recursive, robust, elision), measured at about 25 ns of a 118 ns alloc+free
// pair (tests/bench/bench_allocator), where this lock costs a few ns. Why sleep at all:
// the holder may be inside a device call (a segment reservation, a fence wait that lasts
// as long as the GPU work it waits for), and spinning through that would burn a core.
// The protocol is Drepper's "mutex, take 3" (Futexes Are Tricky, 2011): 0 free,
// 1 locked, 2 locked with possible sleepers; only an unlock that saw 2 notifies.
//
// Satisfies BasicLockable (std::lock_guard). Never throws. Not recursive: the allocator
// never re-enters itself (its device and event sink must not call back into it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace luma::core {

class AllocatorLock {
 public:
  void lock() noexcept {
    std::uint32_t expected = 0;
    if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]]
      return;
    lock_contended();
  }

  bool try_lock() noexcept {
    std::uint32_t expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
      state_.notify_one();
  }

 private:
  // Spins this many rounds (a pause each) before sleeping: about the length of an
  // alloc+free pair, so a waiter behind an ordinary allocation never sleeps.
  static constexpr int kSpins = 128;

  [[gnu::noinline]] void lock_contended() noexcept {
    for (int i = 0; i < kSpins; ++i) {
      if (state_.load(std::memory_order_relaxed) == 0) {
        std::uint32_t expected = 0;
        if (state_.compare_exchange_weak(expected, 1, std::memory_order_acquire,
                                         std::memory_order_relaxed))
          return;
      }
      pause();
    }
    // Announce a sleeper (2), then sleep until an unlock that saw 2 wakes us; whoever
    // takes the lock from here on takes it as 2, so no later sleeper is forgotten.
    while (state_.exchange(2, std::memory_order_acquire) != 0) state_.wait(2, std::memory_order_relaxed);
  }

  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }

  std::atomic<std::uint32_t> state_{0};
};

// Takes m (any Lockable) by `deadline`, or gives up: for readers that must not wait
// forever, such as the statistics printed at exit while another thread may hold the lock
// for good (stuck in a fence wait on GPU work that never ends) or the exiting thread
// itself holds it (a signal handler that calls exit() in the middle of an allocation).
// time_point::max() waits as m.lock() does. Polls every millisecond: only slow paths use it.
template <typename Lockable>
bool lock_until(Lockable& m, std::chrono::steady_clock::time_point deadline) noexcept {
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    m.lock();
    return true;
  }
  for (;;) {
    if (m.try_lock()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace luma::core
