// preload_library.cpp - see preload_library.h.
#include "common/preload_library.h"

#include <unistd.h>

namespace luma::tools {
namespace {

#ifndef LUMA_LIBDIR_FROM_BINDIR
#define LUMA_LIBDIR_FROM_BINDIR "../lib"
#endif

std::string dir_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

LibrarySearch find_preload_library(const std::string& luma_binary) {
  LibrarySearch s;
  const std::string dir = dir_of(luma_binary);
  s.tried = {dir + "/" LUMA_LIBDIR_FROM_BINDIR "/libluma.so", dir + "/../shim/libluma.so"};
  for (const std::string& candidate : s.tried) {
    if (::access(candidate.c_str(), R_OK) == 0) {
      s.found = candidate;
      break;
    }
  }
  return s;
}

std::string prepend_preload(const std::string& library, const char* existing) {
  if (existing == nullptr || *existing == '\0') return library;
  return library + ":" + existing;
}

}  // namespace luma::tools
