// oom_watch.cpp - the out-of-memory call sites and snapshot (oom_watch.h).
#include "observe/oom_watch.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <memory>

#include <fmt/format.h>

#include "io/output_file.h"
#include "config/log.h"
#include "observe/run_identity.h"

namespace luma::shim {

namespace {

// The file name of a module's path (what a report line has room for).
std::string module_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string symbolize_return_address(std::uint64_t address, std::string* module) {
  // A return address points after the call; the call itself (address - 1) is in the
  // calling function even when the call was its last instruction.
  const auto at = reinterpret_cast<void*>(static_cast<std::uintptr_t>(address - 1));
  Dl_info info{};
  if (address == 0 || dladdr(at, &info) == 0) {
    if (module != nullptr) module->clear();
    return fmt::format("{:#x}", address);
  }
  const std::string path = info.dli_fname != nullptr ? info.dli_fname : "";
  if (module != nullptr) *module = path;
  if (info.dli_sname == nullptr) {  // no dynamic symbol: the offset in its module
    const auto base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    return fmt::format("{}+{:#x}", path.empty() ? "??" : module_name(path), address - base);
  }
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status), &std::free);
  const std::string name = status == 0 && demangled ? demangled.get() : info.dli_sname;
  return fmt::format("{}+{:#x}", name, address - reinterpret_cast<std::uintptr_t>(info.dli_saddr));
}

void OomWatch::configure(const ShimSettings& settings, bool trace_on) noexcept {
  try {
    pattern_ = settings.oom_snapshot;
  } catch (...) {
    pattern_.clear();
  }
  depth_ = trace_on ? std::min(settings.trace_stacks, kMaxTraceStacks) : 0;
  watch_ = trace_on && (depth_ > 0 || !pattern_.empty());
}

core::EventSink* OomWatch::sink_for_new_allocator(const void* key, core::EventSink* trace_sink) noexcept {
  if (!watch_ || trace_sink == nullptr) return trace_sink;  // no trace: no stacks, no events
  try {
    auto sink = std::make_unique<OomWatchSink>(trace_sink, depth_, pattern_.empty() ? 0 : kOomRecentEvents);
    std::lock_guard<std::mutex> lock(mu_);
    sinks_.emplace_back(key, sink.get());
    return sink.release();
  } catch (...) {  // no host memory for the tables: the trace goes on without them
    log_noexcept(LogLevel::warn, "out-of-memory call sites: no memory for the tables; not kept");
    return trace_sink;
  }
}

void OomWatch::forget(const void* key) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(sinks_, [&](const auto& ks) { return ks.first == key; });
}

std::size_t OomWatch::sinks() const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return sinks_.size();
}

OomWatch::Evidence OomWatch::gather(const void* key) const noexcept {
  Evidence ev;
  if (!watch_) return ev;
  try {
    const OomWatchSink* sink = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [k, s] : sinks_)
        if (k == key) sink = s;  // the latest: a key may be reused by a new allocator
    }
    if (sink != nullptr) ev.kept = sink->copy();
  } catch (...) {
    ev.kept = {};
  }
  return ev;
}

void OomWatch::add_top_sites(const Evidence& ev, core::OomReport& r) const noexcept {
  if (depth_ == 0 || ev.kept.live.empty()) return;
  try {
    std::vector<core::LiveBlockSite> blocks;
    blocks.reserve(ev.kept.live.size());
    for (const OomWatchSink::LiveBlock& b : ev.kept.live)
      if (!b.pending) blocks.push_back({b.stack, b.size});
    for (const core::SiteTotal& t : core::top_sites(blocks, kOomTopSites)) {
      core::OomReport::Site site{t.live_bytes, t.blocks, {}};
      const auto& frames = ev.kept.stacks[t.stack - 1];
      for (std::size_t i = 0; i < frames.size() && i < core::kOomSiteFrames; ++i) {
        std::string module;
        std::string name = symbolize_return_address(frames[i], &module);
        // A named function says which module it is in; a module+offset says so already.
        if (!module.empty() && name.rfind(module_name(module) + "+", 0) != 0)
          name += " (" + module_name(module) + ")";
        site.frames.push_back(std::move(name));
      }
      r.top_sites.push_back(std::move(site));
    }
  } catch (...) {
    r.top_sites.clear();
  }
}

std::string OomWatch::write_snapshot(const Evidence& ev, const core::CachingAllocator& cache,
                                     const core::OomReport& r, const std::string& settings_text,
                                     std::uint64_t stream) noexcept {
  if (pattern_.empty() || written_.exchange(true)) return {};
  std::string path;
  try {
    path = core::expand_path_pattern(pattern_, process_names().fields());
    core::OomSnapshot snap;
    snap.device = r.device;
    snap.segments = cache.snapshot();
    snap.events = ev.kept.events;
    snap.requested = r.requested;
    if (r.device_known) snap.device_free = r.device_free;
    snap.stream = stream;
    timespec t{};
    clock_gettime(CLOCK_REALTIME, &t);
    snap.time_us = static_cast<std::uint64_t>(t.tv_sec) * 1'000'000u + static_cast<std::uint64_t>(t.tv_nsec) / 1000;
    snap.settings = settings_text;
    snap.stacks.reserve(ev.kept.stacks.size());
    for (const auto& frames : ev.kept.stacks) {
      auto& out = snap.stacks.emplace_back();
      for (std::uint64_t a : frames) {
        core::SnapshotFrame f;
        f.name = symbolize_return_address(a, &f.filename);
        if (f.filename.empty()) f.filename = "??";
        out.push_back(std::move(f));
      }
    }
    for (const OomWatchSink::LiveBlock& b : ev.kept.live)
      if (b.stack != 0) snap.block_stacks.emplace(b.address, b.stack);
    core::OutputFile file(path);
    core::write_oom_snapshot(file.stream(), snap);
    file.commit();
    log_noexcept(LogLevel::warn, "out of memory: the allocator's snapshot is in '{}' (open it at "
                 "https://pytorch.org/memory_viz)", path);
    return path;
  } catch (const std::exception& e) {
    log_noexcept(LogLevel::warn, "LUMA_OOM_SNAPSHOT: cannot write the snapshot to '{}': {}", path, e.what());
  } catch (...) {
    log_noexcept(LogLevel::warn, "LUMA_OOM_SNAPSHOT: cannot write the snapshot to '{}'", path);
  }
  return {};
}

}  // namespace luma::shim
