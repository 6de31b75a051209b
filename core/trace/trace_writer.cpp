// trace_writer.cpp - the trace writer: slot claiming, chunk mapping, interning, packing.
// Must never: throw, block the hot path on a lock (only chunk growth and new stacks take
// one), or leave a slot whose check word is stored before its other words.
#include "trace/trace_writer.h"

#include <fcntl.h>
#include <signal.h>
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
// The helper keeps this many chunks (6 MiB each) mapped and pre-faulted beyond the one
// being written. Pre-faulting a chunk takes about 4 ms of kernel time on the VM of the
// figures in docs/trace-format.md, while a writer alone fills one in 6 ms: one chunk of
// lead was often overtaken under load, two rarely are. The cost: an unfinished trace of a
// killed process holds up to two chunks of zeros more than it used.
constexpr std::uint64_t kPrefaultAhead = 2;

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
  if (w->map_chunk(0, true) == nullptr) {
    if (error) *error = "cannot map trace " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (options.prefault_thread) {
    // The helper blocks every signal (it inherits the mask it is created with): a
    // process-directed SIGTERM must reach one of the program's threads, never this one -
    // a program handler that calls exit() on it would have close() join its own thread.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
      w->prefault_ = std::thread([p = w.get()] { p->prefault_loop(); });
      w->request_ahead(kPrefaultAhead);
    } catch (...) {
      // No thread: writers map chunks themselves.
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
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
    for (std::uint64_t c = done + 1; c <= want && c < kMaxChunks; ++c) map_chunk(c, true);
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
  // Never join from the helper itself (join would throw in a noexcept function).
  if (prefault_.get_id() == std::this_thread::get_id()) {
    prefault_.detach();
    return;
  }
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

bool TraceWriter::grow_file(std::uint64_t chunks) noexcept {
  const auto old_end = static_cast<off_t>(header_bytes_ + file_chunks_ * kChunkBytes);
  const auto new_end = static_cast<off_t>(header_bytes_ + chunks * kChunkBytes);
  // The blocks are allocated now, not when a store first touches a page: a full file
  // system then fails this call (the events are dropped and counted) instead of raising
  // SIGBUS in the traced program at that store.
  if (::fallocate(fd_, 0, old_end, new_end - old_end) != 0) {
    if (errno != EOPNOTSUPP && errno != ENOSYS) {
      (void)::ftruncate(fd_, old_end);  // a partial allocation would leave the chunk grid
      return false;
    }
    // A file system without fallocate: a sparse extension, as good as it can do.
    if (::ftruncate(fd_, new_end) != 0) return false;
  }
  file_chunks_ = chunks;
  return true;
}

std::uint64_t* TraceWriter::map_chunk(std::uint64_t chunk, bool populate) noexcept {
  if (chunk >= kMaxChunks || broken_.load(std::memory_order_relaxed)) return nullptr;
  std::uint64_t* words = chunks_[chunk].load(std::memory_order_acquire);
  if (words == nullptr) {
    {
      // The file must cover the chunk before it is mapped: touching a mapping past the end
      // of the file raises SIGBUS. Only the size change is under the lock (it is quick);
      // mapping and pre-faulting are not, so a writer that finds its chunk unmapped never
      // waits for the helper to pre-fault another one.
      std::lock_guard<std::mutex> lock(grow_mutex_);
      if (chunk + 1 > file_chunks_ && !grow_file(chunk + 1)) {
        broken_.store(true, std::memory_order_relaxed);
        return nullptr;
      }
    }
    void* p = ::mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                     static_cast<off_t>(header_bytes_ + chunk * kChunkBytes));
    if (p == MAP_FAILED) {
      broken_.store(true, std::memory_order_relaxed);
      return nullptr;
    }
    words = static_cast<std::uint64_t*>(p);
    std::uint64_t* other = nullptr;
    if (!chunks_[chunk].compare_exchange_strong(other, words, std::memory_order_acq_rel)) {
      ::munmap(p, kChunkBytes);  // mapped by another thread meanwhile: use that one
      words = other;
    }
  }
  // Into the published mapping, so that its page-table entries are the ones made: the
  // writers' stores then take no fault (also while a writer is already storing into it).
  if (populate) (void)::madvise(words, kChunkBytes, MADV_POPULATE_WRITE);
  return words;
}

inline std::uint64_t* TraceWriter::slot_ptr(std::uint64_t slot) noexcept {
  const std::uint64_t chunk = slot >> kChunkSlotsLog2;
  std::uint64_t* base = chunk < kMaxChunks ? chunks_[chunk].load(std::memory_order_acquire)
                                           : nullptr;
  if (base == nullptr) [[unlikely]] {
    // The helper fell behind (or there is none): map it here, pre-faulting only without a
    // helper - with one, the helper pre-faults it meanwhile and this thread's stores take
    // the few faults of the pages it reaches first.
    base = map_chunk(chunk, !prefault_.joinable());
    if (base == nullptr) return nullptr;
  }
  const std::uint64_t within = slot & (kChunkSlots - 1);
  if (within == 0) [[unlikely]] request_ahead(chunk + kPrefaultAhead);  // first write into it
  return base + within * (kSlotBytes / 8);
}

inline void TraceWriter::put(std::uint64_t slot, std::uint64_t w0, std::uint64_t w1,
                             std::uint64_t w2) noexcept {
  std::uint64_t* q = slot_ptr(slot);
  if (q == nullptr) [[unlikely]] {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  store(q, slot, w0, w1, w2);
}

void TraceWriter::put_unmapped(std::uint64_t slot, Words w) noexcept {
  put(slot, w.w0, w.w1, w.w2);
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
  const int id = lookup(t, key);
  return id >= 0 ? id : intern_slow(t, def_kind, key);
}

int TraceWriter::intern_slow(InternTable& t, SlotKind def_kind, std::uint64_t key) noexcept {
  if (key == kEmptyKey) return -1;
  std::uint64_t i = intern_hash(key) & (kIds - 1);
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
  for (std::uint64_t a : stack) h = intern_hash(h ^ a);
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

namespace {

// The longest prefix of `s` within `limit` bytes that does not split a UTF-8 sequence.
std::string_view cut_utf8(std::string_view s, std::size_t limit) noexcept {
  if (s.size() <= limit) return s;
  std::size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

std::uint32_t TraceWriter::intern_python_stack(std::span<const PythonFrame> frames) noexcept {
  if (frames.size() > kMaxPythonFrames) frames = frames.first(kMaxPythonFrames);
  std::uint64_t h = 0x13198A2E03707344ull;
  for (const PythonFrame& f : frames) {
    h = intern_hash(h ^ reinterpret_cast<std::uintptr_t>(f.file.data()) ^ f.file.size() << 48);
    h = intern_hash(h ^ reinterpret_cast<std::uintptr_t>(f.function.data()) ^
                    f.function.size() << 48);
    h = intern_hash(h ^ f.line);
  }
  auto same = [&](const std::vector<StoredPythonFrame>& stored) {
    if (stored.size() != frames.size()) return false;
    for (std::size_t k = 0; k < stored.size(); ++k) {
      if (stored[k].line != frames[k].line ||
          stored[k].file != cut_utf8(frames[k].file, kMaxPythonNameBytes) ||
          stored[k].function != cut_utf8(frames[k].function, kMaxPythonNameBytes))
        return false;
    }
    return true;
  };
  std::lock_guard<std::mutex> lock(stack_mutex_);
  auto [lo, hi] = python_ids_.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    if (same(python_stacks_[it->second - 1])) return it->second;
  }
  try {
    const auto id = static_cast<std::uint32_t>(python_stacks_.size() + 1);
    std::vector<StoredPythonFrame> stored;
    stored.reserve(frames.size());
    std::vector<unsigned char> blob(8);
    const auto n = static_cast<std::uint32_t>(frames.size());
    std::memcpy(blob.data(), &id, 4);
    std::memcpy(blob.data() + 4, &n, 4);
    for (const PythonFrame& f : frames) {
      const std::string_view file = cut_utf8(f.file, kMaxPythonNameBytes);
      const std::string_view function = cut_utf8(f.function, kMaxPythonNameBytes);
      unsigned char fixed[kPythonFrameFixedBytes];
      const auto file_bytes = static_cast<std::uint16_t>(file.size());
      const auto function_bytes = static_cast<std::uint16_t>(function.size());
      std::memcpy(fixed, &f.line, 4);
      std::memcpy(fixed + 4, &file_bytes, 2);
      std::memcpy(fixed + 6, &function_bytes, 2);
      blob.insert(blob.end(), fixed, fixed + sizeof fixed);
      blob.insert(blob.end(), file.begin(), file.end());
      blob.insert(blob.end(), function.begin(), function.end());
      stored.push_back({std::string(file), std::string(function), f.line});
    }
    python_stacks_.push_back(std::move(stored));
    python_ids_.emplace(h, id);
    // Committed before the id is returned, as a stack_def (intern_stack).
    const auto len = static_cast<std::uint32_t>(blob.size());
    put_blob(claim(blob_slots(len)), BlobType::python_stack_def, blob.data(), len);
    return id;
  } catch (...) {
    return 0;  // out of host memory: the event is written without its Python frames
  }
}

void TraceWriter::write_slow(const Event& e, std::uint64_t thread, std::uint64_t stream,
                             EntryPoint entry, std::uint64_t time_ns,
                             std::span<const std::uint64_t> stack,
                             std::span<const PythonFrame> python) noexcept {
  if (closed_) return;
  std::uint32_t stack_id = 0;
  if (!stack.empty() && stack_depth_ > 0) {
    if (stack.size() > stack_depth_) stack = stack.first(stack_depth_);
    stack_id = intern_stack(stack);
  }
  const std::uint32_t python_id = python.empty() ? 0 : intern_python_stack(python);
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
  const std::uint64_t extra = (stack_id | python_id) != 0 ? 1 : 0;
  const std::uint64_t callsite =
      static_cast<std::uint64_t>(SlotKind::callsite) | std::uint64_t{stack_id} << 4;
  if (narrow) [[likely]] {
    f.thread_id = static_cast<std::uint16_t>(tid);
    f.stream_id = static_cast<std::uint16_t>(sid);
    const Words w = encode_narrow(f);
    const std::uint64_t s = claim(1 + extra);
    if (extra) put(s, callsite, python_id, 0);
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
  if (extra) put(s, callsite, python_id, 0);
  put_blob(s + extra, BlobType::wide_event, blob, kWideEventBytes);
}

void TraceWriter::write_forwarded(const ForwardedCall& c) noexcept {
  if (closed_) return;
  const std::size_t path_bytes = std::min(c.path.size(), kMaxForwardedPathBytes);
  if (path_bytes == 0) return;  // every record names its path (the reader insists)
  unsigned char blob[kForwardedCallBytes + kMaxForwardedPathBytes] = {};
  blob[0] = static_cast<unsigned char>(c.op);
  blob[1] = static_cast<unsigned char>(c.entry);
  const std::uint64_t time = c.time_ns > clock_base_ ? c.time_ns - clock_base_ : 0;
  const std::uint64_t fields[6] = {c.thread, c.stream, time, c.address, c.bytes, c.handle};
  std::memcpy(blob + 8, fields, sizeof fields);
  std::memcpy(blob + kForwardedCallBytes, c.path.data(), path_bytes);
  const auto len = static_cast<std::uint32_t>(kForwardedCallBytes + path_bytes);
  put_blob(claim(blob_slots(len)), BlobType::forwarded_call, blob, len);
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
