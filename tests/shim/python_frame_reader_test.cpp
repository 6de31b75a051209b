// python_frame_reader_test.cpp - PythonFrameReader (shim/python/python_frame_reader.h) over
// interpreter memory built by hand with each layout of shim/python/python_layouts.h: thread
// states, frames (3.10's frame objects, 3.11-3.13's interpreter frames), code objects, str
// and bytes. It must give each frame's file, qualified name and line (from real CPython
// line tables), skip the frames CPython hides, refuse another thread's state, stop at
// anything of the wrong type or a chain that does not end, name a code object again when
// another one takes its address, copy non-ASCII names as UTF-8 cut at a character
// boundary, and give the same sites to threads that read at the same time. Also the 3.13
// layout from debug offsets, and its refusals.
#include "python/python_frame_reader.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "python/python_layouts.h"

namespace luma::shim {
namespace {

using python::FrameChain;
using python::Layout;

// The line table of the 3.11 function in python_line_table_test.cpp (first line 1): byte
// offset 2 is line 2, 24 line 5, 98 line 12, 118 no line.
const char* const kTable311 =
    "8000d80809884189058041e00708883182758075d80c21d00c219d05986199089c08d00c21d10c21d40c21"
    "88018801f006000d0ed80c0df005020d0f8801f00604050ddd0c0dd80c0df103010d0ff400010d0f8801"
    "8801f8e50b13f00001050df00001050df00001050dd8080c8804f00301050df8f8f8e00b0c8048";
constexpr std::uint32_t kCode311Units = 77;
// 3.10's table of the same function: byte offset 8 is line 4, 46 line 11.
const char* const kTable310 = "0801080214010203020104fe02030201020106ff04040cfe0201040102fe";

std::vector<unsigned char> hex(const std::string& text) {
  std::vector<unsigned char> out;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2)
    out.push_back(static_cast<unsigned char>(std::stoi(text.substr(i, 2), nullptr, 16)));
  return out;
}

// CPython 3.13's debug offsets as its _PyRuntime holds them (x86-64, the GIL build).
python::DebugOffsets313 offsets313() {
  python::DebugOffsets313 d{};
  std::memcpy(d.cookie, "xdebugpy", 8);
  d.version = 0x030D00F0;
  d.thread_state = {312, 0, 8, 16, 72, 152, 160, 184, 0};
  d.interpreter_frame = {80, 8, 0, 56, 72, 70};
  d.code_object = {208, 112, 120, 128, 136, 68, 52, 96, 104, 200};
  d.pyobject = {16, 8};
  d.tuple_object = {32, 24, 16};
  d.bytes_object = {40, 16, 32};
  d.unicode_object = {64, 32, 16, 40};
  return d;
}

Layout layout_of(unsigned minor) {
  if (minor == 13) return *python::layout_from_debug_offsets(offsets313(), nullptr);
  return *python::table_layout(minor);
}

// Zeroed, 16-byte aligned blocks that stand for the interpreter's objects.
class Memory {
 public:
  explicit Memory(const Layout& l) : l_(l) {
    types_.code = addr(block(64));
    types_.str = addr(block(64));
    types_.bytes = addr(block(64));
    types_.frame = addr(block(64));
  }
  const PythonTypes& types() const { return types_; }

  char* block(std::size_t bytes) {
    auto* p = static_cast<char*>(::operator new(bytes + 16, std::align_val_t{16}));
    std::memset(p, 0, bytes + 16);
    blocks_.emplace_back(p);
    return p;
  }
  static std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  template <typename T>
  static void put(char* base, std::size_t offset, T value) {
    std::memcpy(base + offset, &value, sizeof value);
  }

  // An ASCII or a compact str of kind 1, 2 or 4 holding these code points.
  char* str(const std::u32string& text, unsigned kind = 0) {
    bool ascii = true;
    for (char32_t c : text) ascii = ascii && c < 0x80;
    if (kind == 0) kind = ascii ? 1 : 4;
    const std::size_t header = ascii ? l_.ascii_size : l_.compact_size;
    char* s = block(header + (text.size() + 1) * kind);
    put(s, l_.ob_type, types_.str);
    put<std::int64_t>(s, l_.unicode_length, static_cast<std::int64_t>(text.size()));
    put<std::uint32_t>(s, l_.unicode_state,
                       (kind << python::kUnicodeKindShift) | python::kUnicodeCompact |
                           (ascii ? python::kUnicodeAscii : 0u));
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<std::uint32_t>(text[i]);
      char* at = s + header + i * kind;
      if (kind == 1) put<std::uint8_t>(at, 0, static_cast<std::uint8_t>(c));
      if (kind == 2) put<std::uint16_t>(at, 0, static_cast<std::uint16_t>(c));
      if (kind == 4) put<std::uint32_t>(at, 0, c);
    }
    return s;
  }
  char* bytes(const std::vector<unsigned char>& data) {
    char* b = block(l_.bytes_sval + data.size() + 1);
    put(b, l_.ob_type, types_.bytes);
    put<std::int64_t>(b, l_.bytes_size, static_cast<std::int64_t>(data.size()));
    std::memcpy(b + l_.bytes_sval, data.data(), data.size());
    return b;
  }
  char* code(const std::u32string& file, const std::u32string& name, const std::string& table,
             std::int32_t first_line = 1, std::uint32_t units = kCode311Units) {
    const std::size_t size = l_.code_adaptive != python::kNoField ? l_.code_adaptive + units * 2u
                                                                  : 160;
    char* c = block(size);
    put(c, l_.ob_type, types_.code);
    put<std::int64_t>(c, l_.ob_size, units);
    put(c, l_.code_filename, addr(str(file)));
    put(c, l_.code_name, addr(str(U"short_" + name)));
    if (l_.code_qualname != python::kNoField) put(c, l_.code_qualname, addr(str(name)));
    put(c, l_.code_linetable, addr(bytes(hex(table))));
    put<std::int32_t>(c, l_.code_firstlineno, first_line);
    return c;
  }
  // A frame of `code` at byte offset `offset` (3.11+; 3.10: f_lasti = offset / 2).
  char* frame(char* code, std::int64_t offset, char* previous, std::uint8_t owner = 0) {
    char* f = block(128);
    put(f, l_.frame_previous, addr(previous));
    put(f, l_.frame_code, addr(code));
    if (l_.chain == FrameChain::frame_object) {
      put(f, l_.ob_type, types_.frame);
      put<std::int32_t>(f, l_.frame_instr, static_cast<std::int32_t>(offset / 2));
    } else {
      put(f, l_.frame_instr, addr(code) + l_.code_adaptive + offset);
      put<std::uint8_t>(f, l_.frame_owner, owner);
    }
    return f;
  }
  char* thread_state(char* innermost, std::uintptr_t thread_id) {
    char* t = block(512);
    put(t, l_.tstate_thread_id, thread_id);
    if (l_.chain == FrameChain::cframe) {
      char* cf = block(32);
      put(cf, l_.cframe_current, addr(innermost));
      put(t, l_.tstate_frame, addr(cf));
    } else {
      put(t, l_.tstate_frame, addr(innermost));
    }
    return t;
  }

 private:
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t{16}); }
  };
  Layout l_;
  PythonTypes types_;
  std::vector<std::unique_ptr<char, Free>> blocks_;
};

std::uintptr_t self() { return static_cast<std::uintptr_t>(pthread_self()); }

struct Frame {
  std::string file, function;
  std::uint32_t line;
  bool operator==(const Frame&) const = default;
};
std::ostream& operator<<(std::ostream& o, const Frame& f) {
  return o << f.file << ":" << f.line << " " << f.function;
}

std::vector<Frame> read(PythonFrameReader& r, char* tstate, std::uintptr_t id = self()) {
  PythonFrameRef out[kMaxPythonFramesSetting];
  const std::uint32_t n = r.read(Memory::addr(tstate), id, out);
  std::vector<Frame> frames;
  for (std::uint32_t i = 0; i < n; ++i)
    frames.push_back({std::string(out[i].site->file), std::string(out[i].site->function),
                      out[i].line});
  return frames;
}

class ReaderOfEachVersion : public ::testing::TestWithParam<unsigned> {};

TEST_P(ReaderOfEachVersion, GivesFilesQualifiedNamesAndLinesInnermostFirst) {
  const unsigned minor = GetParam();
  const Layout l = layout_of(minor);
  Memory m(l);
  const bool v310 = minor == 10;
  const std::string table = v310 ? kTable310 : kTable311;
  char* outer_code = m.code(U"/app/train.py", U"main", table);
  char* inner_code = m.code(U"/app/model.py", U"Model.forward", table);
  char* outer = m.frame(outer_code, v310 ? 8 : 2, nullptr);
  char* inner = m.frame(inner_code, v310 ? 46 : 98, outer);
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 32));
  const std::string prefix = v310 ? "short_" : "";  // 3.10 has no co_qualname
  const std::vector<Frame> want = {{"/app/model.py", prefix + "Model.forward", v310 ? 11u : 12u},
                                   {"/app/train.py", prefix + "main", v310 ? 4u : 2u}};
  EXPECT_EQ(read(r, m.thread_state(inner, self())), want);
  // Again: from the site table and the line cache, the same.
  EXPECT_EQ(read(r, m.thread_state(inner, self())), want);
  EXPECT_EQ(r.sites(), 2u);
}

TEST_P(ReaderOfEachVersion, AnotherThreadsStateIsNeverWalked) {
  const Layout l = layout_of(GetParam());
  Memory m(l);
  char* f = m.frame(m.code(U"a.py", U"f", kTable311), 2, nullptr);
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 8));
  EXPECT_TRUE(read(r, m.thread_state(f, self() + 1)).empty());
  EXPECT_EQ(read(r, m.thread_state(f, self())).size(), 1u);
  EXPECT_TRUE(read(r, m.thread_state(nullptr, self())).empty());  // no Python frames
}

TEST_P(ReaderOfEachVersion, AnObjectOfTheWrongTypeEndsTheWalkKeepingTheFramesBefore) {
  const Layout l = layout_of(GetParam());
  Memory m(l);
  char* bad_code = m.code(U"b.py", U"g", kTable311);
  Memory::put(bad_code, l.ob_type, m.types().str);  // not a code object
  char* outer = m.frame(m.code(U"c.py", U"h", kTable311), 2, nullptr);
  char* middle = m.frame(bad_code, 2, outer);
  char* inner = m.frame(m.code(U"a.py", U"f", kTable311), 2, middle);
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 8));
  const std::vector<Frame> got = read(r, m.thread_state(inner, self()));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].file, "a.py");
  // A file name that is not a str: the frame is kept, its file unknown.
  char* odd = m.code(U"d.py", U"k", kTable311);
  Memory::put(odd, l.code_filename, Memory::addr(m.bytes({1, 2})));
  const std::vector<Frame> named = read(r, m.thread_state(m.frame(odd, 2, nullptr), self()));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].file, "<unknown>");
}

TEST_P(ReaderOfEachVersion, ACycleIsCutAtTheDepth) {
  const Layout l = layout_of(GetParam());
  Memory m(l);
  char* f = m.frame(m.code(U"a.py", U"f", kTable311), 2, nullptr);
  Memory::put(f, l.frame_previous, Memory::addr(f));
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 64));
  EXPECT_EQ(read(r, m.thread_state(f, self())).size(), 64u);
}

TEST_P(ReaderOfEachVersion, ACodeObjectAtAReusedAddressIsNamedAgain) {
  const Layout l = layout_of(GetParam());
  Memory m(l);
  char* code = m.code(U"old.py", U"old", kTable311);
  char* f = m.frame(code, 2, nullptr);
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 8));
  EXPECT_EQ(read(r, m.thread_state(f, self()))[0].file, "old.py");
  // The code object died and another took its address: other names, another line table.
  Memory::put(code, l.code_filename, Memory::addr(m.str(U"new.py")));
  const std::uint16_t name_field = l.code_qualname != python::kNoField ? l.code_qualname : l.code_name;
  Memory::put(code, name_field, Memory::addr(m.str(U"new")));
  const std::vector<Frame> got = read(r, m.thread_state(f, self()));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].file, "new.py");
  EXPECT_EQ(got[0].function, "new");
  EXPECT_EQ(r.sites(), 2u);
}

TEST_P(ReaderOfEachVersion, NamesThatAreNotAsciiAreCopiedAsUtf8CutAtACharacter) {
  const Layout l = layout_of(GetParam());
  Memory m(l);
  char* code = m.code(U"/données/train.py", U"f", kTable311);
  Memory::put(code, l.code_filename, Memory::addr(m.str(U"/données/ü.py", 2)));
  const std::uint16_t name_field = l.code_qualname != python::kNoField ? l.code_qualname : l.code_name;
  // 4-byte characters and a lone surrogate (a surrogateescape'd byte), then a name longer
  // than the trace keeps: 400 x U+20AC (3 bytes each), cut after 338 of them (1022 bytes).
  std::u32string name = U"\U0001F600x\xDC80";
  name += std::u32string(400, U'\u20AC');
  Memory::put(code, name_field, Memory::addr(m.str(name, 4)));
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 8));
  const std::vector<Frame> got = read(r, m.thread_state(m.frame(code, 2, nullptr), self()));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].file, "/donn\xC3\xA9""es/\xC3\xBC.py");
  std::string want = "\xF0\x9F\x98\x80x\xEF\xBF\xBD";
  while (want.size() + 3 <= PythonFrameReader::kMaxNameBytes) want += "\xE2\x82\xAC";
  EXPECT_EQ(got[0].function, want);
  // A long ASCII name is cut at the limit too.
  char* long_code = m.code(std::u32string(3000, U'a'), U"g", kTable311);
  const std::vector<Frame> cut = read(r, m.thread_state(m.frame(long_code, 2, nullptr), self()));
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0].file, std::string(PythonFrameReader::kMaxNameBytes, 'a'));
}

TEST_P(ReaderOfEachVersion, ThreadsReadingAtOnceGetTheSameSites) {
  const Layout l = layout_of(GetParam());
  Memory m(l);
  constexpr int kThreads = 8, kCodes = 50;
  std::vector<char*> codes;
  for (int i = 0; i < kCodes; ++i) {
    std::u32string file = U"f";
    file += std::u32string(1, static_cast<char32_t>(U'A' + i));
    codes.push_back(m.code(file, U"fn", kTable311));
  }
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 64));
  // Each thread: its own thread state over the same code objects, in its own order.
  // Built here (Memory is not thread-safe); each thread writes its own id into its state.
  std::vector<char*> states;
  for (int t = 0; t < kThreads; ++t) {
    char* frame = nullptr;
    for (int i = 0; i < kCodes; ++i) frame = m.frame(codes[(i * (t + 1)) % kCodes], 2, frame);
    states.push_back(m.thread_state(frame, 0));
  }
  // first: each thread's first read, while the others are naming the same code objects;
  // last: its last read, when every code object has been named.
  constexpr int kRounds = 200;
  std::vector<std::vector<const PythonSite*>> first(kThreads), last(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      char* ts = states[t];
      Memory::put(ts, l.tstate_thread_id, self());
      PythonFrameRef out[kMaxPythonFramesSetting];
      for (int round = 0; round < kRounds; ++round) {
        const std::uint32_t n = r.read(Memory::addr(ts), self(), out);
        if (round == 0 || round == kRounds - 1) {
          auto& into = round == 0 ? first[t] : last[t];
          for (std::uint32_t k = 0; k < n; ++k) into.push_back(out[k].site);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(r.sites(), static_cast<std::uint32_t>(kCodes));
  // The site of code object c is one pointer, whichever thread named it.
  std::vector<const PythonSite*> site_of(kCodes, nullptr);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(last[t].size(), static_cast<std::size_t>(kCodes));
    ASSERT_EQ(first[t].size(), static_cast<std::size_t>(kCodes));
    for (int i = 0; i < kCodes; ++i) {
      const int c = ((kCodes - 1 - i) * (t + 1)) % kCodes;  // innermost first
      if (site_of[c] == nullptr) site_of[c] = last[t][i];
      EXPECT_EQ(last[t][i], site_of[c]) << "thread " << t << " frame " << i;
      EXPECT_NE(last[t][i], PythonFrameReader::unknown_site());
    }
  }
  // A first read either got that same site or, where the thread naming it was descheduled
  // for longer than kLockPatience (8 threads on 2 cores do this), "<unknown>" that once:
  // never another code object's site.
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kCodes; ++i) {
      const int c = ((kCodes - 1 - i) * (t + 1)) % kCodes;
      if (first[t][i] != PythonFrameReader::unknown_site()) {
        EXPECT_EQ(first[t][i], site_of[c]) << "thread " << t << " frame " << i << ", first read";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpython, ReaderOfEachVersion, ::testing::Values(10u, 11u, 12u, 13u),
                         [](const auto& info) { return "v3_" + std::to_string(info.param); });

TEST(PythonFrameReader, ShimFramesOfTheCStackAndFramesNotStartedAreSkipped) {
  for (unsigned minor : {12u, 13u}) {
    const Layout l = layout_of(minor);
    Memory m(l);
    char* outer = m.frame(m.code(U"a.py", U"outer", kTable311), 2, nullptr);
    char* shim = m.frame(m.code(U"<shim>", U"<shim>", kTable311), 0, outer, l.owner_cstack);
    char* inner = m.frame(m.code(U"a.py", U"inner", kTable311), 24, shim);
    // A frame being set up: its instruction pointer before its first instruction.
    char* starting = m.frame(m.code(U"a.py", U"starting", kTable311), -2, inner);
    PythonFrameReader r;
    ASSERT_TRUE(r.configure(l, m.types(), 8));
    const std::vector<Frame> want = {{"a.py", "inner", 5}, {"a.py", "outer", 2}};
    EXPECT_EQ(read(r, m.thread_state(starting, self())), want) << "3." << minor;
    // Only skipped frames, in a cycle: the walk ends after kMaxSteps.
    Memory::put(shim, l.frame_previous, Memory::addr(shim));
    EXPECT_TRUE(read(r, m.thread_state(shim, self())).empty());
  }
}

TEST(PythonFrameReader, Python310FrameNotStartedIsAtItsFirstLineAndFramesAreTypeChecked) {
  const Layout l = layout_of(10);
  Memory m(l);
  char* code = m.code(U"a.py", U"f", kTable310, 7);
  char* f = m.frame(code, -2, nullptr);  // f_lasti = -1
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 8));
  EXPECT_EQ(read(r, m.thread_state(f, self())), (std::vector<Frame>{{"a.py", "short_f", 7}}));
  Memory::put(f, l.ob_type, m.types().code);  // not a frame object
  EXPECT_TRUE(read(r, m.thread_state(f, self())).empty());
}

TEST(PythonFrameReader, AnInstructionOutsideItsCodeHasNoLine) {
  const Layout l = layout_of(11);
  Memory m(l);
  char* f = m.frame(m.code(U"a.py", U"f", kTable311, 1, 10), 20, nullptr);  // 10 units = 20 bytes
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 8));
  EXPECT_EQ(read(r, m.thread_state(f, self())), (std::vector<Frame>{{"a.py", "f", 0}}));
}

TEST(PythonFrameReader, DepthLimitsTheFramesAndZeroOrMissingTypesRefuseToConfigure) {
  const Layout l = layout_of(12);
  Memory m(l);
  char* frame = nullptr;
  for (int i = 0; i < 10; ++i) frame = m.frame(m.code(U"a.py", U"f", kTable311), 2, frame);
  PythonFrameReader r;
  ASSERT_TRUE(r.configure(l, m.types(), 3));
  EXPECT_EQ(read(r, m.thread_state(frame, self())).size(), 3u);
  PythonFrameReader off;
  EXPECT_FALSE(off.configure(l, m.types(), 0));
  PythonTypes no_str = m.types();
  no_str.str = 0;
  PythonFrameReader missing;
  EXPECT_FALSE(missing.configure(l, no_str, 8));
  PythonFrameRef out[kMaxPythonFramesSetting];
  EXPECT_EQ(missing.read(Memory::addr(m.thread_state(frame, self())), self(), out), 0u);
}

TEST(PythonLayouts, TheTableHas310To312And313ComesFromDebugOffsets) {
  EXPECT_EQ(python::table_layout(9), nullptr);
  EXPECT_EQ(python::table_layout(13), nullptr);
  EXPECT_EQ(python::table_layout(14), nullptr);
  EXPECT_EQ(python::table_layout(10)->chain, FrameChain::frame_object);
  EXPECT_EQ(python::table_layout(11)->chain, FrameChain::cframe);
  EXPECT_EQ(python::table_layout(12)->owner_cstack, 3);
  python::DebugOffsetsProblem problem{};
  const auto l13 = python::layout_from_debug_offsets(offsets313(), &problem);
  ASSERT_TRUE(l13.has_value());
  EXPECT_EQ(problem, python::DebugOffsetsProblem::none);
  EXPECT_EQ(l13->chain, FrameChain::direct);
  EXPECT_EQ(l13->tstate_frame, 72);
  EXPECT_EQ(l13->code_adaptive, 200);
  EXPECT_EQ(l13->compact_size, 56);  // sizeof(PyCompactUnicodeObject) in 3.13
}

TEST(PythonLayouts, DebugOffsetsThatAreNotA313GilBuildsAreRefusedWithTheReason) {
  auto refused = [](python::DebugOffsets313 d) {
    python::DebugOffsetsProblem p{};
    EXPECT_FALSE(python::layout_from_debug_offsets(d, &p).has_value());
    return p;
  };
  python::DebugOffsets313 d = offsets313();
  d.cookie[0] = 'y';
  EXPECT_EQ(refused(d), python::DebugOffsetsProblem::cookie);
  d = offsets313();
  d.version = 0x030E00F0;  // 3.14
  EXPECT_EQ(refused(d), python::DebugOffsetsProblem::version);
  d = offsets313();
  d.free_threaded = 1;
  EXPECT_EQ(refused(d), python::DebugOffsetsProblem::free_threaded);
  d = offsets313();
  d.thread_state.current_frame = 400;  // past the thread state's size
  EXPECT_EQ(refused(d), python::DebugOffsetsProblem::range);
  d = offsets313();
  d.code_object.size = 1u << 20;
  EXPECT_EQ(refused(d), python::DebugOffsetsProblem::range);
}

}  // namespace
}  // namespace luma::shim
