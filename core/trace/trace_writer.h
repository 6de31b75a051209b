// trace_writer.h - records allocator events into a trace file (docs/trace-format.md).
//
// Hot path: write() claims its slot(s) with one atomic add on the global slot counter (the
// slot index is the event's sequence number, so the file order is the order of the calls:
// the allocator calls its sink under its per-device lock, so that order is consistent with
// the allocator's), packs the event into 24 bytes and stores it into a MAP_SHARED mapping
// of the file, the word holding the check last. Nothing is buffered in the process: a
// SIGKILL at any moment leaves every completed write in the file.
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
#include <thread>
#include <unordered_map>
#include <vector>

#include "event.h"
#include "trace/trace_format.h"
#include "trace/trace_header.h"

namespace luma::core {

struct TraceWriterOptions {
  // A helper thread maps and pre-faults the next chunk while the current one fills, so
  // that no write() takes the page faults of a fresh file page (about 40 ns per event on
  // a VM, against a budget of 25). Off: the thread that reaches a new chunk maps it.
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
  void write(const Event& event, std::uint64_t thread, std::uint64_t stream,
             trace::EntryPoint entry, std::uint64_t time_ns,
             std::span<const std::uint64_t> stack = {}) noexcept;

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
  int intern(InternTable& table, trace::SlotKind def_kind, std::uint64_t key) noexcept;
  [[gnu::noinline]] int intern_slow(InternTable& table, trace::SlotKind def_kind,
                                    std::uint64_t key) noexcept;

  std::uint32_t intern_stack(std::span<const std::uint64_t> stack) noexcept;
  std::uint64_t claim(std::uint64_t slots) noexcept;
  std::uint64_t* slot_ptr(std::uint64_t slot) noexcept;
  [[gnu::noinline]] std::uint64_t* map_chunk(std::uint64_t chunk) noexcept;
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
  bool closed_ = false;
  // The helper thread: maps chunks up to prefault_want_.
  std::thread prefault_;
  std::mutex prefault_mutex_;
  std::condition_variable prefault_cv_;
  std::uint64_t prefault_want_ = 0;
  bool prefault_stop_ = false;
};

}  // namespace luma::core
