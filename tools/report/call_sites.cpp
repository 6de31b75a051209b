// call_sites.cpp - a recorded stack as the program's own frames (see call_sites.h).
#include "report/call_sites.h"

#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

namespace luma::tools {

namespace {

enum class Match : std::uint8_t { function_contains, function_starts, function_is, file_contains, file_ends, file_starts };
enum class Applies : std::uint8_t { native, python };

struct MachineryFrame {
  Applies applies;
  Match match;
  std::string_view text;
  std::string_view function = {};  // with file_ends: only this function of the file ("": all)
};

// THE list of frames that are not the program's. Where it comes from:
//  - PyTorch's own viewer drops these from every stack it shows: torch/cuda/_memory_viz.py,
//    `_frame_filter` (pytorch/pytorch at 0044eb6704e6, checked in this project's source
//    search): omit_functions "unwind::unwind", "CapturedTraceback::gather",
//    "gather_with_cpp", "_start", "__libc_start_main", "PyEval_", "PyObject_",
//    "PyFunction_" (names containing them) and omit_filenames "ATen/core/boxing" (its
//    string starts at "core"), "/Register",
//    "/Redispatch", "pythonrun.c", "Modules/main.c", "Objects/call.c",
//    "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h" (files
//    containing them). Here they apply to C++ frames only (a Python function of the
//    program may be called `..._start`), and "_start" is matched as the whole name.
//  - Added here, seen in the recordings PyTorch 2.x writes (60-70 frames an allocation):
//    the caching allocator (c10::cuda::CUDACachingAllocator, DeviceCachingAllocator::malloc),
//    the tensor factories that call it (at::detail::empty_*, empty_strided_cuda,
//    at::native::empty_*, new_empty*), the structured kernels' output allocation
//    (create_out, set_output_raw_strided, at::meta::, the Register*.cpp wrappers), the dispatcher (c10::Dispatcher, c10::impl, c10::BoxedKernel,
//    c10::KernelFunction, at::_ops, the autograd and ADInplaceOrView dispatch keys'
//    wrappers), CPython's call machinery under its other names (_Py*, Py*_, vectorcall,
//    slot_tp_*), and the Python frames of the recording API (torch/cuda/memory.py) and of
//    the wrappers every nn.Module call, backward() and optimizer step goes through.
constexpr MachineryFrame kMachineryFrames[] = {
    // torch/cuda/_memory_viz.py, _frame_filter: omit_functions
    {Applies::native, Match::function_contains, "unwind::unwind"},
    {Applies::native, Match::function_contains, "CapturedTraceback::gather"},
    {Applies::native, Match::function_contains, "gather_with_cpp"},
    {Applies::native, Match::function_is, "_start"},
    {Applies::native, Match::function_contains, "__libc_start_main"},
    {Applies::native, Match::function_contains, "PyEval_"},
    {Applies::native, Match::function_contains, "PyObject_"},
    {Applies::native, Match::function_contains, "PyFunction_"},
    // torch/cuda/_memory_viz.py, _frame_filter: omit_filenames
    {Applies::native, Match::file_contains, "core/boxing"},
    {Applies::native, Match::file_contains, "/Register"},
    {Applies::native, Match::file_contains, "/Redispatch"},
    {Applies::native, Match::file_contains, "pythonrun.c"},
    {Applies::native, Match::file_contains, "Modules/main.c"},
    {Applies::native, Match::file_contains, "Objects/call.c"},
    {Applies::native, Match::file_contains, "Objects/methodobject.c"},
    {Applies::native, Match::file_contains, "pycore_ceval.h"},
    {Applies::native, Match::file_contains, "ceval.c"},
    {Applies::native, Match::file_contains, "cpython/abstract.h"},
    // the recording machinery, luma's too
    {Applies::native, Match::function_starts, "torch::unwind::"},
    {Applies::native, Match::function_starts, "torch::CapturedTraceback::"},
    {Applies::native, Match::function_contains, "__libc_init_first"},
    {Applies::native, Match::function_starts, "luma::shim::"},
    // A sanitizer runtime's wrapper of backtrace() (libasan's __interceptor_backtrace), the
    // innermost frame of every stack luma records in an ASan or TSan build
    {Applies::native, Match::function_starts, "__interceptor_"},
    // PyTorch's caching allocator and the factories that call it
    {Applies::native, Match::function_contains, "CUDACachingAllocator::"},
    {Applies::native, Match::function_contains, "CachingDeviceAllocator"},
    {Applies::native, Match::function_contains, "empty_strided_cuda"},
    {Applies::native, Match::function_contains, "at::detail::empty_"},
    {Applies::native, Match::function_contains, "at::detail::_empty_"},
    {Applies::native, Match::function_starts, "at::native::empty_"},
    {Applies::native, Match::function_contains, "::create_out("},
    {Applies::native, Match::file_starts, "Register"},  // the generated kernel registrations, without a folder
    {Applies::native, Match::function_contains, "(anonymous namespace)::wrapper_"},
    {Applies::native, Match::function_starts, "at::meta::"},  // structured kernels' output allocation
    {Applies::native, Match::function_starts, "at::native::new_empty"},
    {Applies::native, Match::function_contains, "::set_output_raw_strided("},
    // the dispatcher
    {Applies::native, Match::function_starts, "c10::Dispatcher"},
    {Applies::native, Match::function_starts, "c10::impl::"},
    {Applies::native, Match::function_starts, "c10::BoxedKernel"},
    {Applies::native, Match::function_starts, "c10::KernelFunction"},
    {Applies::native, Match::function_starts, "at::_ops::"},
    {Applies::native, Match::function_starts, "torch::autograd::VariableType::"},
    {Applies::native, Match::function_starts, "torch::ADInplaceOrView::"},
    // CPython's call machinery
    {Applies::native, Match::function_starts, "_Py"},
    {Applies::native, Match::function_starts, "Py_"},
    {Applies::native, Match::function_starts, "PyCMethod_"},
    {Applies::native, Match::function_starts, "PyMethod_"},
    {Applies::native, Match::function_starts, "PyType_"},
    {Applies::native, Match::function_starts, "PyRun_"},
    {Applies::native, Match::function_starts, "PyVectorcall_"},
    {Applies::native, Match::function_contains, "vectorcall"},
    {Applies::native, Match::function_starts, "slot_tp_"},
    {Applies::native, Match::function_starts, "builtin_exec"},
    {Applies::native, Match::function_starts, "pymain_"},
    // Python: the recording API, and the wrappers of nn.Module calls, backward() and
    // optimizer steps
    {Applies::python, Match::file_ends, "torch/cuda/memory.py"},
    {Applies::python, Match::file_ends, "torch/nn/modules/module.py", "_call_impl"},
    {Applies::python, Match::file_ends, "torch/nn/modules/module.py", "_wrapped_call_impl"},
    {Applies::python, Match::file_ends, "torch/autograd/graph.py", "_engine_run_backward"},
    {Applies::python, Match::file_ends, "torch/autograd/__init__.py", "backward"},
    {Applies::python, Match::file_ends, "torch/_tensor.py", "backward"},
    {Applies::python, Match::file_ends, "torch/optim/optimizer.py", "wrapper"},
    {Applies::python, Match::file_ends, "torch/optim/optimizer.py", "_use_grad"},
    {Applies::python, Match::file_ends, "torch/utils/_contextlib.py", "decorate_context"},
};

bool matches(const MachineryFrame& m, std::string_view function, std::string_view file) {
  switch (m.match) {
    case Match::function_contains: return function.find(m.text) != std::string_view::npos;
    case Match::function_starts: return function.starts_with(m.text);
    case Match::function_is: return function == m.text;
    case Match::file_contains: return file.find(m.text) != std::string_view::npos;
    case Match::file_starts: return file.starts_with(m.text);
    case Match::file_ends: return file.ends_with(m.text) && (m.function.empty() || function == m.function);
  }
  return false;
}

bool is_python_file(std::string_view file) { return file.size() >= 3 && file.ends_with(".py"); }

}  // namespace

bool is_machinery_frame(std::string_view function, std::string_view file, bool python) {
  const Applies applies = python ? Applies::python : Applies::native;
  for (const MachineryFrame& m : kMachineryFrames)
    if (m.applies == applies && matches(m, function, file)) return true;
  return false;
}

FramesOption parse_frames_option(const std::vector<std::string>& values) {
  FramesOption o;
  for (const std::string& v : values) {
    if (v == "native") {
      o.native = true;
      continue;
    }
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n == 0 || n > 1000)
      throw std::invalid_argument(fmt::format(
          "--frames {}: give a number of frames a call site shows (1 to 1000) or 'native' (keep C++ frames)",
          v.empty() ? "''" : v));
    o.depth = n;
  }
  return o;
}

CallSites::CallSites(const RecordedRun& run, Symbolizer* symbolizer, FramesOption option)
    : run_(run), symbolizer_(symbolizer), option_(option) {}

std::vector<SiteFrame> CallSites::shown(std::uint32_t stack) {
  std::vector<SiteFrame> python, native;
  for (const core::TracePythonFrame& f : run_.named_stack(stack)) {
    const bool py = is_python_file(f.file);
    if (is_machinery_frame(f.function, f.file, py)) continue;
    SiteFrame s;
    s.function = f.function;
    s.file = f.file;
    s.line = f.line;
    s.python = py;
    (py ? python : native).push_back(std::move(s));
  }
  for (std::uint64_t a : run_.stack(stack)) {
    SiteFrame s;
    s.address = a;
    if (symbolizer_) {
      const Frame& f = symbolizer_->frame(a);
      if (is_machinery_frame(f.function, f.file, false)) continue;
      s.function = f.function;
      s.file = f.file;
      s.line = f.line > 0 ? static_cast<std::uint32_t>(f.line) : 0;
      s.module = f.module;
    }
    native.push_back(std::move(s));
  }
  const std::size_t n = option_.depth;
  if (python.size() > n) python.resize(n);
  if (native.size() > n) native.resize(n);
  // Python frames first; C++ frames with --frames native, or where there is no Python frame.
  if (option_.native || python.empty()) python.insert(python.end(), native.begin(), native.end());
  return python;
}

std::uint32_t CallSites::site_of(std::uint32_t stack) {
  if (stack == 0) return 0;
  if (stack >= site_by_stack_.size()) site_by_stack_.resize(stack + 1, 0);
  if (site_by_stack_[stack] != 0) return site_by_stack_[stack] - 1;
  std::vector<SiteFrame> frames = shown(stack);
  std::string key;
  for (const SiteFrame& f : frames)
    key += fmt::format("{:x}\x1f{}\x1f{}\x1f{}\x1e", f.address, f.file, f.line, f.function);
  const auto [it, added] = site_by_key_.try_emplace(std::move(key), stack);
  if (added) frames_.emplace(stack, std::move(frames));
  site_by_stack_[stack] = it->second + 1;
  return it->second;
}

const std::vector<SiteFrame>& CallSites::frames(std::uint32_t site) {
  static const std::vector<SiteFrame> none;
  const auto it = frames_.find(site);
  return it == frames_.end() ? none : it->second;
}

}  // namespace luma::tools
