// trace_writer.cpp - the trace writer: slot claiming, chunk mapping, interning, packing.
// Must never: throw, block the hot path on a lock (only chunk growth and new stacks take
// one), or leave a slot whose check word is stored before its other words.
#include "trace/trace_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace luma::core {

using namespace trace;

namespace {

// MADV_POPULATE_WRITE (Linux 5.14) pre-faults a new chunk writable in one call, so the hot
// path does not take a page fault every 170 events; older kernels refuse it harmlessly.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

constexpr int kInternProbes = 8;  // a full neighbourhood sends the event to the wide form
constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};

inline std::uint64_t hash64(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

bool write_all(int fd, const char* data, std::size_t size, off_t offset) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
  return true;
}

}  // namespace

TraceWriter::InternTable::InternTable()
    : keys(new std::atomic<std::uint64_t>[kIds]), ready(new std::atomic<std::uint8_t>[kIds]) {
  for (std::uint64_t i = 0; i < kIds; ++i) {
    keys[i].store(kEmptyKey, std::memory_order_relaxed);
    ready[i].store(0, std::memory_order_relaxed);
  }
}

std::unique_ptr<TraceWriter> TraceWriter::open(const std::string& path,
                                               const TraceHeader& header, std::string* error,
                                               const TraceWriterOptions& options) {
  const std::string block = encode_header(header);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (error) *error = "cannot create trace " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (!write_all(fd, block.data(), block.size(), 0)) {
    if (error) *error = "cannot write trace header to " + path + ": " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  std::unique_ptr<TraceWriter> w(new TraceWriter(fd, block.size(), header));
  if (w->map_chunk(0) == nullptr) {
    if (error) *error = "cannot map trace " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (options.prefault_thread) {
    try {
      w->prefault_ = std::thread([p = w.get()] { p->prefault_loop(); });
      w->request_ahead(1);
    } catch (...) {
      // No thread: writers map chunks themselves.
    }
  }
  return w;
}

void TraceWriter::request_ahead(std::uint64_t chunk) noexcept {
  if (!prefault_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(prefault_mutex_);
    if (chunk <= prefault_want_) return;
    prefault_want_ = chunk;
  }
  prefault_cv_.notify_one();
}

void TraceWriter::prefault_loop() noexcept {
  std::uint64_t done = 0;
  std::unique_lock<std::mutex> lock(prefault_mutex_);
  for (;;) {
    prefault_cv_.wait(lock, [&] { return prefault_stop_ || prefault_want_ > done; });
    if (prefault_stop_) return;
    const std::uint64_t want = prefault_want_;
    lock.unlock();
    for (std::uint64_t c = done + 1; c <= want && c < kMaxChunks; ++c) map_chunk(c);
    done = want;
    lock.lock();
  }
}

void TraceWriter::stop_prefault() noexcept {
  if (!prefault_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(prefault_mutex_);
    prefault_stop_ = true;
  }
  prefault_cv_.notify_one();
  prefault_.join();
}

TraceWriter::TraceWriter(int fd, std::uint64_t header_bytes, const TraceHeader& header)
    : fd_(fd),
      header_bytes_(header_bytes),
      clock_base_(header.clock_base_ns),
      stack_depth_(std::min(header.stack_depth, kMaxStackDepth)),
      chunks_(new std::atomic<std::uint64_t*>[kMaxChunks]) {
  for (std::uint64_t i = 0; i < kMaxChunks; ++i)
    chunks_[i].store(nullptr, std::memory_order_relaxed);
}

TraceWriter::~TraceWriter() { close(); }

std::uint64_t TraceWriter::slots_used() const noexcept {
  return std::min(next_slot_.load(std::memory_order_relaxed), kMaxSlots);
}

std::uint64_t* TraceWriter::map_chunk(std::uint64_t chunk) noexcept {
  if (chunk >= kMaxChunks || broken_.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(grow_mutex_);
  if (auto* p = chunks_[chunk].load(std::memory_order_acquire)) return p;
  // The file must cover the chunk before it is mapped: touching a mapping past the end of
  // the file raises SIGBUS.
  if (chunk + 1 > file_chunks_) {
    const auto size = static_cast<off_t>(header_bytes_ + (chunk + 1) * kChunkBytes);
    if (::ftruncate(fd_, size) != 0) {
      broken_.store(true, std::memory_order_relaxed);
      return nullptr;
    }
    file_chunks_ = chunk + 1;
  }
  void* p = ::mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                   static_cast<off_t>(header_bytes_ + chunk * kChunkBytes));
  if (p == MAP_FAILED) {
    broken_.store(true, std::memory_order_relaxed);
    return nullptr;
  }
  (void)::madvise(p, kChunkBytes, MADV_POPULATE_WRITE);
  auto* words = static_cast<std::uint64_t*>(p);
  chunks_[chunk].store(words, std::memory_order_release);
  return words;
}

inline std::uint64_t* TraceWriter::slot_ptr(std::uint64_t slot) noexcept {
  const std::uint64_t chunk = slot >> kChunkSlotsLog2;
  std::uint64_t* base = chunk < kMaxChunks ? chunks_[chunk].load(std::memory_order_acquire)
                                           : nullptr;
  if (base == nullptr) [[unlikely]] {
    base = map_chunk(chunk);
    if (base == nullptr) return nullptr;
  }
  const std::uint64_t within = slot & (kChunkSlots - 1);
  if (within == 0) [[unlikely]] request_ahead(chunk + 1);  // the first write into a chunk
  return base + within * (kSlotBytes / 8);
}

inline std::uint64_t TraceWriter::claim(std::uint64_t slots) noexcept {
  return next_slot_.fetch_add(slots, std::memory_order_relaxed);
}

inline void TraceWriter::put(std::uint64_t slot, std::uint64_t w0, std::uint64_t w1,
                             std::uint64_t w2) noexcept {
  std::uint64_t* q = slot_ptr(slot);
  if (q == nullptr) [[unlikely]] {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  q[0] = w0;
  q[1] = w1;
  // The check word last, with release order: a slot whose third word is non-zero has its
  // first two words in the file too (also after SIGKILL: the stores are in the page cache).
  std::atomic_ref<std::uint64_t>(q[2]).store(with_check(w0, w1, w2, slot),
                                             std::memory_order_release);
}

void TraceWriter::put_blob(std::uint64_t slot, BlobType type, const unsigned char* data,
                           std::uint32_t length) noexcept {
  unsigned char s[kSlotBytes] = {};
  s[0] = static_cast<unsigned char>(static_cast<unsigned>(SlotKind::blob_head) |
                                    static_cast<unsigned>(type) << 4);
  std::memcpy(s + 1, &length, 4);
  std::uint32_t done = std::min<std::uint32_t>(length, kBlobHeadData);
  std::memcpy(s + 5, data, done);
  for (;;) {
    std::uint64_t w[3];
    std::memcpy(w, s, sizeof s);
    put(slot++, w[0], w[1], w[2]);
    if (done >= length) break;
    std::memset(s, 0, sizeof s);
    s[0] = static_cast<unsigned char>(SlotKind::blob_cont);
    const std::uint32_t n = std::min<std::uint32_t>(length - done, kBlobContData);
    std::memcpy(s + 1, data + done, n);
    done += n;
  }
}

// The common case - the key is at its home slot and defined - is inlined into write();
// everything else goes through intern_slow.
inline int TraceWriter::intern(InternTable& t, SlotKind def_kind, std::uint64_t key) noexcept {
  const std::uint64_t i = hash64(key) & (kIds - 1);
  if (t.keys[i].load(std::memory_order_acquire) == key && key != kEmptyKey &&
      t.ready[i].load(std::memory_order_acquire)) [[likely]]
    return static_cast<int>(i);
  return intern_slow(t, def_kind, key);
}

int TraceWriter::intern_slow(InternTable& t, SlotKind def_kind, std::uint64_t key) noexcept {
  if (key == kEmptyKey) return -1;
  std::uint64_t i = hash64(key) & (kIds - 1);
  for (int probe = 0; probe < kInternProbes; ++probe, i = (i + 1) & (kIds - 1)) {
    std::uint64_t k = t.keys[i].load(std::memory_order_acquire);
    if (k == kEmptyKey) {
      if (t.keys[i].compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
        const std::uint64_t s = claim(1);
        put(s, static_cast<std::uint64_t>(def_kind) | i << 4, key, 0);
        t.ready[i].store(1, std::memory_order_release);
        return static_cast<int>(i);
      }
      // Lost the race: k now holds the winner's key; look at it below.
    }
    if (k == key) {
      // Defined by another thread that has not committed the definition yet: this event
      // goes wide rather than wait.
      return t.ready[i].load(std::memory_order_acquire) ? static_cast<int>(i) : -1;
    }
  }
  return -1;
}

std::uint32_t TraceWriter::intern_stack(std::span<const std::uint64_t> stack) noexcept {
  std::uint64_t h = 0x243F6A8885A308D3ull;
  for (std::uint64_t a : stack) h = hash64(h ^ a);
  std::lock_guard<std::mutex> lock(stack_mutex_);
  auto [lo, hi] = stack_ids_.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    const auto& frames = stacks_[it->second - 1];
    if (frames.size() == stack.size() && std::equal(frames.begin(), frames.end(), stack.begin()))
      return it->second;
  }
  try {
    const auto id = static_cast<std::uint32_t>(stacks_.size() + 1);
    stacks_.emplace_back(stack.begin(), stack.end());
    stack_ids_.emplace(h, id);
    // The definition is committed before the id is returned (and the mutex released), so
    // it precedes every use in the file.
    std::vector<unsigned char> blob(8 + 8 * stack.size());
    const auto n = static_cast<std::uint32_t>(stack.size());
    std::memcpy(blob.data(), &id, 4);
    std::memcpy(blob.data() + 4, &n, 4);
    std::memcpy(blob.data() + 8, stack.data(), 8 * stack.size());
    const auto len = static_cast<std::uint32_t>(blob.size());
    put_blob(claim(blob_slots(len)), BlobType::stack_def, blob.data(), len);
    return id;
  } catch (...) {
    return 0;  // out of host memory: the event is written without its call site
  }
}

void TraceWriter::write(const Event& e, std::uint64_t thread, std::uint64_t stream,
                        EntryPoint entry, std::uint64_t time_ns,
                        std::span<const std::uint64_t> stack) noexcept {
  if (closed_) return;
  std::uint32_t stack_id = 0;
  if (!stack.empty() && stack_depth_ > 0) {
    if (stack.size() > stack_depth_) stack = stack.first(stack_depth_);
    stack_id = intern_stack(stack);
  }
  const std::uint64_t time = time_ns > clock_base_ ? time_ns - clock_base_ : 0;
  const int tid = intern(threads_, SlotKind::thread_def, thread);
  const int sid = intern(streams_, SlotKind::stream_def, stream);
  NarrowFields f;
  f.kind = static_cast<std::uint8_t>(e.kind);
  f.device = static_cast<std::uint8_t>(e.device);
  f.entry = static_cast<std::uint8_t>(entry);
  f.time = time;
  f.address = e.address;
  f.size = e.size;
  f.requested = e.requested;
  const bool narrow = tid >= 0 && sid >= 0 && e.device >= 0 &&
                      e.device < (1 << kDeviceBits) && fits_narrow(f);
  const std::uint64_t extra = stack_id != 0 ? 1 : 0;
  if (narrow) [[likely]] {
    f.thread_id = static_cast<std::uint16_t>(tid);
    f.stream_id = static_cast<std::uint16_t>(sid);
    const Words w = encode_narrow(f);
    const std::uint64_t s = claim(1 + extra);
    if (extra) put(s, static_cast<std::uint64_t>(SlotKind::callsite) | std::uint64_t{stack_id} << 4, 0, 0);
    put(s + extra, w.w0, w.w1, w.w2);
    return;
  }
  unsigned char blob[kWideEventBytes] = {};
  blob[0] = static_cast<unsigned char>(e.kind);
  blob[1] = static_cast<unsigned char>(entry);
  const std::int32_t device = e.device;
  std::memcpy(blob + 4, &device, 4);
  const std::uint64_t fields[6] = {thread, stream, time, e.address, e.size, e.requested};
  std::memcpy(blob + 8, fields, sizeof fields);
  const std::uint64_t s = claim(extra + blob_slots(kWideEventBytes));
  if (extra) put(s, static_cast<std::uint64_t>(SlotKind::callsite) | std::uint64_t{stack_id} << 4, 0, 0);
  put_blob(s + extra, BlobType::wide_event, blob, kWideEventBytes);
}

bool TraceWriter::close() noexcept {
  if (closed_) return true;
  closed_ = true;
  stop_prefault();
  const std::uint64_t slots = slots_used();
  bool ok = true;
  if (dropped() > 0) {
    // Some slots were never written: leave the trace unfinished (whole chunks, no close
    // record), which the reader reads with its holes, instead of a closed trace that
    // would have to be complete.
    for (std::uint64_t c = 0; c < kMaxChunks; ++c) {
      if (auto* p = chunks_[c].exchange(nullptr)) ::munmap(p, kChunkBytes);
    }
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  // The close record first, then the trim: killed in between, the file is closed and
  // merely longer than needed, which the reader accepts.
  const std::uint64_t rec[2] = {slots, close_check(slots)};
  ok = write_all(fd_, reinterpret_cast<const char*>(rec), sizeof rec, kOffCloseSlots) && ok;
  for (std::uint64_t c = 0; c < kMaxChunks; ++c) {
    if (auto* p = chunks_[c].exchange(nullptr)) ::munmap(p, kChunkBytes);
  }
  ok = ::ftruncate(fd_, static_cast<off_t>(header_bytes_ + slots * kSlotBytes)) == 0 && ok;
  ok = ::close(fd_) == 0 && ok;
  fd_ = -1;
  return ok;
}

}  // namespace luma::core
