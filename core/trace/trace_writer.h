// trace_writer.h - records allocator events into a trace file (docs/trace-format.md).
//
// Hot path: write() claims its slot(s) with one atomic add on the global slot counter (the
// slot index is the event's sequence number, so the file order is the order of the calls:
// the allocator calls its sink under its per-device lock, so that order is consistent with
// the allocator's), packs the event into 24 bytes and stores it into a MAP_SHARED mapping
// of the file, the word holding the check last. Nothing is buffered in the process: a
// SIGKILL at any moment leaves every completed write in the file.
//
// The common case - no call-site stack, thread and stream already interned, fields that
// fit one slot, the chunk already mapped - is inline here (no call, no lock, one atomic
// add), so that a sink in another library (libluma.so) compiles it into its own on_event;
// everything else goes to write_slow().
//
// Thread-safe: any number of threads may call write() at once. close() must not race with
// write(). Never throws, never calls getenv, never allocates on the hot path (only when a
// new chunk is mapped or a new call-site stack is seen). A write that cannot be stored
// (disk full, trace over 96 GiB) is dropped and counted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/event.h"
#include "trace/trace_format.h"
#include "trace/trace_header.h"

namespace luma::core {

// One Python frame of an allocation's call site (version 2): the code's file and function
// (qualified) name and the line being executed. The writer copies what it keeps.
struct PythonFrame {
  std::string_view file;
  std::string_view function;
  std::uint32_t line = 0;
};

struct TraceWriterOptions {
  // A helper thread maps and pre-faults the next two chunks while the current one fills,
  // so that no write() takes the page faults of a fresh file page (the kernel's work for a
  // page is about 2.6 us, i.e. 15 ns per event, on the VM of docs/trace-format.md: more
  // than half the budget of 25). Off: the thread that reaches a new chunk maps it.
  bool prefault_thread = true;
};

class TraceWriter {
 public:
  // Creates (truncates) `path` and writes the header. nullptr with *error set on failure.
  static std::unique_ptr<TraceWriter> open(const std::string& path, const TraceHeader& header,
                                           std::string* error,
                                           const TraceWriterOptions& options = {});
  ~TraceWriter();  // close()s
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // `thread` and `stream` are any 64-bit values (the OS thread id, the stream handle);
  // `time_ns` is on the clock of header.clock_base_ns (earlier readings are stored as 0).
  // `stack`: return addresses of an alloc, innermost first (cut to header.stack_depth).
  // `python`: its Python frames, innermost first (cut to trace::kMaxPythonFrames, each
  // name to trace::kMaxPythonNameBytes).
  void write(const Event& event, std::uint64_t thread, std::uint64_t stream,
             trace::EntryPoint entry, std::uint64_t time_ns,
             std::span<const std::uint64_t> stack = {},
             std::span<const PythonFrame> python = {}) noexcept {
    if (stack.empty() && python.empty()) [[likely]] {
      const int tid = lookup(threads_, thread);
      const int sid = lookup(streams_, stream);
      trace::NarrowFields f;
      f.kind = static_cast<std::uint8_t>(event.kind);
      f.device = static_cast<std::uint8_t>(event.device);
      f.entry = static_cast<std::uint8_t>(entry);
      f.thread_id = static_cast<std::uint16_t>(tid);
      f.stream_id = static_cast<std::uint16_t>(sid);
      // An earlier clock reading wraps to a huge time, which fails fits_narrow: write_slow
      // stores it as 0.
      f.time = time_ns - clock_base_;
      f.address = event.address;
      f.size = event.size;
      f.requested = event.requested;
      if ((tid | sid) >= 0 && !closed_ &&
          static_cast<unsigned>(event.device) < (1u << trace::kDeviceBits) &&
          trace::fits_narrow(f)) [[likely]] {
        const std::uint64_t slot = claim(1);
        const trace::Words w = trace::encode_narrow(f);
        if (std::uint64_t* q = mapped_slot(slot)) [[likely]]
          store(q, slot, w.w0, w.w1, w.w2);
        else
          put_unmapped(slot, w);
        return;
      }
    }
    write_slow(event, thread, stream, entry, time_ns, stack, python);
  }

  // A call luma forwarded (a forwarded_call record; call.seq is ignored, call.time_ns is
  // on the clock of header.clock_base_ns, a path longer than kMaxForwardedPathBytes is cut).
  // Not the hot path: always a blob of a few slots.
  void write_forwarded(const trace::ForwardedCall& call) noexcept;

  // Records the slot count in the header and trims the file to its used size. Returns
  // false when the file could not be finished (it still reads as an unfinished trace).
  bool close() noexcept;

  std::uint64_t slots_used() const noexcept;
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

 private:
  TraceWriter(int fd, std::uint64_t header_bytes, const TraceHeader& header);

  // Interning of 64-bit values (threads, streams) into 12-bit ids, lock-free: an id is
  // used by an event only after its definition slot is committed, so definitions always
  // precede their uses in the file.
  struct InternTable {
    InternTable();
    std::unique_ptr<std::atomic<std::uint64_t>[]> keys;
    std::unique_ptr<std::atomic<std::uint8_t>[]> ready;
  };
  // The key's id when it is interned and its definition committed, else -1 (the common
  // case of intern, inline).
  static int lookup(const InternTable& t, std::uint64_t key) noexcept {
    const std::uint64_t i = intern_hash(key) & (trace::kIds - 1);
    return t.keys[i].load(std::memory_order_acquire) == key && key != kEmptyKey &&
                   t.ready[i].load(std::memory_order_acquire) != 0
               ? static_cast<int>(i)
               : -1;
  }
  static std::uint64_t intern_hash(std::uint64_t x) noexcept {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    return x;
  }
  static constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};
  int intern(InternTable& table, trace::SlotKind def_kind, std::uint64_t key) noexcept;
  [[gnu::noinline]] int intern_slow(InternTable& table, trace::SlotKind def_kind,
                                    std::uint64_t key) noexcept;

  // Everything write() does not do inline: stacks, new threads and streams, wide events.
  [[gnu::noinline]] void write_slow(const Event& event, std::uint64_t thread,
                                    std::uint64_t stream, trace::EntryPoint entry,
                                    std::uint64_t time_ns,
                                    std::span<const std::uint64_t> stack,
                                    std::span<const PythonFrame> python) noexcept;
  std::uint32_t intern_stack(std::span<const std::uint64_t> stack) noexcept;
  std::uint32_t intern_python_stack(std::span<const PythonFrame> frames) noexcept;
  std::uint64_t claim(std::uint64_t slots) noexcept {
    return next_slot_.fetch_add(slots, std::memory_order_relaxed);
  }
  // The slot's words when its chunk is mapped and it is not the first slot of its chunk
  // (whose writer asks for the chunk after next to be prepared), else nullptr.
  std::uint64_t* mapped_slot(std::uint64_t slot) const noexcept {
    const std::uint64_t chunk = slot >> trace::kChunkSlotsLog2;
    const std::uint64_t within = slot & (trace::kChunkSlots - 1);
    if (chunk >= trace::kMaxChunks || within == 0) [[unlikely]]
      return nullptr;
    std::uint64_t* base = chunks_[chunk].load(std::memory_order_acquire);
    return base == nullptr ? nullptr : base + within * (trace::kSlotBytes / 8);
  }
  // Stores a slot: the check word last, with release order, so a slot whose third word is
  // non-zero has its first two words in the file too (also after SIGKILL: the stores are
  // in the page cache).
  static void store(std::uint64_t* q, std::uint64_t slot, std::uint64_t w0, std::uint64_t w1,
                    std::uint64_t w2) noexcept {
    q[0] = w0;
    q[1] = w1;
    std::atomic_ref<std::uint64_t>(q[2]).store(trace::with_check(w0, w1, w2, slot),
                                               std::memory_order_release);
  }
  [[gnu::noinline]] void put_unmapped(std::uint64_t slot, trace::Words w) noexcept;
  std::uint64_t* slot_ptr(std::uint64_t slot) noexcept;
  // Extends the file to `chunks` whole chunks, its blocks allocated (grow_mutex_ held).
  bool grow_file(std::uint64_t chunks) noexcept;
  // Maps chunk (extending the file first), once; `populate`: and pre-faults it.
  [[gnu::noinline]] std::uint64_t* map_chunk(std::uint64_t chunk, bool populate) noexcept;
  void request_ahead(std::uint64_t chunk) noexcept;
  void prefault_loop() noexcept;
  void stop_prefault() noexcept;
  void put(std::uint64_t slot, std::uint64_t w0, std::uint64_t w1, std::uint64_t w2) noexcept;
  void put_blob(std::uint64_t slot, trace::BlobType type, const unsigned char* data,
                std::uint32_t length) noexcept;

  int fd_ = -1;
  std::uint64_t header_bytes_ = 0;
  std::uint64_t clock_base_ = 0;
  std::uint32_t stack_depth_ = 0;
  alignas(64) std::atomic<std::uint64_t> next_slot_{0};
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
  std::atomic<bool> broken_{false};  // the file cannot grow: drop without retrying
  std::unique_ptr<std::atomic<std::uint64_t*>[]> chunks_;
  std::mutex grow_mutex_;
  std::uint64_t file_chunks_ = 0;  // chunks the file has been extended to (grow_mutex_)
  InternTable threads_;
  InternTable streams_;
  std::mutex stack_mutex_;
  std::unordered_multimap<std::uint64_t, std::uint32_t> stack_ids_;  // hash -> id
  std::vector<std::vector<std::uint64_t>> stacks_;                  // id - 1 -> frames
  // Python stacks: keyed by a hash of the names' addresses and the lines (the shim hands
  // the same interned names for the same code, so a repeated site hashes no text), and
  // compared by content, so equal stacks named from other storage are merely stored twice.
  struct StoredPythonFrame {
    std::string file, function;
    std::uint32_t line;
  };
  std::unordered_multimap<std::uint64_t, std::uint32_t> python_ids_;  // hash -> id
  std::vector<std::vector<StoredPythonFrame>> python_stacks_;       // id - 1 -> frames
  bool closed_ = false;
  // The helper thread: maps chunks up to prefault_want_.
  std::thread prefault_;
  std::mutex prefault_mutex_;
  std::condition_variable prefault_cv_;
  std::uint64_t prefault_want_ = 0;
  bool prefault_stop_ = false;
};

}  // namespace luma::core
