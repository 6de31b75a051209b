// torch_snapshot.cpp - PyTorch's memory snapshot read as recorded runs (see torch_snapshot.h).
#include "torch_snapshot/torch_snapshot.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "free_path/free_path.h"
#include "planner/input/lifetime_reader.h"

namespace luma::core {

std::string frame_text(const TorchFrame& f) { return fmt::format("{}:{} {}", f.filename, f.line, f.name); }

namespace {

using Kind = PickleValue::Kind;
enum class Action : std::uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  snapshot,
  oom,
  annotate,
  unknown,
};

Action action_of(std::string_view s) {
  static constexpr std::pair<std::string_view, Action> kNames[] = {
      {"alloc", Action::alloc},
      {"free_requested", Action::free_requested},
      {"free_completed", Action::free_completed},
      {"segment_alloc", Action::segment_alloc},
      {"segment_free", Action::segment_free},
      {"segment_map", Action::segment_map},
      {"segment_unmap", Action::segment_unmap},
      {"snapshot", Action::snapshot},
      {"oom", Action::oom},
      {"annotate", Action::annotate},
  };
  for (const auto& [name, action] : kNames)
    if (s == name) return action;
  return Action::unknown;
}

bool is_segment_action(Action a) {
  return a == Action::segment_alloc || a == Action::segment_free || a == Action::segment_map ||
         a == Action::segment_unmap;
}

// Whether a stream is one of the program's own: neither the legacy stream (0, or
// CU_STREAM_LEGACY 0x1) nor a per-thread default stream (CU_STREAM_PER_THREAD 0x2), as the
// luma trace reader of core/simulate/sim_sequence.cpp counts them.
bool own_stream(std::int64_t stream) { return static_cast<std::uint64_t>(stream) > 2; }

// Where a value is, for messages: "device_traces[0][17]", "segments[3].blocks[2]".
struct Where {
  enum Part : std::uint8_t { top, trace_list, trace_entry, segment, block, frame, annotation } part = top;
  std::size_t a = 0, b = 0, c = 0;
  std::string text() const {
    switch (part) {
      case top: return "the snapshot";
      case trace_list: return fmt::format("device_traces[{}]", a);
      case trace_entry: return fmt::format("device_traces[{}][{}]", a, b);
      case segment: return fmt::format("segments[{}]", a);
      case block: return fmt::format("segments[{}].blocks[{}]", a, b);
      case frame: return "a frame";
      case annotation: return fmt::format("external_annotations[{}]", a);
    }
    return "?";
  }
};

// One trace entry, as the replay needs it.
struct Entry {
  Action action = Action::unknown;
  std::size_t index = 0;  // in device_traces[d]: entries outside a MemPool's segments are left out
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::int64_t stream = 0;
  std::optional<std::int64_t> time_us;
  const PickleValue* frames = nullptr;
  const PickleValue* annotation = nullptr;  // an annotate entry: the entry itself
};

// A stage's START or END, from external_annotations or an annotate entry.
struct StageMark {
  std::string name;
  int device = -1;
  bool start = false;
  std::int64_t time_us = 0;
};

// A block of the segments at the dump that was allocated then.
struct LiveBlock {
  std::uint64_t address = 0;
  std::uint64_t requested = 0;
  std::int64_t stream = 0;
  const PickleValue* frames = nullptr;
  Where where;
};

// A segment at the dump: [address, address + total_size).
struct SegmentRange {
  std::uint64_t address = 0, end = 0;
};

struct DeviceState {
  std::vector<Entry> entries;
  std::uint64_t reserved_at_dump = 0;
  std::vector<LiveBlock> live_blocks;  // state active_allocated
  std::vector<SegmentRange> segments;
  bool expandable = false;  // a segment with is_expandable True
};

// segment_pool_id of a segment: (0, 0) is the default pool, as PyTorch writes it.
using PoolId = std::pair<std::int64_t, std::int64_t>;

// A fact of the whole process and where it showed.
struct SeenFact {
  FreePathFact fact;
  std::size_t device;
  std::size_t op;
  std::optional<std::uint64_t> time_ns;
  std::string evidence;
};

class SnapshotReader {
 public:
  explicit SnapshotReader(const std::string& source) : source_(source) {}

  TorchSnapshot read(const PickleValue& top, int protocol);

 private:
  [[noreturn]] void bad(const Where& w, const std::string& what) const {
    throw PlanInputError(fmt::format("{}: {}: {}", source_, w.text(), what));
  }
  [[noreturn]] void wrong_type(const Where& w, std::string_view key, const PickleValue& v, const char* want) const {
    bad(w, fmt::format("'{}' is {}, not {}", key, PickleValue::kind_phrase(v.kind()), want));
  }

  const PickleValue& need(const PickleValue& dict, std::string_view key, const Where& w) const {
    const PickleValue* v = dict.find(key);
    if (!v) bad(w, fmt::format("'{}' is missing", key));
    return *v;
  }
  std::uint64_t uint_value(const PickleValue& v, std::string_view key, const Where& w) const {
    if (!v.is(Kind::integer)) wrong_type(w, key, v, "an int");
    const std::optional<std::uint64_t> u = v.as_uint();
    if (!u) bad(w, fmt::format("'{}' is {}, below zero", key, *v.as_int()));
    return *u;
  }
  std::uint64_t need_uint(const PickleValue& dict, std::string_view key, const Where& w) const {
    return uint_value(need(dict, key, w), key, w);
  }
  // A stream or a line: any 64-bit integer (a stream above INT64_MAX keeps its bits).
  std::int64_t int_value(const PickleValue& v, std::string_view key, const Where& w) const {
    if (!v.is(Kind::integer)) wrong_type(w, key, v, "an int");
    if (const auto i = v.as_int()) return *i;
    return static_cast<std::int64_t>(*v.as_uint());
  }
  const PickleValue::Items& need_list(const PickleValue& v, std::string_view key, const Where& w) const {
    if (!v.is(Kind::list) && !v.is(Kind::tuple)) wrong_type(w, key, v, "a list");
    return v.items();
  }
  const PickleValue& need_dict(const PickleValue& v, const Where& w) const {
    if (!v.is(Kind::dict)) bad(w, fmt::format("is {}, not a dict", PickleValue::kind_phrase(v.kind())));
    return v;
  }

  Entry read_entry(const PickleValue& v, const Where& w);
  void read_segments(const PickleValue& list);
  std::uint32_t stack_of(const PickleValue* frames, const Where& w);
  std::uint32_t frame_of(const PickleValue& frame, const Where& w);
  TorchDevice replay(std::size_t device, DeviceState& state, std::optional<std::int64_t> origin_us);
  std::optional<StageMark> stage_mark(const PickleValue& v, const Where& w, int device) const;
  void read_stages(const PickleValue& top, std::int64_t origin_us);
  void add_facts(TorchSnapshot& snap, const std::vector<SeenFact>& seen) const;

  std::string source_;
  std::map<std::size_t, DeviceState> devices_;
  TorchSnapshot out_;
  std::unordered_map<const void*, std::uint32_t> stack_by_node_;
  std::map<std::vector<std::uint32_t>, std::uint32_t> stack_by_frames_;
  std::unordered_map<const void*, std::uint32_t> frame_by_node_;
  std::unordered_map<std::string, std::uint32_t> frame_by_text_;
  std::unordered_set<std::string> unknown_seen_;
  std::vector<PoolId> pools_;  // the segments' segment_pool_id, distinct
  std::vector<SeenFact> facts_;  // the first of each kind, by time
};

std::uint32_t SnapshotReader::frame_of(const PickleValue& frame, const Where& w) {
  if (!frame.is(Kind::dict)) bad(w, fmt::format("a frame is {}, not a dict", PickleValue::kind_phrase(frame.kind())));
  if (const auto it = frame_by_node_.find(frame.identity()); it != frame_by_node_.end()) return it->second;
  TorchFrame f;
  if (const PickleValue* v = frame.find("filename")) {
    if (!v->is(Kind::string)) wrong_type(w, "filename", *v, "a str");
    f.filename = v->as_string();
  }
  if (const PickleValue* v = frame.find("name")) {
    if (!v->is(Kind::string)) wrong_type(w, "name", *v, "a str");
    f.name = v->as_string();
  }
  if (const PickleValue* v = frame.find("line")) f.line = int_value(*v, "line", w);
  std::string key = f.filename;
  key += '\0';
  key += f.name;
  key += '\0';
  key += std::to_string(f.line);
  auto [it, added] = frame_by_text_.try_emplace(std::move(key), static_cast<std::uint32_t>(out_.frames.size()));
  if (added) out_.frames.push_back(std::move(f));
  frame_by_node_.emplace(frame.identity(), it->second);
  return it->second;
}

std::uint32_t SnapshotReader::stack_of(const PickleValue* frames, const Where& w) {
  if (!frames || frames->is(Kind::none)) return 0;
  const PickleValue::Items& items = need_list(*frames, "frames", w);
  if (items.empty()) return 0;
  if (const auto it = stack_by_node_.find(frames->identity()); it != stack_by_node_.end()) return it->second;
  std::vector<std::uint32_t> ids;
  ids.reserve(items.size());
  for (const PickleValue& f : items) ids.push_back(frame_of(f, w));
  auto [it, added] = stack_by_frames_.try_emplace(std::move(ids), static_cast<std::uint32_t>(out_.stacks.size()));
  if (added) out_.stacks.push_back(it->first);
  stack_by_node_.emplace(frames->identity(), it->second);
  return it->second;
}

Entry SnapshotReader::read_entry(const PickleValue& v, const Where& w) {
  need_dict(v, w);
  Entry e;
  const PickleValue& action = need(v, "action", w);
  if (!action.is(Kind::string)) wrong_type(w, "action", action, "a str");
  e.action = action_of(action.as_string());
  if (e.action == Action::unknown) {
    if (unknown_seen_.insert(action.as_string()).second) out_.unknown_actions.push_back(action.as_string());
    return e;
  }
  if (const PickleValue* t = v.find("time_us")) {
    if (!t->is(Kind::integer)) wrong_type(w, "time_us", *t, "an int");
    e.time_us = int_value(*t, "time_us", w);
  }
  if (e.action == Action::annotate) e.annotation = &v;
  if (e.action == Action::snapshot || e.action == Action::oom || e.action == Action::annotate) return e;
  e.addr = need_uint(v, "addr", w);
  e.size = need_uint(v, "size", w);
  if (const PickleValue* s = v.find("stream")) e.stream = int_value(*s, "stream", w);
  e.frames = v.find("frames");
  if (e.frames && !e.frames->is(Kind::none)) need_list(*e.frames, "frames", w);
  return e;
}

void SnapshotReader::read_segments(const PickleValue& list) {
  const PickleValue::Items& segments = need_list(list, "segments", Where{});
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Where w{Where::segment, i};
    const PickleValue& s = need_dict(segments[i], w);
    const std::uint64_t device = need_uint(s, "device", w);
    if (device > 65535) bad(w, fmt::format("'device' is {}, not a device number", device));
    const std::uint64_t address = need_uint(s, "address", w);
    const std::uint64_t total = need_uint(s, "total_size", w);
    std::int64_t stream = 0;
    if (const PickleValue* v = s.find("stream")) stream = int_value(*v, "stream", w);
    DeviceState& d = devices_[device];
    if (total > std::numeric_limits<std::uint64_t>::max() - d.reserved_at_dump)
      bad(w, "the segments' total_size add up past 2^64 bytes");
    if (address > std::numeric_limits<std::uint64_t>::max() - total)
      bad(w, fmt::format("'address' {:#x} and 'total_size' {} pass 2^64", address, total));
    d.reserved_at_dump += total;
    d.segments.push_back({address, address + total});
    // segment_pool_id (PyTorch 2.1+): the private pool (a MemPool, a CUDA graph's) that owns
    // the segment as a pair (a, b), (0, 0) for the default pools.
    PoolId pool{0, 0};
    if (const PickleValue* v = s.find("segment_pool_id"); v && !v->is(Kind::none)) {
      if ((!v->is(Kind::tuple) && !v->is(Kind::list)) || v->items().size() != 2 ||
          !v->items()[0].is(Kind::integer) || !v->items()[1].is(Kind::integer))
        bad(w, fmt::format("'segment_pool_id' is {}, not a pair of ints", v->is(Kind::tuple) || v->is(Kind::list)
                                                                               ? fmt::format("a {} of {}", PickleValue::kind_name(v->kind()), v->items().size())
                                                                               : PickleValue::kind_phrase(v->kind())));
      pool = {int_value(v->items()[0], "segment_pool_id", w), int_value(v->items()[1], "segment_pool_id", w)};
    }
    if (std::find(pools_.begin(), pools_.end(), pool) == pools_.end()) pools_.push_back(pool);
    if (const PickleValue* v = s.find("is_expandable"); v && !v->is(Kind::none)) {
      if (!v->is(Kind::boolean)) wrong_type(w, "is_expandable", *v, "a bool");
      d.expandable = d.expandable || v->as_bool();
    }
    const PickleValue* blocks = s.find("blocks");
    if (!blocks) continue;
    const PickleValue::Items& items = need_list(*blocks, "blocks", w);
    std::uint64_t next = address;  // older versions leave out a block's address: they follow each other
    for (std::size_t j = 0; j < items.size(); ++j) {
      const Where bw{Where::block, i, j};
      const PickleValue& b = need_dict(items[j], bw);
      const std::uint64_t size = need_uint(b, "size", bw);
      std::uint64_t at = next;
      if (const PickleValue* a = b.find("address")) at = uint_value(*a, "address", bw);
      next = at + size;
      const PickleValue& state = need(b, "state", bw);
      if (!state.is(Kind::string)) wrong_type(bw, "state", state, "a str");
      if (state.as_string() != "active_allocated") continue;
      LiveBlock lb;
      lb.address = at;
      lb.requested = size;
      if (const PickleValue* r = b.find("requested_size")) lb.requested = uint_value(*r, "requested_size", bw);
      lb.stream = stream;
      lb.frames = b.find("frames");
      if (lb.frames && !lb.frames->is(Kind::none)) need_list(*lb.frames, "frames", bw);
      lb.where = bw;
      d.live_blocks.push_back(lb);
    }
  }
}

TorchDevice SnapshotReader::replay(std::size_t device, DeviceState& state, std::optional<std::int64_t> origin_us) {
  TorchDevice out;
  out.entries = state.entries.size();
  SimSequence& seq = out.sequence;
  seq.device = static_cast<int>(device);
  const std::vector<Entry>& entries = state.entries;

  // Pass 1: who allocated what. Window allocations and the blocks live at the window's
  // start get numbers of their own; the ops are made once both are known.
  struct Made {
    std::uint64_t addr, bytes;
    std::int64_t stream;
    std::uint32_t stack;
  };
  std::vector<Made> window, before;  // allocations in the window; live when it began
  struct Event {
    std::size_t entry;
    bool is_free;
    bool before;       // the allocation is one of `before`
    std::size_t index;  // in window or before
  };
  std::vector<Event> events;
  std::unordered_map<std::uint64_t, std::size_t> live;     // address -> window allocation
  std::unordered_map<std::uint64_t, std::size_t> pending;  // address -> entry of its free_requested
  auto has = [&](Action a) {
    return std::any_of(entries.begin(), entries.end(), [a](const Entry& e) { return e.action == a; });
  };
  const bool records_requests = has(Action::free_requested);
  const bool records_completions = has(Action::free_completed);
  const bool records_segment_allocs = has(Action::segment_alloc), records_segment_frees = has(Action::segment_free);
  const bool records_maps = has(Action::segment_map), records_unmaps = has(Action::segment_unmap);
  // Frees but no alloc entry (skip_actions=['alloc']): nothing to replay. The frees are
  // not made allocations of the window's start, as they would be for a window that began
  // late: only the blocks allocated at the dump are.
  const bool no_allocs = !has(Action::alloc) && (records_requests || records_completions);
  bool request_before_window = false;
  auto where = [&](std::size_t i) { return Where{Where::trace_entry, device, entries[i].index}; };
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    switch (e.action) {
      case Action::alloc: {
        if (const auto it = live.find(e.addr); it != live.end())
          bad(where(i), fmt::format("alloc at {:#x}, which is allocated and not freed since device_traces[{}][{}]",
                                    e.addr, device, entries[events[it->second].entry].index));
        pending.erase(e.addr);
        const Where w = where(i);
        live.emplace(e.addr, events.size());
        events.push_back({i, false, false, window.size()});
        window.push_back({e.addr, e.size, e.stream, stack_of(e.frames, w)});
        break;
      }
      case Action::free_requested:
      case Action::free_completed: {
        if (no_allocs) break;
        if (e.action == Action::free_completed) {
          if (pending.erase(e.addr) != 0) break;  // its request was the free
        }
        if (const auto it = live.find(e.addr); it != live.end()) {
          const std::size_t index = events[it->second].index;
          events.push_back({i, true, false, index});
          live.erase(it);
        } else if (e.action == Action::free_requested && pending.count(e.addr) != 0) {
          bad(where(i), fmt::format("free_requested at {:#x}, which device_traces[{}][{}] freed already and "
                                    "nothing allocated since",
                                    e.addr, device, entries[pending[e.addr]].index));
        } else if (e.action == Action::free_completed && records_requests) {
          // requested before the window began: that block was not live in it
          request_before_window = true;
          break;
        } else {
          events.push_back({i, true, true, before.size()});
          before.push_back({e.addr, e.size, e.stream, 0});
        }
        if (e.action == Action::free_requested) pending[e.addr] = i;
        break;
      }
      default: break;
    }
  }
  // Blocks allocated at the dump that the window never saw allocated were live all along.
  std::sort(state.live_blocks.begin(), state.live_blocks.end(),
            [](const LiveBlock& a, const LiveBlock& b) { return a.address < b.address; });
  for (const LiveBlock& b : state.live_blocks) {
    if (live.count(b.address) != 0) continue;
    before.push_back({b.address, b.requested, b.stream, stack_of(b.frames, b.where)});
  }

  // The clock: time_us from the earliest entry of any device, when every entry of this
  // device has one.
  seq.has_times = origin_us.has_value() && !entries.empty() &&
                  std::all_of(entries.begin(), entries.end(), [](const Entry& e) {
                    return e.time_us.has_value() || e.action == Action::unknown;
                  });
  std::vector<std::uint64_t> time(entries.size(), 0);
  {
    std::uint64_t last = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      std::uint64_t t = i;
      if (seq.has_times) {
        if (entries[i].time_us) {
          const auto us = static_cast<std::uint64_t>(*entries[i].time_us) - static_cast<std::uint64_t>(*origin_us);
          t = us > std::numeric_limits<std::uint64_t>::max() / 1000 ? std::numeric_limits<std::uint64_t>::max()
                                                                     : us * 1000;
        } else {
          t = last;  // an action this reader does not know, without a time
        }
      }
      last = std::max(last, t);
      time[i] = last;
    }
  }
  const std::uint64_t start_ns = entries.empty() ? 0 : time[0];

  // The ops: the blocks live at the window's start first, then the window's in order.
  const std::size_t n_before = before.size();
  out.blocks_before_window = n_before;
  out.allocations.reserve(n_before + window.size());
  seq.ops.reserve(n_before + events.size());
  for (std::size_t k = 0; k < n_before; ++k) {
    seq.ops.push_back({seq.has_times ? start_ns : seq.ops.size(), before[k].bytes, static_cast<std::uint32_t>(k), false});
    out.allocations.push_back({before[k].addr, before[k].bytes, before[k].stream, before[k].stack, true});
  }
  seq.window_start = n_before;
  for (const Made& m : window) out.allocations.push_back({m.addr, m.bytes, m.stream, m.stack, false});
  std::vector<std::size_t> op_before_entry(entries.size() + 1, 0);  // ops made before entry i
  {
    std::size_t next_event = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      op_before_entry[i] = seq.ops.size();
      while (next_event < events.size() && events[next_event].entry == i) {
        const Event& ev = events[next_event++];
        SimOp op;
        op.time_ns = seq.has_times ? time[i] : seq.ops.size();
        op.id = static_cast<std::uint32_t>(ev.before ? ev.index : n_before + ev.index);
        op.is_free = ev.is_free;
        op.bytes = ev.is_free ? 0 : window[ev.index].bytes;
        seq.ops.push_back(op);
      }
    }
    op_before_entry[entries.size()] = seq.ops.size();
  }
  finish_sim_sequence(seq);

  // PyTorch's reserved bytes, backwards from the dump.
  out.recorded_reserved_end_bytes = state.reserved_at_dump;
  std::uint64_t reserved = state.reserved_at_dump;
  std::vector<std::pair<std::size_t, std::uint64_t>> after;  // (entry, reserved after it), backwards
  // A walk below zero where the window has segment entries of the one kind but none of the
  // kind that gives bytes back: skip_actions left those out, and the bytes were given back
  // after this entry. The walk goes on from zero: without them it is, at every moment, the
  // least PyTorch can have reserved (what it gave back unrecorded only adds, going back).
  bool unfreed = false, unmapped = false;  // segment_free, segment_unmap missing
  for (std::size_t i = entries.size(); i-- > 0;) {
    const Entry& e = entries[i];
    if (!is_segment_action(e.action)) continue;
    after.emplace_back(i, reserved);
    if (e.action == Action::segment_alloc || e.action == Action::segment_map) {
      if (e.size > reserved) {
        if ((e.action == Action::segment_alloc && !records_segment_frees) ||
            (e.action == Action::segment_map && !records_unmaps)) {
          (e.action == Action::segment_alloc ? unfreed : unmapped) = true;
          reserved = 0;
          continue;
        }
        bad(where(i), fmt::format("PyTorch's reserved bytes, walked back from the segments at the dump ({} B), "
                                  "go below zero here ({} B before this {} of {} B): the trace and the segments "
                                  "disagree (were segment entries left out with skip_actions?)",
                                  state.reserved_at_dump, reserved, e.action == Action::segment_alloc ? "segment_alloc" : "segment_map",
                                  e.size));
      }
      reserved -= e.size;
    } else {
      if (e.size > std::numeric_limits<std::uint64_t>::max() - reserved)
        bad(where(i), "PyTorch's reserved bytes, walked back from the dump, pass 2^64");
      reserved += e.size;
    }
  }
  out.recorded_reserved_start_bytes = reserved;
  out.recorded_peak_reserved_bytes = reserved;
  out.reserved.reserve(after.size());
  for (auto it = after.rbegin(); it != after.rend(); ++it) {
    const std::size_t i = it->first;
    const Entry& e = entries[i];
    const TorchReservedStep::Action action = e.action == Action::segment_alloc ? TorchReservedStep::Action::segment_alloc
                                             : e.action == Action::segment_free ? TorchReservedStep::Action::segment_free
                                             : e.action == Action::segment_map  ? TorchReservedStep::Action::segment_map
                                                                                : TorchReservedStep::Action::segment_unmap;
    out.reserved.push_back(
        {seq.has_times ? time[i] : op_before_entry[i], op_before_entry[i], it->second, action, e.addr, e.size});
    out.recorded_peak_reserved_bytes = std::max(out.recorded_peak_reserved_bytes, it->second);
  }
  if (unfreed || unmapped)  // each segment (range) was reserved for a moment at least
    for (const Entry& e : entries)
      if (e.action == Action::segment_alloc || e.action == Action::segment_map)
        out.recorded_peak_reserved_bytes = std::max(out.recorded_peak_reserved_bytes, e.size);
  out.expandable_segments = state.expandable || records_maps || records_unmaps;

  // What the window lacks (skip_actions), seen from the entries it has.
  std::vector<std::string> parts;
  auto lack = [&](std::string_view kind, std::string why) {
    out.missing_actions.emplace_back(kind);
    parts.push_back(std::move(why));
  };
  if (no_allocs) {
    std::size_t frees = 0;
    for (const Entry& e : entries)
      frees += e.action == Action::free_requested || e.action == Action::free_completed ? 1 : 0;
    lack("alloc", fmt::format("no alloc entries, so nothing to replay: its {} free entries make no allocation, the "
                              "sequence is the blocks allocated at the dump ({})",
                              frees, n_before));
  }
  if (records_completions && !records_requests)
    lack("free_requested", "no free_requested entries: each free is its free_completed (after the block's streams)");
  if (records_requests && !records_completions)
    lack("free_completed", "no free_completed entries: each free is its free_requested");
  if (records_segment_frees && !records_segment_allocs)
    lack("segment_alloc", "no segment_alloc entries though it has segment_free ones: reserved, walked back from the "
                          "dump, counts no segment as reserved in the window (the most it can have been)");
  if (unfreed)
    lack("segment_free", "no segment_free entries though it reserves segments the dump does not hold: reserved "
                         "walked back from the dump without them, never below zero, and its peak at least the largest segment "
                         "(the least they can have been)");
  if (unmapped)
    lack("segment_unmap", "no segment_unmap entries though it maps ranges the dump does not hold: reserved walked "
                          "back from the dump without them, never below zero, and its peak at least the largest range "
                          "(the least they can have been)");
  if (!out.missing_actions.empty()) {
    std::string kinds, why;
    for (std::size_t k = 0; k < out.missing_actions.size(); ++k) {
      kinds += (k ? ", " : "") + out.missing_actions[k];
      why += (k ? "; " : "") + parts[k];
    }
    out.lacks = fmt::format("device {}'s window lacks {} entries (recorded with skip_actions?): {}", device, kinds, why);
  }
  out.incomplete = n_before > 0 || out.recorded_reserved_start_bytes > 0 || request_before_window || no_allocs ||
                   unfreed || unmapped;

  // Facts: a stream of the program's own (PyTorch's side streams are made non-blocking).
  auto note_stream = [&](std::int64_t stream, std::size_t op, std::optional<std::uint64_t> t, const std::string& at) {
    if (!own_stream(stream)) return;
    const auto it = std::find_if(facts_.begin(), facts_.end(),
                                 [](const SeenFact& f) { return f.fact == FreePathFact::unordered_stream; });
    if (it != facts_.end() && (!t || !it->time_ns || *it->time_ns <= *t)) return;
    SeenFact f{FreePathFact::unordered_stream, device, op, t,
               fmt::format("stream {:#x} from {} (PyTorch's side streams do not synchronize with the legacy stream)",
                           static_cast<std::uint64_t>(stream), at)};
    if (it != facts_.end())
      *it = std::move(f);
    else
      facts_.push_back(std::move(f));
  };
  for (std::size_t k = 0; k < n_before; ++k)
    if (own_stream(before[k].stream)) {
      note_stream(before[k].stream, 0, seq.has_times ? std::optional<std::uint64_t>(start_ns) : std::nullopt,
                  fmt::format("a block live when device {}'s window began", device));
      break;
    }
  for (const Event& ev : events) {
    const Entry& e = entries[ev.entry];
    if (!own_stream(e.stream)) continue;
    note_stream(e.stream, op_before_entry[ev.entry],
                seq.has_times ? std::optional<std::uint64_t>(time[ev.entry]) : std::nullopt,
                where(ev.entry).text());
    break;
  }
  return out;
}

void SnapshotReader::add_facts(TorchSnapshot& snap, const std::vector<SeenFact>& seen) const {
  for (TorchDevice& d : snap.devices) {
    SimSequence& s = d.sequence;
    for (const SeenFact& f : seen) {
      std::size_t op = 0;
      if (static_cast<std::size_t>(s.device) == f.device) {
        op = f.op;
      } else if (f.time_ns && s.has_times) {
        op = static_cast<std::size_t>(
            std::lower_bound(s.ops.begin(), s.ops.end(), *f.time_ns,
                             [](const SimOp& o, std::uint64_t t) { return o.time_ns < t; }) -
            s.ops.begin());
      }
      s.facts.push_back({op, f.fact, f.evidence});
    }
    std::stable_sort(s.facts.begin(), s.facts.end(), [](const SimFact& a, const SimFact& b) { return a.op < b.op; });
  }
}

TorchSnapshot SnapshotReader::read(const PickleValue& top, int protocol) {
  out_.protocol = protocol;
  out_.stacks.emplace_back();  // 0: no frames
  // MemPool.snapshot() and torch.cuda.memory_snapshot(mempool_id) return
  // torch._C._cuda_memorySnapshot(mempool_id)["segments"] (torch/cuda/memory.py): a list of
  // segment dicts, pickled by the program; with a pool's id only that pool's segments
  // (CUDACachingAllocator.cpp, snapshot(mempool_id): get_private_pool_head_blocks).
  const bool segments_only = top.is(Kind::list) && (top.items().empty() || top.items()[0].is(Kind::dict));
  if (!top.is(Kind::dict) && !segments_only)
    throw PlanInputError(fmt::format("{}: the pickle holds {}, not a dict: not a PyTorch memory snapshot", source_,
                                     PickleValue::kind_phrase(top.kind())));
  const PickleValue* segments = segments_only ? &top : top.find("segments");
  const PickleValue* traces = segments_only ? nullptr : top.find("device_traces");
  if (!segments)
    throw PlanInputError(fmt::format("{}: the pickle's dict has no 'segments' key: not a PyTorch memory snapshot "
                                     "(torch.cuda.memory._dump_snapshot writes 'segments' and 'device_traces')",
                                     source_));
  read_segments(*segments);
  // One private pool owns every segment: a MemPool's snapshot, or _cuda_memorySnapshot(pool
  // id) (its device_traces, where kept, are the whole device's: record_trace keeps one ring
  // buffer a device, whatever the pool).
  const bool one_pool = pools_.size() == 1 && pools_[0] != PoolId{0, 0};
  if (one_pool) {
    out_.pool = pools_[0];
    out_.note = fmt::format("reserved from pool ({},{})'s segments only: a MemPool snapshot", pools_[0].first,
                            pools_[0].second);
  }
  if (!traces) {
    out_.note = one_pool ? out_.note + fmt::format(" ({}, no trace: the blocks allocated at the dump)",
                                                   segments_only ? "MemPool.snapshot()" : "no device_traces")
                         : fmt::format("segments only ({}, no trace): the blocks allocated at the dump",
                                       segments_only ? "torch.cuda.memory_snapshot()" : "no device_traces");
  }
  const PickleValue::Items no_traces;
  const PickleValue::Items& per_device = traces ? need_list(*traces, "device_traces", Where{}) : no_traces;
  if (per_device.size() > 65536) bad(Where{}, fmt::format("'device_traces' has {} devices", per_device.size()));
  std::optional<std::int64_t> origin_us;
  std::size_t outside_pool = 0;
  for (std::size_t d = 0; d < per_device.size(); ++d) {
    const PickleValue::Items& list = need_list(per_device[d], "device_traces", Where{Where::trace_list, d});
    if (list.empty()) continue;
    DeviceState& state = devices_[d];
    state.entries.reserve(list.size());
    std::sort(state.segments.begin(), state.segments.end(),
              [](const SegmentRange& a, const SegmentRange& b) { return a.address < b.address; });
    auto in_pool = [&](const Entry& e) {
      if (e.action == Action::unknown || e.action == Action::snapshot || e.action == Action::oom ||
          e.action == Action::annotate)
        return true;
      auto it = std::upper_bound(state.segments.begin(), state.segments.end(), e.addr,
                                 [](std::uint64_t a, const SegmentRange& r) { return a < r.address; });
      return it != state.segments.begin() && e.addr < std::prev(it)->end;
    };
    for (std::size_t i = 0; i < list.size(); ++i) {
      Entry e = read_entry(list[i], Where{Where::trace_entry, d, i});
      e.index = i;
      if (one_pool && !in_pool(e)) {  // another pool's
        ++outside_pool;
        continue;
      }
      if (const auto& t = e.time_us) {
        origin_us = origin_us ? std::min(*origin_us, *t) : *t;
        out_.last_time_us = out_.last_time_us ? std::max(*out_.last_time_us, *t) : *t;
      }
      state.entries.push_back(e);
    }
    if (state.entries.empty() && state.segments.empty()) devices_.erase(d);  // only other pools' entries
  }
  if (one_pool && traces)
    out_.note += fmt::format("; of the device traces (the whole devices') only the entries within its segments are "
                             "read ({} left out; a segment of the pool given back within the window is not seen)",
                             outside_pool);
  out_.first_time_us = origin_us;
  for (auto& [device, state] : devices_) {
    out_.devices.push_back(replay(device, state, origin_us));
    for (const std::string& kind : out_.devices.back().missing_actions)
      if (std::find(out_.missing_actions.begin(), out_.missing_actions.end(), kind) == out_.missing_actions.end())
        out_.missing_actions.push_back(kind);
  }
  std::vector<std::string> ordered;
  for (std::string_view kind : kLackable)
    if (std::find(out_.missing_actions.begin(), out_.missing_actions.end(), kind) != out_.missing_actions.end())
      ordered.emplace_back(kind);
  out_.missing_actions = std::move(ordered);
  if (origin_us) read_stages(top, *origin_us);

  // A second device is a second context, from its first op on (by the clock, on the others).
  std::vector<SeenFact> seen = facts_;
  std::vector<const TorchDevice*> allocating;
  for (const TorchDevice& d : out_.devices)
    if (!d.sequence.ops.empty()) allocating.push_back(&d);
  if (allocating.size() > 1) {
    const TorchDevice* second = allocating[1];
    bool timed = true;
    for (const TorchDevice* d : allocating) timed = timed && d->sequence.has_times;
    if (timed) {
      std::stable_sort(allocating.begin(), allocating.end(), [](const TorchDevice* a, const TorchDevice* b) {
        return a->sequence.ops.front().time_ns < b->sequence.ops.front().time_ns;
      });
      second = allocating[1];
    }
    seen.push_back({FreePathFact::second_context, static_cast<std::size_t>(second->sequence.device), 0,
                    timed ? std::optional<std::uint64_t>(second->sequence.ops.front().time_ns) : std::nullopt,
                    fmt::format("device {} allocates too (a second context)", second->sequence.device)});
  }
  add_facts(out_, seen);
  return std::move(out_);
}

std::optional<StageMark> SnapshotReader::stage_mark(const PickleValue& v, const Where& w, int device) const {
  if (!v.is(Kind::dict)) return std::nullopt;
  const PickleValue* stage = v.find("stage");
  const PickleValue* name = v.find("name");
  const PickleValue* time = v.find("time_us");
  if (!stage || !name || !time) return std::nullopt;  // not a range's mark
  if (!stage->is(Kind::string)) wrong_type(w, "stage", *stage, "a str");
  if (!name->is(Kind::string)) wrong_type(w, "name", *name, "a str");
  if (!time->is(Kind::integer)) wrong_type(w, "time_us", *time, "an int");
  StageMark m;
  if (stage->as_string() == "START")
    m.start = true;
  else if (stage->as_string() != "END")
    return std::nullopt;
  m.name = name->as_string();
  m.time_us = int_value(*time, "time_us", w);
  m.device = device;
  if (const PickleValue* d = v.find("device"); d && d->is(Kind::integer))
    m.device = static_cast<int>(std::clamp<std::int64_t>(int_value(*d, "device", w), -1, 65535));
  return m;
}

void SnapshotReader::read_stages(const PickleValue& top, std::int64_t origin_us) {
  std::vector<StageMark> marks;
  if (const PickleValue* list = top.find("external_annotations"); list && !list->is(Kind::none)) {
    const PickleValue::Items& items = need_list(*list, "external_annotations", Where{});
    for (std::size_t i = 0; i < items.size(); ++i)
      if (auto m = stage_mark(items[i], Where{Where::annotation, i}, -1)) marks.push_back(std::move(*m));
  }
  for (const auto& [device, state] : devices_)
    for (std::size_t i = 0; i < state.entries.size(); ++i)
      if (const PickleValue* a = state.entries[i].annotation)
        if (auto m = stage_mark(*a, Where{Where::trace_entry, device, i}, static_cast<int>(device)))
          marks.push_back(std::move(*m));
  std::stable_sort(marks.begin(), marks.end(),
                   [](const StageMark& a, const StageMark& b) { return a.time_us < b.time_us; });
  auto ns = [&](std::int64_t us) -> std::uint64_t {
    return us <= origin_us ? 0 : static_cast<std::uint64_t>(us - origin_us) * 1000;
  };
  std::map<std::pair<std::string, int>, std::vector<std::size_t>> open;  // -> stages begun, not ended
  for (const StageMark& m : marks) {
    auto& begun = open[{m.name, m.device}];
    if (m.start) {
      begun.push_back(out_.stages.size());
      out_.stages.push_back({m.name, m.device, ns(m.time_us), UINT64_MAX});
    } else if (!begun.empty()) {
      out_.stages[begun.back()].end_ns = ns(m.time_us);
      begun.pop_back();
    } else {
      out_.stages.push_back({m.name, m.device, 0, ns(m.time_us)});  // began before the window
    }
  }
  std::stable_sort(out_.stages.begin(), out_.stages.end(),
                   [](const TorchStage& a, const TorchStage& b) { return a.start_ns < b.start_ns; });
}

std::string slurp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw PlanInputError(path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PlanInputError(path + ": cannot open the file");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw PlanInputError(path + ": read error");
  return bytes;
}

bool has_key(std::string_view head, std::string_view key) {
  std::string short_form(1, '\x8c');  // SHORT_BINUNICODE, 1-byte length
  short_form += static_cast<char>(key.size());
  short_form += key;
  std::string long_form(1, 'X');  // BINUNICODE, 4-byte length
  long_form += static_cast<char>(key.size());
  long_form.append(3, '\0');
  long_form += key;
  return head.find(short_form) != std::string_view::npos || head.find(long_form) != std::string_view::npos;
}

}  // namespace

bool TorchSnapshotReader::accepts(std::string_view head) noexcept {
  if (head.size() < 3 || static_cast<unsigned char>(head[0]) != 0x80) return false;
  const auto protocol = static_cast<unsigned char>(head[1]);
  if (protocol < 2 || protocol > 5) return false;
  std::size_t at = 2;
  if (head.size() > at && static_cast<unsigned char>(head[at]) == 0x95) at += 9;  // FRAME and its length
  if (head.size() > at && head[at] == ']')  // EMPTY_LIST: MemPool.snapshot()'s list of segments
    return has_key(head, "device") && has_key(head, "total_size");
  if (head.size() <= at || head[at] != '}') return false;  // EMPTY_DICT: the top level is a dict
  return has_key(head, "segments") || has_key(head, "device_traces");
}

TorchSnapshot TorchSnapshotReader::read(std::string_view bytes, const std::string& source, const PickleLimits& limits) {
  if (bytes.empty()) throw PlanInputError(source + ": empty file");
  PickleResult pickle;
  try {
    pickle = parse_pickle(bytes, limits);
  } catch (const PickleError& e) {
    throw PlanInputError(fmt::format("{}: {}", source, e.what()));
  }
  return SnapshotReader(source).read(pickle.value, pickle.protocol);
}

TorchSnapshot TorchSnapshotReader::read_file(const std::string& path, const PickleLimits& limits) {
  const std::string bytes = slurp(path);
  return read(bytes, path, limits);
}

SimInput torch_snapshot_sim_input(const TorchSnapshot& snapshot) {
  SimInput in;
  in.format = std::string(TorchSnapshotReader::kFormatName);
  for (const TorchDevice& d : snapshot.devices)
    if (!d.sequence.ops.empty()) in.devices.push_back(d.sequence);
  return in;
}

}  // namespace luma::core
