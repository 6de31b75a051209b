// grace_periods.h - when something a hook may still be reading can be freed. A context's
// entry (its allocator, indexes, fences and sinks) is unlinked from the context table when
// the context is destroyed; another thread inside luma may have loaded its pointer just
// before (a free scanning every context's ranges). The entry is freed once every thread
// that was inside luma at the unlink has left luma since: quiescent-state reclamation,
// with "outside luma" (no RecursionGuard held, no Section open) as the quiescent state.
//
// Readers pay, at the outermost entry into luma, one load of the generation and one plain
// store into their own record, and one plain store at the exit: no read-modify-write, no
// fence (a compiler barrier). The store-then-load order a reader needs (announce, then read
// the table) is made by the writer: one membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) per
// unlink fences every running thread of the process (the trace gate uses the same pair,
// trace_event_sink.h). Without membarrier (an old kernel, a seccomp filter), readers
// announce with a sequentially consistent exchange instead. The argument is written out in
// docs/architecture.md, "Freeing what a destroyed context held".
//
// One record per thread alive at once: a thread's record goes back to a free list when the
// thread ends (a pthread key's destructor) and the next new thread takes it, so records are
// bounded by the most threads alive at once, never by the threads that ever lived.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace luma::shim {

// One thread's announcement: 0 while it is outside luma, else the generation it entered in.
// A cache line of its own: each thread stores into its record at every hook, and two
// records on one line would bounce it between the threads' cores.
struct alignas(64) ThreadRecord {
  std::atomic<std::uint64_t> since{0};
  std::atomic<bool> taken{false};
  ThreadRecord* next = nullptr;  // the record made before this one (never freed: reused)
};

namespace grace {
// initial-exec: libluma.so is preloaded (recursion_guard.h), so each is one instruction.
inline thread_local ThreadRecord* t_record [[gnu::tls_model("initial-exec")]] = nullptr;
inline thread_local unsigned t_depth [[gnu::tls_model("initial-exec")]] = 0;
inline std::atomic<std::uint64_t> generation{1};
inline std::atomic<bool> writer_fences{false};  // membarrier registered: readers skip the fence
[[gnu::noinline]] ThreadRecord* take_record() noexcept;  // this thread's first entry (grace_periods.cpp)
}  // namespace grace

class GracePeriods {
 public:
  // The reader's side, nested freely (a depth per thread). RecursionGuard opens one around
  // every hook; anything else that reads context entries outside a hook (the statistics at
  // exit, the signal flusher) opens a Section.
  [[gnu::always_inline]] static void enter() noexcept {
    if (grace::t_depth++ != 0) return;
    ThreadRecord* r = grace::t_record;
    if (r == nullptr) [[unlikely]] {
      r = grace::take_record();
      if (r == nullptr) return;  // no memory: the writers free nothing from now on
    }
    const std::uint64_t g = grace::generation.load(std::memory_order_acquire);
    if (grace::writer_fences.load(std::memory_order_relaxed)) [[likely]] {
      // Release: a writer that reads this value knows what this thread read before it.
      r->since.store(g, std::memory_order_release);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the writer's membarrier fences
    } else {
      r->since.exchange(g, std::memory_order_seq_cst);  // a store with a full fence
    }
  }
  [[gnu::always_inline]] static void leave() noexcept {
    if (--grace::t_depth != 0) return;
    ThreadRecord* r = grace::t_record;
    if (r == nullptr) [[unlikely]]
      return;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    r->since.store(0, std::memory_order_release);  // every read of this entry is before it
  }

  class Section {
   public:
    Section() noexcept { enter(); }
    ~Section() { leave(); }
    Section(const Section&) = delete;
    Section& operator=(const Section&) = delete;
  };

  // The writer's side. After unlinking something (so no reader that enters from now on can
  // find it): the generation it was unlinked in. 0: grace periods cannot be told in this
  // process (no membarrier and no fallback works); never free then.
  static std::uint64_t unlinked() noexcept;
  // Whether every thread that was inside luma when generation g began has left since.
  // The calling thread's own record is not looked at: the caller says it holds nothing
  // unlinked before g (it is past its last use).
  static bool passed(std::uint64_t g) noexcept;

  // Thread records: in use now (threads inside or once inside luma, alive), and made in
  // all (the most alive at once).
  static std::size_t records_in_use() noexcept;
  static std::size_t records_made() noexcept;

  // In a fork child: only the forking thread lives on; every other record is free.
  static void after_fork_in_child() noexcept;
};

}  // namespace luma::shim
