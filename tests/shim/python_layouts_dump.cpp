// python_layouts_dump.cpp - `python_layouts_dump MINOR [LIBPYTHON]`: the layout libluma.so
// uses for CPython 3.MINOR, as "field value" lines for python_layouts_check.py to compare
// with that version's headers: the row of shim/python/python_layouts.h, or for 3.13 the layout
// made from the debug offsets at the start of LIBPYTHON's _PyRuntime (the library is only
// loaded, never initialised: the offsets are static data).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "python/python_layouts.h"

using namespace luma::shim::python;

namespace {

void field(const char* name, unsigned long value) { std::printf("%s %lu\n", name, value); }
void field16(const char* name, std::uint16_t value) {
  if (value != kNoField) field(name, value);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: python_layouts_dump MINOR [LIBPYTHON]\n");
    return 2;
  }
  const unsigned minor = static_cast<unsigned>(std::atoi(argv[1]));
  std::optional<Layout> layout;
  const DebugOffsets313* offsets = nullptr;
  if (minor == 13) {
    if (argc < 3) {
      std::fprintf(stderr, "3.13's layout comes from a libpython3.13: name it\n");
      return 2;
    }
    void* lib = dlopen(argv[2], RTLD_LAZY | RTLD_LOCAL);
    if (lib == nullptr) {
      std::fprintf(stderr, "cannot load %s: %s\n", argv[2], dlerror());
      return 2;
    }
    offsets = static_cast<const DebugOffsets313*>(dlsym(lib, "_PyRuntime"));
    if (offsets == nullptr) {
      std::fprintf(stderr, "%s has no _PyRuntime\n", argv[2]);
      return 2;
    }
    DebugOffsetsProblem problem{};
    layout = layout_from_debug_offsets(*offsets, &problem);
    if (!layout) {
      std::fprintf(stderr, "the debug offsets of %s were refused (reason %d)\n", argv[2],
                   static_cast<int>(problem));
      return 1;
    }
  } else if (const Layout* row = table_layout(minor)) {
    layout = *row;
  } else {
    std::fprintf(stderr, "no layout for CPython 3.%u\n", minor);
    return 1;
  }
  const Layout& l = *layout;
  field("tstate_frame", l.tstate_frame);
  if (l.chain == FrameChain::cframe) field("cframe_current", l.cframe_current);
  field("tstate_thread_id", l.tstate_thread_id);
  field("frame_previous", l.frame_previous);
  field("frame_code", l.frame_code);
  field("frame_instr", l.frame_instr);
  field16("frame_owner", l.frame_owner);
  if (l.owner_cstack != kNoOwner) field("owner_cstack", l.owner_cstack);
  field16("code_qualname", l.code_qualname);
  field16("code_adaptive", l.code_adaptive);
  field("code_filename", l.code_filename);
  field("code_name", l.code_name);
  field("code_linetable", l.code_linetable);
  field("code_firstlineno", l.code_firstlineno);
  field("ob_type", l.ob_type);
  field("ob_size", l.ob_size);
  field("unicode_length", l.unicode_length);
  field("unicode_state", l.unicode_state);
  field("ascii_size", l.ascii_size);
  field("compact_size", l.compact_size);
  field("bytes_size", l.bytes_size);
  field("bytes_sval", l.bytes_sval);
  field("unicode_kind_mask", kUnicodeKindMask);
  field("unicode_compact", kUnicodeCompact);
  field("unicode_ascii", kUnicodeAscii);
  if (offsets != nullptr) field("debug_offsets_size", sizeof(DebugOffsets313));
  return 0;
}
