// grace_periods.cpp - thread records (taken at a thread's first entry into luma, given
// back when it ends) and the writer's side: a new generation, the asymmetric fence, and the
// check that every reader of an older generation has left (grace_periods.h).
#include "threads/grace_periods.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>

namespace luma::shim {
namespace {

std::atomic<ThreadRecord*> g_records{nullptr};  // every record made, newest first
std::atomic<std::size_t> g_made{0};
std::atomic<std::size_t> g_in_use{0};
// A thread entered luma without a record (no memory for one): it announces nothing, so no
// grace period can be told from then on.
std::atomic<bool> g_blind{false};
pthread_key_t g_key;
bool g_key_made = false;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

// The thread ends: its record goes back for the next thread (pthread runs this while the
// thread's TLS is still there).
void give_back(void* p) noexcept {
  auto* r = static_cast<ThreadRecord*>(p);
  r->since.store(0, std::memory_order_release);
  if (grace::t_record == r) grace::t_record = nullptr;
  g_in_use.fetch_sub(1, std::memory_order_relaxed);
  r->taken.store(false, std::memory_order_release);
}

void set_up() noexcept {
  g_key_made = pthread_key_create(&g_key, give_back) == 0;
  // Registered before any reader announces (every first entry comes through here first),
  // so no reader skips its fence while the writer's membarrier is not yet allowed.
  grace::writer_fences.store(
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0,
      std::memory_order_release);
}

}  // namespace

namespace grace {

ThreadRecord* take_record() noexcept {
  pthread_once(&g_once, set_up);
  ThreadRecord* r = nullptr;
  for (ThreadRecord* x = g_records.load(std::memory_order_acquire); x != nullptr && r == nullptr; x = x->next) {
    bool free = false;
    if (x->taken.compare_exchange_strong(free, true, std::memory_order_acq_rel)) r = x;
  }
  if (r == nullptr) {
    r = new (std::nothrow) ThreadRecord;
    if (r == nullptr) {
      g_blind.store(true, std::memory_order_seq_cst);
      return nullptr;
    }
    r->taken.store(true, std::memory_order_relaxed);
    r->next = g_records.load(std::memory_order_relaxed);
    while (!g_records.compare_exchange_weak(r->next, r, std::memory_order_acq_rel)) {
    }
    g_made.fetch_add(1, std::memory_order_relaxed);
  }
  g_in_use.fetch_add(1, std::memory_order_relaxed);
  // Without the key the record is never given back: it stays this thread's, still correct.
  if (g_key_made) (void)pthread_setspecific(g_key, r);
  t_record = r;
  return r;
}

}  // namespace grace

std::uint64_t GracePeriods::unlinked() noexcept {
  pthread_once(&g_once, set_up);
  // The unlink (a store) is ordered before the reads of the records (loads) by a full fence
  // here, and each running reader's announcement before its reads of the table by the
  // membarrier: a reader either announced before the unlink was seen (and is waited for)
  // or reads the table after it (and cannot find what was unlinked).
  const std::uint64_t g = grace::generation.fetch_add(1, std::memory_order_seq_cst) + 1;
#if !defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not model fences (GCC refuses them under -Wtsan); for it the
  // acquire and release pairs on the records are what it checks, and they are there.
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
  if (grace::writer_fences.load(std::memory_order_acquire) &&
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    return 0;  // registered, yet refused: nothing can be told
  if (g_blind.load(std::memory_order_seq_cst)) return 0;
  return g;
}

bool GracePeriods::passed(std::uint64_t g) noexcept {
  if (g == 0) return false;
  for (ThreadRecord* r = g_records.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    if (r == grace::t_record) continue;
    const std::uint64_t since = r->since.load(std::memory_order_acquire);
    if (since != 0 && since < g) return false;
  }
  return true;
}

std::size_t GracePeriods::records_in_use() noexcept { return g_in_use.load(std::memory_order_relaxed); }
std::size_t GracePeriods::records_made() noexcept { return g_made.load(std::memory_order_relaxed); }

void GracePeriods::after_fork_in_child() noexcept {
  std::size_t kept = 0;
  for (ThreadRecord* r = g_records.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    if (r == grace::t_record) {
      ++kept;
      continue;
    }
    r->since.store(0, std::memory_order_relaxed);
    r->taken.store(false, std::memory_order_relaxed);
  }
  g_in_use.store(kept, std::memory_order_relaxed);
}

}  // namespace luma::shim
