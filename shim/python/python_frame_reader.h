// python_frame_reader.h - reads the calling thread's Python frames straight from CPython's
// memory, the way py-spy and austin read another process's, but from inside this one: the
// thread state's frame chain, each frame's code object (file, qualified name, line table)
// and the instruction it is at. No CPython function is called and the GIL is never needed:
// the thread reading is the thread the frames belong to, and while it runs C code (an
// allocation inside a foreign call, with or without the GIL) its frames do not change and
// each one holds a strong reference to its code object, which holds its strings
// (docs/python-internals.md).
//
// Defensive: every pointer is checked for alignment and a user-space range before it is
// read, every object against the type it must have (PyCode_Type, PyUnicode_Type,
// PyBytes_Type, PyFrame_Type in 3.10: their addresses come from dlsym), the thread state
// must name this thread, and a walk stops after kMaxSteps frames. Anything unexpected ends
// the walk: the frames read so far are kept.
//
// Names are copied once per code object into luma's own memory (an arena that is never
// freed), so an allocation's frames stay valid for the trace writer after the program's
// objects are gone. Code objects are not pinned (a reference count may only change under
// the GIL): a code object's entry is trusted only while the object at that address still
// has the same file, name and line table (pointers) and first line; otherwise it is named
// again. Lines are cached by (code object entry, instruction offset) in a direct-mapped
// table of single 64-bit words. Lookups take no lock; naming a new code object takes a
// mutex, waiting at most kLockPatience for another thread that is naming (a mutex a fork
// left locked names the frame "<unknown>" this once, never a hang).
//
// Must never: allocate (except the arena, under the mutex, when a code object is first
// named), call into the interpreter, or block.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>

#include "python/python_layouts.h"
#include "trace/trace_format.h"

namespace luma::shim {

// A code object's file and function name, held for the life of the process.
struct PythonSite {
  std::string_view file;
  std::string_view function;
};

// One captured frame: its code's site and the line being run (0: not known).
struct PythonFrameRef {
  const PythonSite* site = nullptr;
  std::uint32_t line = 0;
};

// The most Python frames LUMA_TRACE_PYTHON may ask for (the trace format's limit).
inline constexpr unsigned kMaxPythonFramesSetting = 64;
static_assert(kMaxPythonFramesSetting == core::trace::kMaxPythonFrames);

// The addresses of the type objects a walk checks objects against.
struct PythonTypes {
  std::uintptr_t code = 0;   // PyCode_Type
  std::uintptr_t str = 0;    // PyUnicode_Type
  std::uintptr_t bytes = 0;  // PyBytes_Type
  std::uintptr_t frame = 0;  // PyFrame_Type (3.10's frames are objects)
};

class PythonFrameReader {
 public:
  static constexpr std::uint32_t kMaxSites = 1u << 15;  // code objects named, at most
  static constexpr std::uint32_t kLineCacheSlotsLog2 = 14;
  static constexpr std::size_t kArenaChunkBytes = std::size_t{64} << 10;
  static constexpr std::size_t kArenaMaxBytes = std::size_t{16} << 20;
  static constexpr unsigned kMaxSteps = 4 * kMaxPythonFramesSetting;  // shim frames too
  static constexpr std::uint32_t kMaxNameBytes = core::trace::kMaxPythonNameBytes;
  static constexpr std::size_t kMaxLineTableBytes = std::size_t{1} << 24;
  // How long naming waits for another thread that is naming (python_frame_reader.cpp).
  static constexpr std::chrono::microseconds kLockPatience{5000};

  PythonFrameReader() = default;
  ~PythonFrameReader();
  PythonFrameReader(const PythonFrameReader&) = delete;
  PythonFrameReader& operator=(const PythonFrameReader&) = delete;

  // Before any read: the interpreter's layout and types, `depth` frames per read (at most
  // kMaxPythonFramesSetting). False (and no frames ever) when the tables cannot be made.
  bool configure(const python::Layout& layout, const PythonTypes& types, unsigned depth) noexcept;

  // Up to depth frames, innermost first, of the thread state at `tstate`, which must be
  // the calling thread's own (its thread_id equal to `thread_id`, the caller's
  // pthread_self()); returns how many (0: none, or anything unexpected at the start).
  std::uint32_t read(std::uintptr_t tstate, std::uintptr_t thread_id,
                     PythonFrameRef* out) noexcept;

  // Code objects named so far (for tests).
  std::uint32_t sites() const noexcept { return sites_.load(std::memory_order_relaxed); }

  // The site of a frame whose code could not be named.
  static const PythonSite* unknown_site() noexcept;

 private:
  struct Site;
  struct Identity;

  bool is_object_of(std::uintptr_t p, std::uintptr_t type) const noexcept;
  Identity identity_of(std::uintptr_t code) const noexcept;
  const Site* find(std::uintptr_t code, const Identity& now) const noexcept;
  const Site* name(std::uintptr_t code, const Identity& now) noexcept;
  std::string_view copy_str(std::uintptr_t str) noexcept;
  void* arena_alloc(std::size_t bytes, std::size_t align) noexcept;
  std::uint32_t line_of(const Site* site, const Identity& now, std::uint32_t offset) noexcept;
  std::uint32_t compute_line(const Identity& now, std::uint32_t offset) const noexcept;

  python::Layout layout_{};
  PythonTypes types_{};
  unsigned depth_ = 0;
  std::atomic<const Site*>* slots_ = nullptr;  // kMaxSites * 2, open addressing by code
  std::atomic<std::uint64_t>* lines_ = nullptr;  // 2^kLineCacheSlotsLog2
  std::atomic<std::uint32_t> sites_{0};
  std::mutex naming_;  // naming a code object: the arena and slot writes
  char* chunk_ = nullptr;  // the arena's current chunk (naming_)
  std::size_t chunk_used_ = 0, arena_bytes_ = 0;
  void* chunks_ = nullptr;  // every chunk, linked through its first word (freed at destruction)
};

}  // namespace luma::shim
