// sim_sequence.cpp - reading a recorded run as SimSequences (see sim_sequence.h).
#include "simulate/sim_sequence.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include <optional>

#include "planner/input/csv_reader.h"
#include "planner/input/rmm_log_reader.h"
#include "planner/input/text_fields.h"
#include "planner/lower_bound.h"
#include "trace/trace_reader.h"

namespace luma::core {
namespace {

std::string slurp(const std::string& path, std::size_t most = ~std::size_t{0}) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PlanInputError(path + ": cannot open the file");
  std::string bytes;
  if (most == ~std::size_t{0}) {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    bytes.resize(most);
    in.read(bytes.data(), static_cast<std::streamsize>(most));
    bytes.resize(static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw PlanInputError(path + ": read error");
  return bytes;
}

// Whether a recorded stream is the program's own: not the legacy stream (0, or
// CU_STREAM_LEGACY, 0x1) nor a per-thread default stream (CU_STREAM_PER_THREAD, 0x2).
bool own_stream(std::uint64_t stream) { return stream > 2; }

// The facts of a whole process, shown to each device's sequence from the op where it
// showed (a second device in a trace is a second context for every device).
class ProcessFacts {
 public:
  // `s` is new: it learns every fact already seen, from its first op.
  void add_sequence(SimSequence& s) {
    for (const auto& [fact, evidence] : seen_) s.facts.push_back({0, fact, evidence});
    sequences_.push_back(&s);
  }
  void note(FreePathFact fact, const std::string& evidence) {
    if (facts_.has(fact)) return;
    facts_.add(fact);
    seen_.emplace_back(fact, evidence);
    for (SimSequence* s : sequences_) s->facts.push_back({s->ops.size(), fact, evidence});
  }
  bool has(FreePathFact fact) const { return facts_.has(fact); }

 private:
  FreePathFacts facts_;
  std::vector<std::pair<FreePathFact, std::string>> seen_;
  std::vector<SimSequence*> sequences_;
};

// A luma trace: every device's alloc and free_requested events, in file order (the
// allocator's order). A free of an address the trace never saw allocated (made before the
// trace began) is left out, as the planner's trace reader does. Facts: a second thread id,
// a second device (a second context), a stream of the program's own (strict: a trace does
// not say whether it was made blocking, so it counts as one that is not).
SimInput read_trace(const std::string& path, bool regular, std::string bytes) {
  SimInput in;
  in.format = "luma trace";
  std::map<int, SimSequence> devices;
  std::unordered_map<int, std::unordered_map<std::uint64_t, std::uint32_t>> live;  // device -> address -> id
  ProcessFacts facts;
  std::optional<std::uint64_t> first_thread;
  try {
    std::unique_ptr<TraceReader> reader =  // a file is mapped, a pipe's bytes were read
        regular ? std::make_unique<TraceReader>(path) : std::make_unique<TraceReader>(std::move(bytes), path);
    reader->read([&](const TraceEvent& e) {
      if (e.kind != EventKind::alloc && e.kind != EventKind::free_requested) return;
      const bool new_device = devices.count(e.device) == 0;
      SimSequence& s = devices[e.device];
      if (new_device) {
        if (devices.size() > 1)
          facts.note(FreePathFact::second_context, fmt::format("device {} from event {}", e.device, e.index));
        facts.add_sequence(s);
      }
      if (!first_thread) first_thread = e.thread;
      if (e.thread != *first_thread && !facts.has(FreePathFact::second_thread))
        facts.note(FreePathFact::second_thread, fmt::format("thread {} from event {}", e.thread, e.index));
      if (own_stream(e.stream) && !facts.has(FreePathFact::unordered_stream))
        facts.note(FreePathFact::unordered_stream,
                   fmt::format("stream {:#x} from event {} (a trace does not say whether it blocks)", e.stream,
                               e.index));
      s.device = e.device;
      s.has_times = true;
      auto& addresses = live[e.device];
      SimOp op;
      op.time_ns = e.time_ns;
      if (!s.ops.empty()) op.time_ns = std::max(op.time_ns, s.ops.back().time_ns);  // another thread's clock
      if (e.kind == EventKind::alloc) {
        op.id = static_cast<std::uint32_t>(s.allocations++);
        op.bytes = e.requested != 0 ? e.requested : e.size;
        addresses[e.address] = op.id;
      } else {
        const auto it = addresses.find(e.address);
        if (it == addresses.end()) {
          ++s.unmatched_frees;
          return;
        }
        op.id = it->second;
        op.is_free = true;
        addresses.erase(it);
      }
      s.ops.push_back(op);
    });
  } catch (const TraceError& e) {
    throw PlanInputError(e.what());
  }
  for (auto& [device, s] : devices) {
    finish_sim_sequence(s);
    in.devices.push_back(std::move(s));
  }
  return in;
}

// An RMM log: its rows in order, at the Time column's clock when every row has one.
SimInput read_rmm(const std::string& bytes, const std::string& path) {
  std::istringstream stream(bytes);
  const RmmLog log = RmmLogReader().read_log(stream, path);
  // Each allocate/free row's time is its index (the reader's lifetimes say which row
  // allocated or freed which buffer).
  std::vector<SimOp> rows(log.rows);
  std::vector<bool> used(log.rows, false);
  for (std::size_t i = 0; i < log.lifetimes.size(); ++i) {
    const Lifetime& lt = log.lifetimes[i];
    rows[lt.lower] = {0, lt.size, static_cast<std::uint32_t>(i), false};
    used[lt.lower] = true;
    if (log.freed[i]) {
      rows[lt.upper] = {0, 0, static_cast<std::uint32_t>(i), true};
      used[lt.upper] = true;
    }
  }
  SimInput in;
  in.format = "RMM log";
  SimSequence s;
  s.has_times = !log.row_time_ns.empty();
  s.ops.reserve(rows.size());
  // Facts: a second Thread value; a Stream value other than the legacy or per-thread
  // default streams (strict: the log does not say whether the stream blocks).
  ProcessFacts facts;
  facts.add_sequence(s);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (!used[r]) continue;  // (every row is one of the two; kept for safety)
    if (log.row_thread[r] != 0 && !facts.has(FreePathFact::second_thread))
      facts.note(FreePathFact::second_thread, "thread " + log.threads[log.row_thread[r]] +
                                                  " from allocate/free row " + std::to_string(r + 1));
    if (!facts.has(FreePathFact::unordered_stream)) {
      const std::string& stream = log.streams[log.row_stream[r]];
      const std::optional<std::uint64_t> v = text::parse_u64(stream, /*allow_hex=*/true);
      if (!v || own_stream(*v))
        facts.note(FreePathFact::unordered_stream, "stream " + stream + " from allocate/free row " + std::to_string(r + 1) +
                                                       " (an RMM log does not say whether it blocks)");
    }
    SimOp op = rows[r];
    op.time_ns = s.has_times ? log.row_time_ns[r] : r;
    s.ops.push_back(op);
  }
  s.allocations = log.lifetimes.size();
  finish_sim_sequence(s);
  if (!s.ops.empty()) in.devices.push_back(std::move(s));
  return in;
}

SimInput read_csv(const std::string& bytes, const std::string& path) {
  std::istringstream stream(bytes);
  const std::vector<Lifetime> lifetimes = PlannerCsvReader().read(stream, path);
  SimInput in;
  in.format = "planner CSV";
  std::map<int, std::vector<Lifetime>> per_device;
  for (const Lifetime& lt : lifetimes) per_device[lt.device].push_back(lt);
  for (auto& [device, lts] : per_device) {
    SimSequence s = sim_sequence_from_lifetimes(lts);
    s.device = device;
    if (!s.ops.empty()) in.devices.push_back(std::move(s));
  }
  return in;
}

}  // namespace

SimSequence sim_sequence_from_lifetimes(const std::vector<Lifetime>& lifetimes) {
  struct Edge {
    std::uint64_t time;
    bool start;
    std::uint32_t id;
  };
  std::vector<Edge> edges;
  std::vector<std::uint64_t> size_of;
  for (const Lifetime& lt : lifetimes) {
    if (lt.lower >= lt.upper) continue;
    const auto id = static_cast<std::uint32_t>(size_of.size());
    size_of.push_back(lt.size);
    edges.push_back({lt.lower, true, id});
    edges.push_back({lt.upper, false, id});
  }
  std::stable_sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
    return a.time != b.time ? a.time < b.time : (!a.start && b.start);
  });
  // Allocation numbers in allocation order, as in every other input.
  std::vector<std::uint32_t> renumber(size_of.size());
  SimSequence s;
  s.ops.reserve(edges.size());
  for (const Edge& e : edges) {
    SimOp op;
    op.time_ns = s.ops.size();
    if (e.start) {
      renumber[e.id] = static_cast<std::uint32_t>(s.allocations++);
      op.id = renumber[e.id];
      op.bytes = size_of[e.id];
    } else {
      op.id = renumber[e.id];
      op.is_free = true;
    }
    s.ops.push_back(op);
  }
  finish_sim_sequence(s);
  return s;
}

void finish_sim_sequence(SimSequence& s) {
  // Each op's position is its time for the lower bound: lifetimes [alloc op, free op).
  std::vector<Lifetime> lifetimes;
  std::vector<std::size_t> index;  // allocation id -> its lifetime
  s.allocations = 0;
  s.frees = 0;
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const SimOp& op = s.ops[i];
    if (!op.is_free) {
      if (index.size() <= op.id) index.resize(op.id + 1, ~std::size_t{0});
      index[op.id] = lifetimes.size();
      Lifetime lt;
      lt.lower = i;
      lt.upper = s.ops.size();
      lt.size = op.bytes;
      lifetimes.push_back(std::move(lt));
      ++s.allocations;
    } else {
      if (op.id < index.size() && index[op.id] != ~std::size_t{0}) lifetimes[index[op.id]].upper = i;
      ++s.frees;
    }
  }
  s.peak_live = lower_bound_bytes(lifetimes);
}

SimInput read_sim_input(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw PlanInputError(path + ": is a directory");
  // A regular file is read twice (its head, then the whole); a pipe (`<(zcat log.gz)`) once.
  const bool regular = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  if (!regular) return read_sim_input_bytes(slurp(path), path);
  const std::string head = slurp(path, kHeadBytes);
  if (TraceReader::accepts(head)) return read_trace(path, true, std::string());
  return read_sim_input_bytes(slurp(path), path);
}

SimInput read_sim_input_bytes(std::string bytes, const std::string& source) {
  const std::string head = bytes.substr(0, kHeadBytes);
  if (TraceReader::accepts(head)) return read_trace(source, false, std::move(bytes));
  if (RmmLogReader().accepts(head)) return read_rmm(bytes, source);
  if (PlannerCsvReader().accepts(head)) return read_csv(bytes, source);
  if (bytes.empty()) throw PlanInputError(source + ": empty file");
  throw PlanInputError(source +
                       ": neither a luma trace (starts with the LUMATRC magic), an RMM log (starts with "
                       "'Thread,Time,Action,Pointer,Size,Stream') nor a planner CSV (starts with "
                       "'id,lower,upper,size[,alignment]')");
}

}  // namespace luma::core
