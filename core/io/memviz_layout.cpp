// memviz_layout.cpp - PyTorch's snapshot dicts (memviz_layout.h), key by key in the order
// PyTorch's memory_snapshot.cpp writes them.
#include "io/memviz_layout.h"

#include <charconv>
#include <map>
#include <sstream>

namespace luma::core::memviz {

void begin_segment(PickleWriter& p, const SegmentFields& s) {
  p.begin_dict();
  p.key("device"); p.integer(s.device);
  p.key("address"); p.unsigned_integer(s.address);
  p.key("total_size"); p.unsigned_integer(s.total_size);
  p.key("allocated_size"); p.unsigned_integer(s.allocated_size);
  p.key("active_size"); p.unsigned_integer(s.active_size);
  p.key("requested_size"); p.unsigned_integer(s.requested_size);
  p.key("stream"); p.unsigned_integer(s.stream);
  p.key("segment_type"); p.key(s.total_size <= kSmallSegmentBytes ? "small" : "large");
  p.key("segment_pool_id"); p.pair(0, 0);
  p.key("is_expandable"); p.boolean(s.expandable);
  p.key("frames");
}

void begin_segment_blocks(PickleWriter& p) {
  p.key("blocks");
  p.begin_list();
}

void end_segment(PickleWriter& p) {
  p.end_list();
  p.end_dict();
}

void begin_block(PickleWriter& p, const BlockFields& b) {
  p.begin_dict();
  p.key("address"); p.unsigned_integer(b.address);
  p.key("size"); p.unsigned_integer(b.size);
  p.key("requested_size"); p.unsigned_integer(b.requested_size);
  p.key("state"); p.key(state_name(b.state));
  p.key("frames");
}

void begin_trace_entry(PickleWriter& p, const TraceEntryFields& e) {
  p.begin_dict();
  p.key("action"); p.key(e.action);
  if (e.device_free) {
    p.key("device_free"); p.unsigned_integer(*e.device_free);
  } else {
    p.key("addr"); p.unsigned_integer(e.addr);
  }
  p.key("size"); p.unsigned_integer(e.size);
  p.key("stream"); p.unsigned_integer(e.stream);
  p.key("time_us"); p.unsigned_integer(e.time_us);
  p.key("frames");
}

void write_frame(PickleWriter& p, std::string_view filename, std::int64_t line, std::string_view name) {
  p.begin_dict();
  p.key("filename"); p.text(filename);
  p.key("line"); p.integer(line);
  p.key("name"); p.text(name);
  p.end_dict();
}

std::string_view action_name(EventKind k, bool mapped_pages) noexcept {
  switch (k) {
    case EventKind::alloc: return "alloc";
    case EventKind::free_requested: return "free_requested";
    case EventKind::free_completed: return "free_completed";
    case EventKind::segment_reserve: return mapped_pages ? "segment_map" : "segment_alloc";
    case EventKind::segment_release: return mapped_pages ? "segment_unmap" : "segment_free";
    case EventKind::oom: return "oom";
    case EventKind::empty_cache: return "";  // no such action in the viewer
  }
  return "";
}

std::string_view state_name(BlockSnapshotState s) noexcept {
  switch (s) {
    case BlockSnapshotState::active_allocated: return "active_allocated";
    case BlockSnapshotState::active_pending_free: return "active_pending_free";
    case BlockSnapshotState::inactive: return "inactive";
  }
  return "inactive";
}

void write_allocator_settings(PickleWriter& p, const std::string& settings) {
  std::map<std::string, std::string> luma;
  std::istringstream in(settings);
  std::string kv;
  while (std::getline(in, kv, ',')) {
    const auto colon = kv.find(':');
    if (colon != std::string::npos) luma[kv.substr(0, colon)] = kv.substr(colon + 1);
  }
  // A number; SIZE_MAX (luma's "no limit") as -1, which is how PyTorch writes its own.
  auto number = [](const std::string& v) -> std::optional<std::int64_t> {
    std::uint64_t n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc{} || end != v.data() + v.size()) return std::nullopt;
    if (n == UINT64_MAX) return -1;
    if (n > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(n);
  };
  auto value = [&](const std::string& v) {
    if (auto n = number(v)) p.integer(*n);
    else if (v == "true" || v == "false") p.boolean(v == "true");
    else p.text(v);
  };
  p.begin_dict();
  p.key("PYTORCH_CUDA_ALLOC_CONF");
  p.text(settings);  // the LUMA_CONF form: what configured this allocator
  p.key("max_split_size");
  // PyTorch writes int64(SIZE_MAX), i.e. -1, for "no limit".
  auto split = luma.find("max_split_size");
  p.integer(split != luma.end() ? number(split->second).value_or(-1) : -1);
  p.key("garbage_collection_threshold");
  p.real(0.0);
  p.key("expandable_segments");  // the settings text writes booleans true / false
  auto expandable = luma.find("expandable_segments");
  p.boolean(expandable != luma.end() && expandable->second == "true");
  p.key("pinned_num_register_threads");
  p.integer(1);
  p.key("release_lock_on_cudamalloc");
  p.boolean(false);
  p.key("pinned_use_cuda_host_register");
  p.boolean(false);
  p.key("roundup_power2_divisions");
  p.begin_dict();
  p.end_dict();
  p.key("luma");
  p.begin_dict();
  for (const auto& [k, v] : luma) {
    p.text(k);
    value(v);
  }
  p.end_dict();
  p.end_dict();
}

}  // namespace luma::core::memviz
