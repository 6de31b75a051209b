// trace_reader.cpp - validation and decoding of a trace, slot by slot.
// Must never: trust a length, id or count from the file without checking it against what
// the file can hold; read past the mapping; allocate in proportion to a number it read.
#include "trace/trace_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace luma::core {

using namespace trace;

namespace {
constexpr std::uint64_t kProgressEvery = std::uint64_t{1} << 18;  // slots between callbacks
const std::vector<std::uint64_t> kNoStack;
}  // namespace

TraceReader::TraceReader(const std::string& path) : source_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw TraceError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw TraceError(path, 0, "not a regular file");
  }
  map_bytes_ = static_cast<std::size_t>(st.st_size);
  if (map_bytes_ > 0) {
    map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      ::close(fd);
      throw TraceError(path, 0, std::string("cannot map: ") + std::strerror(errno));
    }
    (void)::madvise(map_, map_bytes_, MADV_SEQUENTIAL);
    data_ = std::string_view(static_cast<const char*>(map_), map_bytes_);
  }
  ::close(fd);
  try {
    init();
  } catch (...) {
    if (map_) ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

TraceReader::TraceReader(std::string bytes, std::string source)
    : source_(std::move(source)), owned_(std::move(bytes)) {
  data_ = owned_;
  init();
}

TraceReader::~TraceReader() {
  if (map_) ::munmap(map_, map_bytes_);
}

void TraceReader::init() {
  parsed_ = parse_header(data_, source_);
  const std::uint64_t body = data_.size() - parsed_.header_bytes;
  const std::uint64_t whole = body / kSlotBytes;  // a slot the cut splits is not read
  truncation_.file_bytes = data_.size();
  if (parsed_.closed) {
    const std::uint64_t need = parsed_.closed_slots * kSlotBytes;
    if (body < need) {
      // Cut short after the writer closed it (a copy that stopped): the header says how
      // much there was, so exactly what is missing is known.
      truncation_.truncated = true;
      truncation_.exact = true;
      truncation_.expected_bytes = parsed_.header_bytes + need;
      truncation_.lost_slots = parsed_.closed_slots - whole;
      slots_ = whole;
    } else {
      slots_ = parsed_.closed_slots;
    }
  } else {
    slots_ = whole;
    // An unfinished trace grows by whole chunks; a file that ends inside one was cut short
    // afterwards (a copy that stopped, a disk that filled). What the rest of that chunk
    // held is unknown: zeros its writer had not reached, or events.
    if (body % kChunkBytes != 0) {
      const std::uint64_t chunks = body / kChunkBytes + 1;
      truncation_.truncated = true;
      truncation_.expected_bytes = parsed_.header_bytes + chunks * kChunkBytes;
      truncation_.lost_slots = chunks * kChunkSlots - whole;
    }
  }
}

std::string TraceTruncation::describe() const {
  if (!truncated) return "";
  if (exact)
    return "truncated: the file holds " + std::to_string(file_bytes) + " of the " +
           std::to_string(expected_bytes) + " bytes its writer closed it with; " +
           std::to_string(missing_bytes()) + " bytes (" + std::to_string(lost_slots) +
           " slots, at most as many events) are lost, the events before the cut are read";
  return "truncated: the file ends inside a chunk of the unfinished trace; up to " +
         std::to_string(missing_bytes()) + " bytes (" + std::to_string(lost_slots) +
         " slots, at most as many events) after the cut are lost, the events before it are "
         "read";
}

const std::vector<std::uint64_t>& TraceReader::stack(std::uint32_t id) const noexcept {
  if (id == 0 || id > stacks_.size()) return kNoStack;
  return stacks_[id - 1];
}

namespace {

// A python_stack_def record's frames; `fail` throws. Every length is checked against the
// record, so nothing read sizes more than the record holds.
template <typename Fail>
std::vector<TracePythonFrame> parse_python_stack(const std::vector<unsigned char>& blob,
                                                 std::size_t expected_id, const Fail& fail) {
  std::uint32_t id, n;
  std::memcpy(&id, blob.data(), 4);
  std::memcpy(&n, blob.data() + 4, 4);
  if (id != expected_id)
    fail("Python stack id " + std::to_string(id) + " out of order (expected " +
         std::to_string(expected_id) + ")");
  if (n > kMaxPythonFrames)
    fail("Python stack of " + std::to_string(n) + " frames (at most " +
         std::to_string(kMaxPythonFrames) + ")");
  std::vector<TracePythonFrame> frames;
  frames.reserve(n);
  std::size_t at = 8;
  for (std::uint32_t k = 0; k < n; ++k) {
    if (blob.size() - at < kPythonFrameFixedBytes)
      fail("Python stack record ends inside frame " + std::to_string(k));
    TracePythonFrame f;
    std::uint16_t file_bytes, function_bytes;
    std::memcpy(&f.line, blob.data() + at, 4);
    std::memcpy(&file_bytes, blob.data() + at + 4, 2);
    std::memcpy(&function_bytes, blob.data() + at + 6, 2);
    at += kPythonFrameFixedBytes;
    if (file_bytes > kMaxPythonNameBytes || function_bytes > kMaxPythonNameBytes ||
        blob.size() - at < std::size_t{file_bytes} + function_bytes)
      fail("Python stack record: frame " + std::to_string(k) + "'s names run past the record");
    const auto* p = reinterpret_cast<const char*>(blob.data() + at);
    f.file.assign(p, file_bytes);
    f.function.assign(p + file_bytes, function_bytes);
    at += std::size_t{file_bytes} + function_bytes;
    frames.push_back(std::move(f));
  }
  if (at != blob.size()) fail("Python stack record has bytes after its last frame");
  return frames;
}

}  // namespace

const std::vector<TracePythonFrame>& TraceReader::python_stack(std::uint32_t id) const noexcept {
  static const std::vector<TracePythonFrame> kNone;
  if (id == 0 || id > python_stacks_.size()) return kNone;
  return python_stacks_[id - 1];
}

TraceReadSummary TraceReader::read(const EventFn& on_event, const ProgressFn& progress) {
  stacks_.clear();
  python_stacks_.clear();
  const bool v2 = parsed_.header.format_version >= 2;
  TraceReadSummary sum;
  const char* base = data_.data() + parsed_.header_bytes;
  const std::uint64_t total = data_.size();
  auto offset_of = [&](std::uint64_t slot) { return parsed_.header_bytes + slot * kSlotBytes; };
  auto fail = [&](std::uint64_t slot, const std::string& what) -> void {
    throw TraceError(source_, offset_of(slot), what);
  };

  std::array<std::uint64_t, kIds> threads{};
  std::array<std::uint64_t, kIds> streams{};
  std::array<bool, kIds> thread_defined{};
  std::array<bool, kIds> stream_defined{};
  std::uint32_t pending_stack = 0;
  std::uint32_t pending_python = 0;
  std::uint64_t pending_slot = ~std::uint64_t{0};
  std::uint64_t holes = 0;  // unwritten slots since the last committed one
  bool after_hole = false;  // continuations of a blob whose head was never committed
  std::vector<unsigned char> blob;
  TraceEvent ev;

  auto load = [&](std::uint64_t slot, Words& w) {
    std::memcpy(&w, base + slot * kSlotBytes, kSlotBytes);
  };
  auto verify = [&](std::uint64_t slot, const Words& w) {
    if ((w.w2 >> 48) != slot_check(w.w0, w.w1, w.w2, slot))
      fail(slot, "record check failed: the trace is corrupted here");
  };
  auto deliver = [&](std::uint64_t slot) {
    ev.stack = pending_slot == slot ? pending_stack : 0;
    ev.python_stack = pending_slot == slot ? pending_python : 0;
    pending_slot = ~std::uint64_t{0};
    ev.seq = slot;
    ev.index = sum.events++;
    if (on_event) on_event(ev);
  };
  auto check_kind_entry = [&](std::uint64_t slot, unsigned kind, unsigned entry) {
    if (kind < 1 || kind > kMaxEventKind) fail(slot, "unknown event kind " + std::to_string(kind));
    if (entry >= kEntryPoints) fail(slot, "unknown entry point " + std::to_string(entry));
  };

  std::uint64_t slot = 0;
  std::uint64_t last_committed_end = 0;
  while (slot < slots_) {
    if (progress && (slot % kProgressEvery) == 0) progress(offset_of(slot), total);
    Words w;
    load(slot, w);
    if (w.w2 == 0) {  // never committed: free space, or a write cut short by a kill
      if (parsed_.closed) fail(slot, "unwritten slot inside a closed trace");
      ++holes;
      after_hole = true;
      ++slot;
      continue;
    }
    verify(slot, w);
    const auto kind = static_cast<unsigned>(w.w0 & 0xF);
    if (pending_slot != ~std::uint64_t{0} && pending_slot != slot)
      pending_slot = ~std::uint64_t{0};  // its event was never committed
    if (pending_slot == slot && kind != static_cast<unsigned>(SlotKind::blob_head) &&
        (kind < 1 || kind > kMaxEventKind))
      fail(slot, "a call-site record is not followed by its event");
    std::uint64_t used = 1;
    if (kind >= 1 && kind <= kMaxEventKind) {
      const NarrowFields f = decode_narrow(w);
      check_kind_entry(slot, f.kind, f.entry);
      if (!thread_defined[f.thread_id])
        fail(slot, "event uses thread id " + std::to_string(f.thread_id) + " before its definition");
      if (!stream_defined[f.stream_id])
        fail(slot, "event uses stream id " + std::to_string(f.stream_id) + " before its definition");
      ev.kind = static_cast<EventKind>(f.kind);
      ev.entry = static_cast<EntryPoint>(f.entry);
      ev.device = f.device;
      ev.thread = threads[f.thread_id];
      ev.stream = streams[f.stream_id];
      ev.time_ns = f.time;
      ev.address = f.address;
      ev.size = f.size;
      ev.requested = f.requested;
      deliver(slot);
    } else if (kind == static_cast<unsigned>(SlotKind::thread_def) ||
               kind == static_cast<unsigned>(SlotKind::stream_def)) {
      const auto id = static_cast<std::size_t>((w.w0 >> 4) & mask(kIdBits));
      if ((w.w0 >> (4 + kIdBits)) != 0 || (w.w2 & kCheckMask) != 0)
        fail(slot, "malformed definition record");
      const bool is_thread = kind == static_cast<unsigned>(SlotKind::thread_def);
      auto& values = is_thread ? threads : streams;
      auto& defined = is_thread ? thread_defined : stream_defined;
      if (defined[id] && values[id] != w.w1)
        fail(slot, std::string(is_thread ? "thread" : "stream") + " id " + std::to_string(id) +
                       " defined twice with different values");
      defined[id] = true;
      values[id] = w.w1;
    } else if (kind == static_cast<unsigned>(SlotKind::callsite)) {
      const std::uint64_t id = w.w0 >> 4;
      // Version 1: a native stack, always; version 2: a native stack, Python frames, or both.
      const std::uint64_t py = w.w1;
      if (id > stacks_.size() || (w.w2 & kCheckMask) != 0 || (!v2 && (id == 0 || py != 0)) ||
          (v2 && id == 0 && py == 0))
        fail(slot, "call-site record names stack " + std::to_string(id) +
                       ", which is not defined before it");
      if (py > python_stacks_.size())
        fail(slot, "call-site record names Python stack " + std::to_string(py) +
                       ", which is not defined before it");
      pending_stack = static_cast<std::uint32_t>(id);
      pending_python = static_cast<std::uint32_t>(py);
      pending_slot = slot + 1;
    } else if (kind == static_cast<unsigned>(SlotKind::blob_head)) {
      unsigned char head[kSlotBytes];
      std::memcpy(head, &w, kSlotBytes);
      const unsigned type = head[0] >> 4;
      std::uint32_t length;
      std::memcpy(&length, head + 1, 4);
      // Each type has a fixed or bounded length, so a damaged length is caught here and
      // never sizes an allocation.
      const bool ok_len =
          (type == static_cast<unsigned>(BlobType::wide_event) && length == kWideEventBytes) ||
          (type == static_cast<unsigned>(BlobType::stack_def) && length >= 8 &&
           (length - 8) % 8 == 0 && (length - 8) / 8 <= kMaxStackDepth) ||
          (v2 && type == static_cast<unsigned>(BlobType::python_stack_def) && length >= 8 &&
           length <= kMaxPythonStackBytes) ||
          (type == static_cast<unsigned>(BlobType::forwarded_call) &&
           parsed_.header.format_version >= 2 && length > kForwardedCallBytes &&
           length <= kForwardedCallBytes + kMaxForwardedPathBytes);
      if (type == static_cast<unsigned>(BlobType::forwarded_call) &&
          parsed_.header.format_version < 2)
        fail(slot, "forwarded-call record in a version " +
                       std::to_string(parsed_.header.format_version) +
                       " trace (they came in version 2)");
      if (!ok_len)
        fail(slot, "record of type " + std::to_string(type) + " with invalid length " +
                       std::to_string(length));
      used = blob_slots(length);
      blob.assign(length, 0);
      std::memcpy(blob.data(), head + 5, std::min<std::size_t>(length, kBlobHeadData));
      bool complete = true;
      std::size_t done = std::min<std::size_t>(length, kBlobHeadData);
      for (std::uint64_t k = 1; k < used; ++k) {
        if (slot + k >= slots_) {
          // In a trace cut short, the cut may split a record: it is lost with what follows.
          if (parsed_.closed && !truncation_.truncated)
            fail(slot, "record runs past the end of the trace");
          complete = false;
          break;
        }
        Words c;
        load(slot + k, c);
        if (c.w2 == 0) {
          if (parsed_.closed) fail(slot + k, "unwritten slot inside a closed trace");
          complete = false;
          continue;
        }
        verify(slot + k, c);
        unsigned char cs[kSlotBytes];
        std::memcpy(cs, &c, kSlotBytes);
        if (cs[0] != static_cast<unsigned char>(SlotKind::blob_cont))
          fail(slot + k, "expected the continuation of the record at byte " +
                             std::to_string(offset_of(slot)));
        const std::size_t n = std::min<std::size_t>(length - done, kBlobContData);
        std::memcpy(blob.data() + done, cs + 1, n);
        done += n;
      }
      used = std::min(used, slots_ - slot);
      if (!complete) {
        // A writer killed while writing it: the record was never completed, so it is not
        // part of the trace.
        holes += used;
        slot += used;
        after_hole = true;
        continue;
      }
      if (type == static_cast<unsigned>(BlobType::wide_event)) {
        check_kind_entry(slot, blob[0], blob[1]);
        std::int32_t device;
        std::memcpy(&device, blob.data() + 4, 4);
        std::uint64_t fields[6];
        std::memcpy(fields, blob.data() + 8, sizeof fields);
        if (device < 0 || device > kMaxTraceDevice)
          fail(slot, "event names device " + std::to_string(device) + " (devices are 0.." +
                         std::to_string(kMaxTraceDevice) + ")");
        if (fields[3] + fields[4] < fields[3])
          fail(slot, "event's address + size passes the end of the address space");
        ev.kind = static_cast<EventKind>(blob[0]);
        ev.entry = static_cast<EntryPoint>(blob[1]);
        ev.device = device;
        ev.thread = fields[0];
        ev.stream = fields[1];
        ev.time_ns = fields[2];
        ev.address = fields[3];
        ev.size = fields[4];
        ev.requested = fields[5];
        deliver(slot);
      } else if (type == static_cast<unsigned>(BlobType::python_stack_def)) {
        python_stacks_.push_back(parse_python_stack(blob, python_stacks_.size() + 1,
                                                    [&](const std::string& what) { fail(slot, what); }));
      } else if (type == static_cast<unsigned>(BlobType::forwarded_call)) {
        if (blob[0] < 1 || blob[0] > kMaxForwardedOp)
          fail(slot, "forwarded-call record with unknown operation " + std::to_string(blob[0]));
        if (blob[1] >= kForwardedEntries)
          fail(slot, "forwarded-call record with unknown entry point " + std::to_string(blob[1]));
        ForwardedCall c;
        c.seq = slot;
        c.op = static_cast<ForwardedOp>(blob[0]);
        c.entry = static_cast<ForwardedEntry>(blob[1]);
        std::uint64_t fields[6];
        std::memcpy(fields, blob.data() + 8, sizeof fields);
        c.thread = fields[0];
        c.stream = fields[1];
        c.time_ns = fields[2];
        c.address = fields[3];
        c.bytes = fields[4];
        c.handle = fields[5];
        c.path = std::string_view(reinterpret_cast<const char*>(blob.data()) + kForwardedCallBytes,
                                  length - kForwardedCallBytes);
        ++sum.forwarded_calls;
        if (on_forwarded_) on_forwarded_(c);
      } else {
        std::uint32_t id, n;
        std::memcpy(&id, blob.data(), 4);
        std::memcpy(&n, blob.data() + 4, 4);
        if (n != (length - 8) / 8) fail(slot, "stack record frame count does not match its length");
        if (id != stacks_.size() + 1)
          fail(slot, "stack id " + std::to_string(id) + " out of order (expected " +
                         std::to_string(stacks_.size() + 1) + ")");
        std::vector<std::uint64_t> frames(n);
        // A stack of no frames is valid (and memcpy from or to a null pointer is not).
        if (n > 0) std::memcpy(frames.data(), blob.data() + 8, 8 * std::size_t{n});
        stacks_.push_back(std::move(frames));
      }
    } else if (kind == static_cast<unsigned>(SlotKind::blob_cont)) {
      // Only a blob whose head slot was never committed leaves continuations alone.
      if (!after_hole) fail(slot, "continuation record without its start");
      holes += 1;
      slot += 1;
      continue;
    } else {
      fail(slot, "unknown record kind " + std::to_string(kind));
    }
    after_hole = false;
    slot += used;
    sum.unwritten_slots += holes;
    holes = 0;
    last_committed_end = slot;
  }
  // A closed trace has no free tail and no holes: its writer dropped nothing (a writer
  // that dropped events leaves the trace unfinished) and no thread died mid-write.
  if (parsed_.closed && holes > 0 && !truncation_.truncated)
    fail(slots_ - holes, "a closed trace ends in unwritten slots");
  sum.slots = parsed_.closed && !truncation_.truncated ? slots_ : last_committed_end;
  sum.stacks = stacks_.size();
  sum.python_stacks = python_stacks_.size();
  if (progress) progress(total, total);
  return sum;
}

std::vector<TraceEvent> read_all_events(TraceReader& reader) {
  std::vector<TraceEvent> out;
  reader.read([&](const TraceEvent& e) { out.push_back(e); });
  return out;
}

}  // namespace luma::core
