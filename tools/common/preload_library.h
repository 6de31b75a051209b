// preload_library.h - where `luma run` finds libluma.so: next to the luma binary, in the
// installed tree (<prefix>/<bindir>/luma -> <prefix>/<libdir>/libluma.so, the relative
// path fixed at build time) or in the build tree (tools/luma -> shim/libluma.so).
// Never guesses beyond those two places: a luma that finds no library says where it
// looked.
#pragma once

#include <string>
#include <vector>

namespace luma::tools {

struct LibrarySearch {
  std::string found;               // empty when none exists
  std::vector<std::string> tried;  // every candidate, in order
};

// `luma_binary` is the running luma's own path (/proc/self/exe).
LibrarySearch find_preload_library(const std::string& luma_binary);

// The LD_PRELOAD value with `library` first and the existing entries after it.
std::string prepend_preload(const std::string& library, const char* existing);

}  // namespace luma::tools
