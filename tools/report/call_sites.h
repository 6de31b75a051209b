// call_sites.h - the call sites `luma stats` shows: each recorded stack as the program's own
// innermost frames. The recording machinery's frames (PyTorch's unwinder, luma's capture)
// and the allocator's (PyTorch's caching allocator, the tensor factories, the dispatcher,
// nn.Module's call wrappers, CPython's interpreter loop) are dropped from every site by one
// table (kMachineryFrames, call_sites.cpp, which names where it comes from). A site is then
// its Python frames, innermost first (a PyTorch snapshot's frames whose file is Python
// source), or, for a stack without any, its C++ frames; `--frames native` keeps the C++
// frames after the Python ones; `--frames N` keeps N of each. Stacks whose shown frames are
// the same are one site: their bytes add up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "inputs/recorded_run.h"
#include "inputs/symbolizer.h"

namespace luma::tools {

// Whether a frame is the recording machinery's or the allocator's, not the program's:
// `python` for a frame of Python source (only the Python rules apply to it).
bool is_machinery_frame(std::string_view function, std::string_view file, bool python);

// `--frames`: how deep a site is, and whether its C++ frames are kept.
struct FramesOption {
  static constexpr std::size_t kDefaultDepth = 2;
  std::size_t depth = kDefaultDepth;
  bool native = false;
};
// Each value of --frames ("native", or a number of frames from 1 on); throws
// std::invalid_argument with the one line to show for a bad one.
FramesOption parse_frames_option(const std::vector<std::string>& values);

// One frame of a site: by name (a snapshot's, or a symbolized address), or an address.
struct SiteFrame {
  std::string function, file, module;
  std::uint32_t line = 0;
  std::uint64_t address = 0;  // 0: a frame recorded by name
  bool python = false;
};

class CallSites {
 public:
  // `symbolizer` may be null (a trace without mappings: its addresses are not filtered).
  CallSites(const RecordedRun& run, Symbolizer* symbolizer, FramesOption option);
  // The site of a recorded stack id: the first stack id with the same shown frames (0: none).
  std::uint32_t site_of(std::uint32_t stack);
  // The frames a site (a site_of result) shows, innermost first.
  const std::vector<SiteFrame>& frames(std::uint32_t site);
  const FramesOption& option() const noexcept { return option_; }

 private:
  std::vector<SiteFrame> shown(std::uint32_t stack);
  const RecordedRun& run_;
  Symbolizer* symbolizer_;
  FramesOption option_;
  std::vector<std::uint32_t> site_by_stack_;  // + 1; 0: not resolved yet
  std::unordered_map<std::string, std::uint32_t> site_by_key_;
  std::unordered_map<std::uint32_t, std::vector<SiteFrame>> frames_;
};

}  // namespace luma::tools
