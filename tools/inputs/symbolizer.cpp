// symbolizer.cpp - libdw (Dwfl) over the recorded mappings: each mapped file is reported
// at its load bias (start of its offset-0 mapping), as eu-addr2line and heaptrack do.
// Only paths that are regular files now are reported (a trace may name anything).
#include "inputs/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <sys/stat.h>

#include <cstdlib>
#include <set>
#include <sstream>

namespace luma::tools {

struct Symbolizer::Impl {
  Dwfl* dwfl = nullptr;
  char* debuginfo_path = nullptr;
  Dwfl_Callbacks callbacks{};
  struct Range {
    std::uint64_t start, end;
    std::string path;
  };
  std::map<std::uint64_t, Range> ranges;  // start -> mapping
};

namespace {

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return name;
  std::string out(d);
  std::free(d);
  return out;
}

}  // namespace

Symbolizer::Symbolizer(const std::string& mappings) : impl_(std::make_unique<Impl>()) {
  impl_->callbacks.find_elf = dwfl_linux_proc_find_elf;
  impl_->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
  impl_->callbacks.section_address = dwfl_offline_section_address;
  impl_->callbacks.debuginfo_path = &impl_->debuginfo_path;
  impl_->dwfl = dwfl_begin(&impl_->callbacks);
  std::istringstream in(mappings);
  std::string line;
  std::set<std::string> reported;
  if (impl_->dwfl) dwfl_report_begin(impl_->dwfl);
  while (std::getline(in, line)) {
    // start-end perms offset dev inode path
    std::istringstream f(line);
    std::string range, perms, offset, dev, inode, path;
    if (!(f >> range >> perms >> offset >> dev >> inode)) continue;
    std::getline(f >> std::ws, path);
    const auto dash = range.find('-');
    if (dash == std::string::npos || path.empty() || path[0] != '/') continue;
    const std::uint64_t start = std::strtoull(range.substr(0, dash).c_str(), nullptr, 16);
    const std::uint64_t end = std::strtoull(range.substr(dash + 1).c_str(), nullptr, 16);
    const std::uint64_t off = std::strtoull(offset.c_str(), nullptr, 16);
    impl_->ranges[start] = {start, end, path};
    // The trace names these paths, not the system we run on: a FIFO there would block
    // libdw's open forever, a device read without end. Only regular files are opened.
    struct stat st {};
    if (impl_->dwfl && off == 0 && reported.insert(path).second && ::stat(path.c_str(), &st) == 0 &&
        S_ISREG(st.st_mode))
      dwfl_report_elf(impl_->dwfl, path.c_str(), path.c_str(), -1, start, false);
  }
  if (impl_->dwfl) dwfl_report_end(impl_->dwfl, nullptr, nullptr);
}

Symbolizer::~Symbolizer() {
  if (impl_->dwfl) dwfl_end(impl_->dwfl);
}

const Frame& Symbolizer::frame(std::uint64_t address) {
  auto it = cache_.find(address);
  if (it != cache_.end()) return it->second;
  Frame fr;
  fr.address = address;
  fr.function = "??";
  const std::uint64_t pc = address > 0 ? address - 1 : 0;
  auto r = impl_->ranges.upper_bound(pc);
  if (r != impl_->ranges.begin()) {
    --r;
    if (pc < r->second.end) fr.module = r->second.path;
  }
  fr.file = fr.module;
  if (impl_->dwfl) {
    if (Dwfl_Module* mod = dwfl_addrmodule(impl_->dwfl, pc)) {
      if (const char* name = dwfl_module_addrname(mod, pc)) fr.function = demangle(name);
      if (Dwfl_Line* l = dwfl_module_getsrc(mod, pc)) {
        int line = 0;
        if (const char* file = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr)) {
          fr.file = file;
          fr.line = line;
        }
      }
    }
  }
  return cache_.emplace(address, std::move(fr)).first->second;
}

}  // namespace luma::tools
