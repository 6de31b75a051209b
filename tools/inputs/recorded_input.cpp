// recorded_input.cpp - the format of a recorded run found by content, and a PyTorch
// snapshot turned into what the commands take (see recorded_input.h).
#include "inputs/recorded_input.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "base/constants.h"
#include "planner/input/csv_reader.h"
#include "planner/input/lifetime_reader.h"
#include "planner/input/rmm_log_reader.h"
#include "stats/stats_format.h"
#include "trace/trace_reader.h"

namespace luma::tools {

namespace {

std::string read_bytes(const std::string& path, std::size_t most) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::PlanInputError(path + ": cannot open the file");
  std::string bytes;
  if (most == ~std::size_t{0}) {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    bytes.resize(most);
    in.read(bytes.data(), static_cast<std::streamsize>(most));
    bytes.resize(static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw core::PlanInputError(path + ": read error");
  return bytes;
}

// A pickle of any kind (PROTO 2 to 5 first): it goes to the snapshot reader, which names
// what makes it no snapshot (a list at the top, a missing key) or where it is damaged.
bool is_pickle(std::string_view head) {
  return head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 &&
         static_cast<unsigned char>(head[1]) >= 2 && static_cast<unsigned char>(head[1]) <= 5;
}

RecordedInput from_snapshot(core::TorchSnapshot snapshot) {
  RecordedInput in;
  in.sim.format = std::string(core::TorchSnapshotReader::kFormatName);
  for (core::TorchDevice& d : snapshot.devices) {
    if (d.sequence.ops.empty()) continue;
    in.torch.push_back(torch_window(d, snapshot.note));
    for (const core::TorchStage& t : snapshot.stages)
      if (t.device == -1 || t.device == d.sequence.device) in.torch.back()->stages.push_back(t);
    in.sim.devices.push_back(std::move(d.sequence));  // the allocations (and frames) stay
  }
  in.snapshot = std::make_shared<const core::TorchSnapshot>(std::move(snapshot));
  return in;
}

}  // namespace

bool is_torch_snapshot(std::string_view head) { return core::TorchSnapshotReader::accepts(head); }

TorchWindow torch_window(const core::TorchDevice& d, const std::string& snapshot_note) {
  TorchWindow w{d.incomplete, d.blocks_before_window, d.recorded_reserved_start_bytes, d.recorded_peak_reserved_bytes, {}, {}};
  if (!snapshot_note.empty()) w.notes.push_back(snapshot_note);
  if (!d.lacks.empty()) w.notes.push_back(d.lacks);
  return w;
}

std::string incomplete_window_line(const TorchWindow& w) {
  std::string line = fmt::format(
      "the trace is incomplete: {} blocks were live when the recording window began; replayed from that state",
      w.blocks_before_window);
  if (w.reserved_before_window != 0)
    line += fmt::format(" (PyTorch held {} reserved then)", core::format_bytes(w.reserved_before_window));
  return line;
}

std::vector<std::string> stages_at(const TorchWindow& w, std::uint64_t time_ns) {
  std::vector<std::string> out;  // by start, as the snapshot lists them: outermost first
  for (const core::TorchStage& t : w.stages)
    if (t.start_ns <= time_ns && time_ns <= t.end_ns && std::find(out.begin(), out.end(), t.name) == out.end())
      out.push_back(t.name);
  return out;
}

std::vector<std::string> window_lines(const TorchWindow& w) {
  std::vector<std::string> lines;
  if (w.incomplete) lines.push_back(incomplete_window_line(w));
  lines.insert(lines.end(), w.notes.begin(), w.notes.end());
  return lines;
}

RecordedInput read_recorded_input(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw core::PlanInputError(path + ": is a directory");
  // A regular file is looked at twice (its head, then by its reader); a pipe is read once.
  const bool regular = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  std::string bytes = read_bytes(path, regular ? core::kHeadBytes : ~std::size_t{0});
  const std::string_view head = std::string_view(bytes).substr(0, core::kHeadBytes);
  if (is_torch_snapshot(head) || is_pickle(head)) {
    if (regular) bytes = read_bytes(path, ~std::size_t{0});
    return from_snapshot(core::TorchSnapshotReader::read(bytes, path));
  }
  if (!head.empty() && !core::TraceReader::accepts(head) && !core::RmmLogReader().accepts(head) &&
      !core::PlannerCsvReader().accepts(head))
    throw core::PlanInputError(path +
                               ": neither a luma trace (starts with the LUMATRC magic), an RMM log (starts with "
                               "'Thread,Time,Action,Pointer,Size,Stream'), a planner CSV (starts with "
                               "'id,lower,upper,size[,alignment]') nor a PyTorch memory snapshot (a pickle, "
                               "torch.cuda.memory._dump_snapshot's)");
  RecordedInput in;
  in.sim = regular ? core::read_sim_input(path) : core::read_sim_input_bytes(std::move(bytes), path);
  return in;
}

std::vector<core::Lifetime> torch_snapshot_lifetimes(const core::TorchSnapshot& snapshot) {
  std::vector<core::Lifetime> out;
  for (const core::TorchDevice& d : snapshot.devices) {
    const core::SimSequence& s = d.sequence;
    const std::size_t first = out.size();
    out.resize(first + s.allocations);
    for (std::size_t i = 0; i < s.ops.size(); ++i) {
      const core::SimOp& op = s.ops[i];
      core::Lifetime& lt = out[first + op.id];
      if (op.is_free) {
        lt.upper = i;
        continue;
      }
      lt.id = std::to_string(first + op.id);
      lt.lower = i;
      lt.upper = s.ops.size();  // until its free, if it has one
      lt.size = op.bytes;
      lt.alignment = core::kCudaMallocAlignment;
      lt.device = s.device;
    }
  }
  return out;
}

}  // namespace luma::tools
