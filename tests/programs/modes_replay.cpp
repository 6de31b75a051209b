// modes_replay.cpp - replay-rmm: a recorded program's allocations and frees (an RMM log, as
// `luma export --format rmm` and RMM's logging adaptor write them) replayed through the
// workload's API table, row by row and thread by thread as they were recorded, so that
// luma and the driver alone can be compared on a real program's sequence (the device memory
// each needs at its peak: the stand-in's device_peak_bytes) and the run is the same every
// time. Prints one JSON line; exit 0 completed, 4 out of memory (support.h).
#include <dlfcn.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api.h"
#include "fake_control.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

// One row to replay. Rows the replay skips (allocate failure, size 0, the free of a size-0
// allocation) are not kept: they make no call, start no thread and make no stream.
struct Row {
  uint64_t size = 0;    // allocate: the bytes asked for
  uint32_t slot = 0;    // the buffer: index of this run's pointer (a reused pointer is a new one)
  uint32_t line = 0;    // in the file, for messages
  uint32_t stream = 0;  // 0: a default stream (0x0, 0x1, 0x2); else 1 + the program's own
  uint16_t thread = 0;  // index among the Thread values, 0: the first row's (the main thread)
  bool is_free = false;
};

// Beyond it a log is not a program's threads but a mistake; each value is an OS thread.
constexpr size_t kMaxThreads = 1024;

struct Log {
  std::vector<Row> rows;
  uint32_t slots = 0;    // allocations to replay
  uint32_t streams = 0;  // distinct non-default Stream values
  uint16_t threads = 0;  // distinct Thread values
};

// Bad input: the file and line named, exit 2 (usage). Only while parsing, before any CUDA.
[[noreturn]] void bad_log(const char* path, size_t line, const std::string& what) {
  std::fprintf(stderr, "%s: replay-rmm: %s:%zu: %s\n", g_prog, path, line, what.c_str());
  std::exit(kExitUsage);
}

// A number: hexadecimal after 0x / 0X, else decimal; false when the field is not one.
bool parse_number(std::string_view f, uint64_t* out) {
  unsigned base = 10;
  if (f.size() > 2 && f[0] == '0' && (f[1] == 'x' || f[1] == 'X')) {
    base = 16;
    f.remove_prefix(2);
  }
  if (f.empty() || f.size() > (base == 16 ? 16u : 19u)) return false;
  uint64_t v = 0;
  for (char c : f) {
    unsigned d;
    if (c >= '0' && c <= '9') {
      d = static_cast<unsigned>(c - '0');
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      d = static_cast<unsigned>(c - 'a' + 10);
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      d = static_cast<unsigned>(c - 'A' + 10);
    } else {
      return false;
    }
    v = v * base + d;
  }
  *out = v;
  return true;
}

std::string read_file(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: replay-rmm: cannot open %s: %s\n", g_prog, path,
                 std::strerror(errno));
    std::exit(kExitUsage);
  }
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) {
    std::fprintf(stderr, "%s: replay-rmm: cannot read %s\n", g_prog, path);
    std::exit(kExitUsage);
  }
  return text;
}

// The whole log, checked and resolved before the first CUDA call: each free names the slot
// of the allocation it frees, so the replay looks nothing up and a bad log ends before it
// begins (a replay that stopped half-way on a typo would look like a result).
Log parse_log(const char* path) {
  const std::string text = read_file(path);
  Log log;
  std::vector<std::string_view> thread_names;
  std::unordered_map<uint64_t, uint32_t> stream_index;  // Stream value -> 1 + index
  // Recorded pointer -> slot of the live allocation it names.
  std::unordered_map<uint64_t, uint32_t> live;
  live.reserve(4096);
  log.rows.reserve(text.size() / 48);  // a row of torch_train is some 50 bytes
  size_t line_no = 0;
  uint16_t last_thread = 0;
  for (size_t at = 0; at < text.size();) {
    const void* nl = std::memchr(text.data() + at, '\n', text.size() - at);
    const size_t end =
        nl != nullptr ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) : text.size();
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1) {
      if (line != "Thread,Time,Action,Pointer,Size,Stream")
        bad_log(path, line_no, "expected the header 'Thread,Time,Action,Pointer,Size,Stream'");
      continue;
    }
    if (line.empty()) continue;
    std::string_view f[6];
    size_t fields = 0;
    for (size_t from = 0;; ++fields) {
      const size_t comma = line.find(',', from);
      if (fields < 6)
        f[fields] = line.substr(from, comma == std::string_view::npos ? comma : comma - from);
      if (comma == std::string_view::npos) {
        ++fields;
        break;
      }
      from = comma + 1;
    }
    if (fields != 6) bad_log(path, line_no, "expected 6 fields, found " + std::to_string(fields));
    // The Thread value: the first row's is the main thread (index 0). Rows come in runs of
    // one thread, so the last one is tried first.
    uint16_t thread = last_thread;
    if (thread_names.empty() || thread_names[thread] != f[0]) {
      thread = 0;
      while (thread < thread_names.size() && thread_names[thread] != f[0]) ++thread;
      if (thread == thread_names.size()) {
        if (thread_names.size() == kMaxThreads)
          bad_log(path, line_no, "more than " + std::to_string(kMaxThreads) + " Thread values");
        thread_names.push_back(f[0]);
      }
      last_thread = thread;
    }
    const std::string_view action = f[2];
    if (action == "allocate failure") continue;  // nothing was handed out
    const bool is_free = action == "free";
    if (!is_free && action != "allocate")
      bad_log(path, line_no, "unknown action '" + std::string(action) +
                                 "' (expected allocate, free or allocate failure)");
    uint64_t pointer = 0, size = 0, stream = 0;
    if (!parse_number(f[3], &pointer))
      bad_log(path, line_no, "pointer is not a number: '" + std::string(f[3]) + "'");
    if (!parse_number(f[4], &size))
      bad_log(path, line_no, "size is not a number: '" + std::string(f[4]) + "'");
    if (!parse_number(f[5], &stream))
      bad_log(path, line_no, "stream is not a number: '" + std::string(f[5]) + "'");
    Row r;
    r.line = static_cast<uint32_t>(line_no);
    r.thread = thread;
    r.is_free = is_free;
    if (is_free) {
      const auto it = live.find(pointer);
      if (it == live.end()) {
        // The free of a size-0 allocation (never kept: cudaMalloc(0) hands out nothing).
        if (size == 0) continue;
        bad_log(path, line_no, "free of unknown pointer " + std::string(f[3]));
      }
      r.slot = it->second;
      live.erase(it);
    } else {
      if (size == 0) continue;  // as cudaMalloc(&p, 0): nothing handed out, nothing to free
      if (live.count(pointer) != 0)
        bad_log(path, line_no, "allocate of pointer " + std::string(f[3]) + ", which is live");
      r.size = size;
      r.slot = log.slots++;
      live.emplace(pointer, r.slot);
    }
    // 0x0 legacy, 0x1 CU_STREAM_LEGACY, 0x2 CU_STREAM_PER_THREAD: nothing to make.
    if (stream > 2) {
      auto [it, added] = stream_index.emplace(stream, log.streams + 1);
      if (added) ++log.streams;
      r.stream = it->second;
    }
    log.rows.push_back(r);
  }
  if (line_no == 0) bad_log(path, 1, "empty file");
  log.threads = static_cast<uint16_t>(thread_names.size());
  return log;
}

// The stand-in's counters of device 0, looked up when asked (a real driver has none: then
// `found` is false). The symbol is in the global scope when the program links libcuda.so.1
// (prog_driver); a runtime opens the driver itself, locally, so it is looked up there too.
struct Counters {
  bool found = false;
  luma_fake_counters c{};
};

Counters stand_in_counters() {
  using GetCounters = int(int, luma_fake_counters*);
  Counters out;
  auto* get = reinterpret_cast<GetCounters*>(dlsym(RTLD_DEFAULT, "luma_fake_get_counters"));
  if (get == nullptr) {
    if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
      get = reinterpret_cast<GetCounters*>(dlsym(lib, "luma_fake_get_counters"));
      dlclose(lib);  // still loaded: the runtime holds it
    }
  }
  out.found = get != nullptr && get(0, &out.c) == 0;
  return out;
}

// The replay: one participant per Thread value, the main thread the first. Only the
// participant holding the baton (turn) runs: it runs every row of its own that comes next,
// and at a row of another thread's passes the baton to it (starting that thread at its
// first row) and waits to get it back. So rows run strictly in file order, each finished
// before the next begins, and a run of one thread's rows costs no handoff. The state below
// is touched only by the baton holder; the mutex that passes the baton orders it.
class Replay {
 public:
  explicit Replay(const Log& log)
      : log_(log), pointers_(log.slots, nullptr), streams_(log.streams + 1, nullptr),
        threads_(log.threads), wake_(log.threads) {
    for (auto& cv : wake_) cv = std::make_unique<std::condition_variable>();
  }

  // On the main thread, CUDA initialised; returns once the replay has ended and every
  // thread it started has been joined.
  void run() {
    if (log_.threads == 0) {
      finish();
      return;
    }
    participate(0);
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }

  bool completed() const { return !out_of_memory_; }
  uint64_t served() const { return served_; }
  uint64_t failed_bytes() const { return failed_bytes_; }
  const Counters& counters() const { return counters_; }

 private:
  void participate(uint16_t me) {
    size_t pos = pos_;
    while (pos < log_.rows.size()) {
      const Row& r = log_.rows[pos];
      if (r.thread != me) {
        pos_ = pos;
        pass_to(r.thread);
        if (!await(me)) return;  // the replay ended on another thread
        pos = pos_;
        continue;
      }
      if (!replay(r)) break;  // out of memory: no more rows
      ++pos;
    }
    pos_ = pos;
    finish();
  }

  // One row; false when its allocation ran out of memory.
  bool replay(const Row& r) {
    if (r.stream != 0 && streams_[r.stream] == nullptr) {
      // The first row to name this stream: the program makes it (and only keeps it).
      if (int rc = A.stream_create(&streams_[r.stream], true))
        die(r, "stream create (non-blocking)", rc);
    }
    if (r.is_free) {
      if (int rc = A.free(pointers_[r.slot])) die(r, "free", rc);
      pointers_[r.slot] = nullptr;
      return true;
    }
    void* p = nullptr;
    const int rc = A.alloc(&p, r.size);
    if (rc == A.oom_code) {
      out_of_memory_ = true;
      failed_bytes_ = r.size;
      return false;
    }
    if (rc != 0) die(r, "alloc", rc);
    pointers_[r.slot] = p;
    ++served_;
    return true;
  }

  [[noreturn]] void die(const Row& r, const char* what, int rc) {
    std::fprintf(stderr, "%s: replay-rmm: line %u: %s returned %d\n", g_prog, r.line, what, rc);
    std::fflush(nullptr);
    std::_Exit(kExitWrong);
  }

  // Gives the baton to participant `next`, starting its thread at its first row. The
  // thread is made under the lock: the main thread joins it once the replay has ended, and
  // reads threads_ then; made after the unlock, the new thread could end the replay while
  // its std::thread was still being stored by a third thread.
  void pass_to(uint16_t next) {
    std::lock_guard lock(m_);
    turn_ = next;
    if (next != 0 && !threads_[next].joinable()) {
      threads_[next] = std::thread([this, next] {
        if (!await(next)) return;
        // Its first CUDA call, right before its first row: the program's context (the one
        // the main thread uses: device 0's) made current on this thread.
        if (int rc = A.set_device(0)) {
          std::fprintf(stderr, "%s: replay-rmm: a new thread's set_device(0) returned %d\n",
                       g_prog, rc);
          std::fflush(nullptr);
          std::_Exit(kExitWrong);
        }
        participate(next);
      });
    } else {
      wake_[next]->notify_one();
    }
  }

  // Waits for the baton; false when the replay ended instead.
  bool await(uint16_t me) {
    std::unique_lock lock(m_);
    wake_[me]->wait(lock, [&] { return turn_ == me || ended_; });
    return !ended_;
  }

  // The end (last row, or out of memory): the counters read at once, before any thread
  // exits or anything is freed, then every participant released.
  void finish() {
    counters_ = stand_in_counters();
    {
      std::lock_guard lock(m_);
      ended_ = true;
    }
    for (auto& cv : wake_) cv->notify_all();
  }

  const Log& log_;
  std::vector<void*> pointers_;  // by slot
  std::vector<void*> streams_;   // by Row::stream (0 unused)
  std::vector<std::thread> threads_;  // by participant (0, the main thread, has none)
  std::vector<std::unique_ptr<std::condition_variable>> wake_;
  size_t pos_ = 0;
  uint64_t served_ = 0;
  uint64_t failed_bytes_ = 0;
  bool out_of_memory_ = false;
  Counters counters_;
  std::mutex m_;
  uint16_t turn_ = 0;
  bool ended_ = false;
};

void print_counter(const char* name, bool found, uint64_t v, bool last = false) {
  if (found) {
    std::printf("\"%s\": %llu%s", name, static_cast<unsigned long long>(v), last ? "" : ", ");
  } else {
    std::printf("\"%s\": null%s", name, last ? "" : ", ");
  }
}

}  // namespace

// replay-rmm FILE: replays an RMM log through A.alloc / A.free (cuMemAlloc_v2 / cuMemFree_v2
// in prog_driver, cudaMalloc / cudaFree elsewhere), row by row in file order:
//  - each Thread value is an OS thread: the first row's is the main thread (which
//    initialised CUDA); any other gets a thread when its first row comes, which makes the
//    program's context current (A.set_device(0)) right before that row and runs until the
//    end of the log; a row runs only once the one before it has finished;
//  - a Stream value other than 0x0, 0x1, 0x2 is a stream of the program's own: made
//    (non-blocking) before the first row that names it, by that row's thread, and not
//    otherwise used;
//  - a recorded pointer names the live allocation it was handed out for (one reused after
//    its free is a new buffer); a free of no live pointer ends it with exit 2 naming the
//    line; `allocate failure` rows, size-0 allocations and their frees are skipped;
//  - an allocation refused with out of memory (2) stops it at once.
// Then one JSON line on stdout:
//   {"completed": B, "allocations_served": N, "failed_bytes": S, "device_peak_bytes": P,
//    "mem_alloc_calls": A, "mem_free_calls": F, "mem_create_calls": C, "mem_release_calls": R}
// N: successful allocations; S: the refused size (0 when completed); P, A, F, C, R: the
// stand-in's counters of device 0 (null on a real driver), read as the replay ends, before
// anything is freed. Buffers live at the end are left to the process's exit.
// Exit 0 completed, 4 out of memory, 2 bad usage or log, 1 any other error.
int mode_replay_rmm(int argc, char** argv) {
  if (argc != 1) return kExitUsage;
  const Log log = parse_log(argv[0]);
  // The main thread initialises CUDA, with device 0's context current.
  ok(A.set_device(0), "set device 0");
  Replay replay(log);
  replay.run();
  const Counters& c = replay.counters();
  std::printf("{\"completed\": %s, \"allocations_served\": %llu, \"failed_bytes\": %llu, ",
              replay.completed() ? "true" : "false",
              static_cast<unsigned long long>(replay.served()),
              static_cast<unsigned long long>(replay.failed_bytes()));
  print_counter("device_peak_bytes", c.found, c.c.device_peak_bytes);
  print_counter("mem_alloc_calls", c.found, c.c.mem_alloc_calls);
  print_counter("mem_free_calls", c.found, c.c.mem_free_calls);
  print_counter("mem_create_calls", c.found, c.c.mem_create_calls);
  print_counter("mem_release_calls", c.found, c.c.mem_release_calls, true);
  std::printf("}\n");
  std::fflush(stdout);
  return replay.completed() ? 0 : kExitOutOfMemory;
}

}  // namespace luma::programs
