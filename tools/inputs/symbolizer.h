// symbolizer.h - names the return addresses of recorded call sites, afterwards and in the
// tool (never in the traced process), from the traced process's /proc/self/maps text and
// the ELF/DWARF of the files it names, with elfutils' libdw. Files that have gone or
// changed since the run give "??" frames, never an error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace luma::tools {

struct Frame {
  std::uint64_t address = 0;
  std::string function;  // demangled; "??" when unknown
  std::string file;      // source file, or the module's path when there is no line info
  int line = 0;
  std::string module;    // the mapped file
};

class Symbolizer {
 public:
  explicit Symbolizer(const std::string& mappings);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // `address` is a return address: the call is looked up one byte before it.
  const Frame& frame(std::uint64_t address);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<std::uint64_t, Frame> cache_;
};

}  // namespace luma::tools
