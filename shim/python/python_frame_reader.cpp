// python_frame_reader.cpp - see python_frame_reader.h.
#include "python/python_frame_reader.h"

#include <chrono>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "python/python_line_table.h"

namespace luma::shim {

using python::FrameChain;
using python::Layout;

namespace {

constexpr PythonSite kUnknownSite{"<unknown>", "<unknown>"};
constexpr std::uint32_t kSlots = PythonFrameReader::kMaxSites * 2;
constexpr std::uint32_t kField24 = 0xFFFFFF;
constexpr std::uint32_t kNoOffset = ~0u;  // the frame's instruction is not inside its code

// A load from the interpreter's memory (memcpy: no alignment or aliasing assumptions).
template <typename T>
T load(std::uintptr_t p) noexcept {
  T v;
  std::memcpy(&v, reinterpret_cast<const void*>(p), sizeof v);
  return v;
}

// A pointer to 8-byte aligned data in user space: what every object and frame CPython
// makes is (pymalloc, malloc and the frame stack all align to at least 8).
bool plausible(std::uintptr_t p) noexcept {
  return p >= 4096 && p < (std::uintptr_t{1} << 56) && (p & 7) == 0;
}

std::uint32_t slot_of(std::uintptr_t code) noexcept {
  return static_cast<std::uint32_t>((code >> 4) * 0x9E3779B97F4A7C15ull >> 32) & (kSlots - 1);
}

// Appends code point c as UTF-8 if it fits in [n, cap); lone surrogates (a str may hold
// them: surrogateescape'd file names) become U+FFFD. False when it does not fit.
bool put_utf8(char* out, std::size_t& n, std::size_t cap, std::uint32_t c) noexcept {
  if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;
  unsigned char b[4];
  std::size_t k = 0;
  if (c < 0x80) {
    b[k++] = static_cast<unsigned char>(c);
  } else if (c < 0x800) {
    b[k++] = static_cast<unsigned char>(0xC0 | (c >> 6));
    b[k++] = static_cast<unsigned char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    b[k++] = static_cast<unsigned char>(0xE0 | (c >> 12));
    b[k++] = static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F));
    b[k++] = static_cast<unsigned char>(0x80 | (c & 0x3F));
  } else if (c < 0x110000) {
    b[k++] = static_cast<unsigned char>(0xF0 | (c >> 18));
    b[k++] = static_cast<unsigned char>(0x80 | ((c >> 12) & 0x3F));
    b[k++] = static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F));
    b[k++] = static_cast<unsigned char>(0x80 | (c & 0x3F));
  } else {
    return put_utf8(out, n, cap, 0xFFFD);
  }
  if (n + k > cap) return false;
  std::memcpy(out + n, b, k);
  n += k;
  return true;
}

}  // namespace

// What identifies a code object's names and lines: its fields, read from it now.
struct PythonFrameReader::Identity {
  std::uintptr_t filename = 0;
  std::uintptr_t name = 0;  // co_qualname (3.11+) or co_name (3.10)
  std::uintptr_t linetable = 0;
  std::int32_t first_line = 0;
  bool operator==(const Identity&) const = default;
};

// A named code object: immutable once published in a slot.
struct PythonFrameReader::Site {
  std::uintptr_t code;
  Identity identity;
  std::uint32_t number;  // 1.. (the line cache's key)
  PythonSite names;
};

const PythonSite* PythonFrameReader::unknown_site() noexcept { return &kUnknownSite; }

PythonFrameReader::~PythonFrameReader() {
  delete[] slots_;
  delete[] lines_;
  while (chunks_ != nullptr) {
    void* next = nullptr;
    std::memcpy(&next, chunks_, sizeof next);
    std::free(chunks_);
    chunks_ = next;
  }
}

bool PythonFrameReader::configure(const Layout& layout, const PythonTypes& types,
                                  unsigned depth) noexcept {
  layout_ = layout;
  types_ = types;
  depth_ = std::min(depth, kMaxPythonFramesSetting);
  if (depth_ == 0 || types.code == 0 || types.str == 0 || types.bytes == 0 ||
      (layout.chain == FrameChain::frame_object && types.frame == 0))
    return false;
  slots_ = new (std::nothrow) std::atomic<const Site*>[kSlots]();
  lines_ = new (std::nothrow) std::atomic<std::uint64_t>[std::size_t{1} << kLineCacheSlotsLog2]();
  if (slots_ == nullptr || lines_ == nullptr) {
    delete[] slots_;
    delete[] lines_;
    slots_ = nullptr;
    lines_ = nullptr;
    return false;
  }
  return true;
}

[[gnu::always_inline]] inline bool PythonFrameReader::is_object_of(
    std::uintptr_t p, std::uintptr_t type) const noexcept {
  return plausible(p) && load<std::uintptr_t>(p + layout_.ob_type) == type;
}

[[gnu::always_inline]] inline PythonFrameReader::Identity PythonFrameReader::identity_of(
    std::uintptr_t code) const noexcept {
  const Layout& l = layout_;
  Identity id;
  id.filename = load<std::uintptr_t>(code + l.code_filename);
  id.name = load<std::uintptr_t>(
      code + (l.code_qualname != python::kNoField ? l.code_qualname : l.code_name));
  id.linetable = load<std::uintptr_t>(code + l.code_linetable);
  id.first_line = load<std::int32_t>(code + l.code_firstlineno);
  return id;
}

// Inlined into read(): every frame looks its code object up.
[[gnu::always_inline]] inline const PythonFrameReader::Site* PythonFrameReader::find(
    std::uintptr_t code, const Identity& now) const noexcept {
  std::uint32_t i = slot_of(code);
  for (std::uint32_t probe = 0; probe < kSlots; ++probe, i = (i + 1) & (kSlots - 1)) {
    const Site* s = slots_[i].load(std::memory_order_acquire);
    if (s == nullptr) return nullptr;
    if (s->code == code) return s->identity == now ? s : nullptr;
  }
  return nullptr;
}

// Inlined into read() too.
[[gnu::always_inline]] inline std::uint32_t PythonFrameReader::line_of(
    const Site* site, const Identity& now, std::uint32_t offset) noexcept {
  // One word per slot: site number (16 bits), offset (24), line (24); 0 is empty.
  static_assert(kMaxSites <= 0xFFFF, "a site number must fit 16 bits");
  if (offset > kField24) return compute_line(now, offset);
  const std::uint64_t key = std::uint64_t{site->number} << 48 | std::uint64_t{offset} << 24;
  const auto slot = static_cast<std::uint32_t>(
      (key >> 24) * 0x9E3779B97F4A7C15ull >> (64 - kLineCacheSlotsLog2));
  const std::uint64_t word = lines_[slot].load(std::memory_order_relaxed);
  if ((word & ~std::uint64_t{kField24}) == key) return static_cast<std::uint32_t>(word & kField24);
  const std::uint32_t line = compute_line(now, offset);
  if (line <= kField24) lines_[slot].store(key | line, std::memory_order_relaxed);
  return line;
}

std::uint32_t PythonFrameReader::read(std::uintptr_t tstate, std::uintptr_t thread_id,
                                      PythonFrameRef* out) noexcept {
  if (slots_ == nullptr || !plausible(tstate)) return 0;
  const Layout& l = layout_;
  // A thread state of another thread (a stale pointer, a wrong layout) is never walked.
  if (load<std::uintptr_t>(tstate + l.tstate_thread_id) != thread_id) return 0;
  std::uintptr_t frame = load<std::uintptr_t>(tstate + l.tstate_frame);
  if (l.chain == FrameChain::cframe) {
    if (!plausible(frame)) return 0;
    frame = load<std::uintptr_t>(frame + l.cframe_current);
  }
  std::uint32_t n = 0;
  for (unsigned step = 0; frame != 0 && n < depth_ && step < kMaxSteps; ++step) {
    if (!plausible(frame)) break;
    const auto previous = load<std::uintptr_t>(frame + l.frame_previous);
    std::uintptr_t code = 0;
    std::uint32_t offset = 0;  // bytes into the code
    bool first_line = false;   // 3.10: not started, CPython says co_firstlineno
    if (l.chain == FrameChain::frame_object) {
      if (load<std::uintptr_t>(frame + l.ob_type) != types_.frame) break;
      code = load<std::uintptr_t>(frame + l.frame_code);
      if (!is_object_of(code, types_.code)) break;
      const auto lasti = load<std::int32_t>(frame + l.frame_instr);  // in code units
      first_line = lasti < 0;
      offset = first_line ? 0 : static_cast<std::uint32_t>(lasti) * 2;
    } else {
      // A shim frame the interpreter keeps on the C stack (3.12+) is not the program's.
      if (load<std::uint8_t>(frame + l.frame_owner) == l.owner_cstack) {
        frame = previous;
        continue;
      }
      code = load<std::uintptr_t>(frame + l.frame_code);
      if (!is_object_of(code, types_.code)) break;
      const auto instr = load<std::uintptr_t>(frame + l.frame_instr);
      const std::uintptr_t start = code + l.code_adaptive;
      // Before its first instruction a frame is still being set up (3.11, 3.12: CPython
      // hides these "incomplete" frames too).
      if (instr < start) {
        frame = previous;
        continue;
      }
      const auto units = load<std::int64_t>(code + l.ob_size);
      const std::uintptr_t bytes = instr - start;
      offset = units > 0 && bytes < static_cast<std::uint64_t>(units) * 2
                   ? static_cast<std::uint32_t>(bytes)
                   : kNoOffset;
    }
    const Identity now = identity_of(code);
    const Site* site = find(code, now);
    if (site == nullptr) site = name(code, now);
    std::uint32_t line = 0;
    if (first_line)
      line = now.first_line > 0 ? static_cast<std::uint32_t>(now.first_line) : 0;
    else if (offset != kNoOffset)
      line = site != nullptr ? line_of(site, now, offset) : compute_line(now, offset);
    out[n++] = {site != nullptr ? &site->names : &kUnknownSite, line};
    frame = previous;
  }
  return n;
}

const PythonFrameReader::Site* PythonFrameReader::name(std::uintptr_t code,
                                                       const Identity& now) noexcept {
  // Another thread naming a code object holds the mutex for microseconds, unless the
  // scheduler took the core from it (two threads allocating in new code at once, on a
  // loaded machine): wait for it, but only so long (a mutex a fork left locked is never
  // released): past that the frame is "<unknown>" this once.
  std::unique_lock<std::mutex> lock(naming_, std::defer_lock);
  if (!lock.try_lock()) {
    const auto deadline = std::chrono::steady_clock::now() + kLockPatience;
    while (!lock.try_lock()) {
      if (std::chrono::steady_clock::now() >= deadline) return nullptr;
      std::this_thread::yield();
    }
  }
  // The slot of this address: where another thread may just have named it, or where an
  // earlier code object at the same address was (replaced: its entry stays readable).
  std::uint32_t i = slot_of(code);
  const Site* s = nullptr;
  for (std::uint32_t probe = 0; probe < kSlots; ++probe, i = (i + 1) & (kSlots - 1)) {
    s = slots_[i].load(std::memory_order_relaxed);
    if (s == nullptr || s->code == code) break;
  }
  if (s != nullptr && s->code == code && s->identity == now) return s;
  if (s != nullptr && s->code != code) return nullptr;  // no free slot (cannot happen)
  const std::uint32_t number = sites_.load(std::memory_order_relaxed);
  if (number >= kMaxSites) return nullptr;
  std::string_view file = copy_str(now.filename);
  std::string_view function = copy_str(now.name);
  void* memory = arena_alloc(sizeof(Site), alignof(Site));
  if (memory == nullptr) return nullptr;
  const Site* site = new (memory) Site{
      code, now, number + 1,
      {file.empty() ? kUnknownSite.file : file, function.empty() ? kUnknownSite.function : function}};
  slots_[i].store(site, std::memory_order_release);
  sites_.store(number + 1, std::memory_order_relaxed);
  return site;
}

std::string_view PythonFrameReader::copy_str(std::uintptr_t str) noexcept {
  const Layout& l = layout_;
  if (!is_object_of(str, types_.str)) return {};
  const auto state = load<std::uint32_t>(str + l.unicode_state);
  if ((state & python::kUnicodeCompact) == 0) return {};  // a legacy str: not in code objects
  const auto length = load<std::int64_t>(str + l.unicode_length);
  if (length <= 0 || length > (std::int64_t{1} << 30)) return {};
  if ((state & python::kUnicodeAscii) != 0) {
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(length), kMaxNameBytes);
    auto* copy = static_cast<char*>(arena_alloc(n, 1));
    if (copy == nullptr) return {};
    std::memcpy(copy, reinterpret_cast<const void*>(str + l.ascii_size), n);
    return {copy, n};
  }
  // Not ASCII: encode the canonical code points (1, 2 or 4 bytes each), never the cached
  // UTF-8, which another thread may be filling in.
  const std::uint32_t kind = (state & python::kUnicodeKindMask) >> python::kUnicodeKindShift;
  if (kind != 1 && kind != 2 && kind != 4) return {};
  const std::uintptr_t data = str + l.compact_size;
  char text[kMaxNameBytes];
  std::size_t n = 0;
  for (std::int64_t k = 0; k < length; ++k) {
    const std::uintptr_t at = data + static_cast<std::uintptr_t>(k) * kind;
    const std::uint32_t c = kind == 1   ? load<std::uint8_t>(at)
                            : kind == 2 ? load<std::uint16_t>(at)
                                        : load<std::uint32_t>(at);
    if (!put_utf8(text, n, sizeof text, c)) break;  // cut at a character boundary
  }
  auto* copy = static_cast<char*>(arena_alloc(n, 1));
  if (copy == nullptr) return {};
  std::memcpy(copy, text, n);
  return {copy, n};
}

void* PythonFrameReader::arena_alloc(std::size_t bytes, std::size_t align) noexcept {
  std::size_t at = (chunk_used_ + align - 1) & ~(align - 1);
  if (chunk_ == nullptr || at + bytes > kArenaChunkBytes) {
    const std::size_t header = (sizeof(void*) + align - 1) & ~(align - 1);
    if (header + bytes > kArenaChunkBytes || arena_bytes_ + kArenaChunkBytes > kArenaMaxBytes)
      return nullptr;
    auto* chunk = static_cast<char*>(std::calloc(1, kArenaChunkBytes));
    if (chunk == nullptr) return nullptr;
    std::memcpy(chunk, &chunks_, sizeof chunks_);  // the list of chunks, for the destructor
    chunks_ = chunk;
    chunk_ = chunk;
    arena_bytes_ += kArenaChunkBytes;
    at = header;
  }
  chunk_used_ = at + bytes;
  return chunk_ + at;
}

std::uint32_t PythonFrameReader::compute_line(const Identity& now,
                                              std::uint32_t offset) const noexcept {
  const Layout& l = layout_;
  if (!is_object_of(now.linetable, types_.bytes)) return 0;
  const auto size = load<std::int64_t>(now.linetable + l.bytes_size);
  if (size <= 0 || static_cast<std::uint64_t>(size) > kMaxLineTableBytes) return 0;
  return python::line_at(l.lines,
                         reinterpret_cast<const unsigned char*>(now.linetable + l.bytes_sval),
                         static_cast<std::size_t>(size), now.first_line, offset);
}

}  // namespace luma::shim
