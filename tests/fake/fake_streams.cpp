// fake_streams.cpp - streams of the stand-in driver (a TEST DOUBLE): one worker thread per
// stream runs its operations in FIFO order, after an optional delay, so work really is
// asynchronous and a use-after-free race is observable. Legacy default stream semantics:
// an operation on the legacy stream waits for everything queued earlier on the blocking
// streams of its context, and an operation on a blocking stream waits for everything queued
// earlier on the legacy stream; CU_STREAM_NON_BLOCKING streams take no part.
// Never destroys a stream implicitly: workers of streams the program never destroyed
// simply die with the process.
#include <chrono>

#include "fake_state.h"

namespace luma::fake {

bool Stream::done(uint64_t seq) {
  std::lock_guard lock(m);
  return completed >= seq;
}

void Stream::wait(uint64_t seq) {
  std::unique_lock lock(m);
  cv.wait(lock, [&] { return completed >= seq; });
}

namespace {

void wait_for_gate(State& st) {
  std::unique_lock lock(st.gate_m);
  st.gate_cv.wait(lock, [&] { return st.gate_open; });
}

void run_worker(Stream* s) {
  State& st = state();
  for (;;) {
    Op op;
    {
      std::unique_lock lock(s->m);
      s->cv.wait(lock, [&] { return !s->queue.empty() || s->stop; });
      if (s->queue.empty()) return;  // stop requested and drained
      op = std::move(s->queue.front());
      s->queue.pop_front();
    }
    for (auto& [dep, seq] : op.deps) dep->wait(seq);
    if (op.async) {
      wait_for_gate(st);
      uint64_t delay = st.settings.delay_us.load();
      if (delay != 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    }
    if (op.fn) op.fn();
    {
      std::lock_guard lock(s->m);
      s->completed = op.seq;
    }
    s->cv.notify_all();
  }
}

// Last sequence number queued on s (0 when nothing was).
uint64_t tail(Stream& s) {
  std::lock_guard lock(s.m);
  return s.submitted;
}

StreamPtr new_stream(Context* ctx, unsigned flags, bool legacy) {
  auto s = std::make_shared<Stream>();
  s->ctx = ctx;
  s->flags = flags;
  s->legacy = legacy;
  s->worker = std::thread(run_worker, s.get());
  return s;
}

}  // namespace

StreamPtr make_stream(Context* ctx, unsigned flags, bool legacy) {
  StreamPtr s = new_stream(ctx, flags, legacy);
  if (!legacy) {
    std::lock_guard lock(ctx->m);
    ctx->streams.push_back(s);
  }
  return s;
}

void destroy_stream(const StreamPtr& s) {
  {
    std::lock_guard lock(s->ctx->m);
    auto& v = s->ctx->streams;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (*it == s) {
        v.erase(it);
        break;
      }
    }
  }
  {
    std::lock_guard lock(s->m);
    s->stop = true;
  }
  s->cv.notify_all();
  if (s->worker.joinable()) {
    if (s->worker.get_id() == std::this_thread::get_id()) {
      s->worker.detach();
    } else {
      s->worker.join();
    }
  }
}

namespace {

// Queues op on s; the caller holds s's context lock, so op's dependencies are exactly the
// work queued earlier.
uint64_t queue_op(const StreamPtr& s, Op op) {
  // A marker (an event record: no work) on a stream with nothing queued or running, whose
  // dependencies are done too, is complete at once: a GPU reaches it within microseconds,
  // where handing it to the stream's worker thread would make its completion wait for the
  // host scheduler (tens of microseconds on a loaded machine) and a fence on an idle GPU
  // look slow. Anything queued before it keeps the FIFO order: then the worker completes it.
  const bool marker = !op.fn && !op.async;
  bool deps_done = true;
  if (marker)
    for (auto& [dep, dep_seq] : op.deps) deps_done = deps_done && dep->done(dep_seq);
  uint64_t seq;
  {
    std::lock_guard lock(s->m);
    seq = ++s->submitted;
    op.seq = seq;
    if (marker && deps_done && s->queue.empty() && s->completed + 1 == seq) {
      s->completed = seq;
    } else {
      s->queue.push_back(std::move(op));
    }
  }
  s->cv.notify_all();
  return seq;
}

}  // namespace

uint64_t submit(const StreamPtr& s, std::function<void()> fn, bool async) {
  Context* ctx = s->ctx;
  Op op;
  op.fn = std::move(fn);
  op.async = async;
  // The context lock orders submissions, so the dependencies taken here are exactly the
  // work queued earlier.
  std::lock_guard ctx_lock(ctx->m);
  if (s->legacy) {
    for (auto& other : ctx->streams) {
      if (other->blocking()) {
        uint64_t t = tail(*other);
        if (t != 0) op.deps.emplace_back(other, t);
      }
    }
  } else if (s->blocking()) {
    uint64_t t = tail(*ctx->legacy);
    if (t != 0) op.deps.emplace_back(ctx->legacy, t);
  }
  return queue_op(s, std::move(op));
}

Marks context_tails(Context* ctx) {
  Marks marks;
  std::lock_guard ctx_lock(ctx->m);
  auto after = [&](const StreamPtr& s) {
    uint64_t t = tail(*s);
    if (t != 0) marks.emplace_back(s, t);
  };
  after(ctx->legacy);
  for (auto& s : ctx->streams) after(s);
  return marks;
}

bool marks_done(const Marks& marks) {
  for (const auto& [s, seq] : marks)
    if (!s->done(seq)) return false;
  return true;
}

void wait_marks(const Marks& marks) {
  for (const auto& [s, seq] : marks) s->wait(seq);
}

uint64_t stream_count(Context* ctx) {
  std::lock_guard lock(ctx->m);
  return 1 + ctx->streams.size();
}

void synchronize_context(Context* ctx) {
  std::vector<std::pair<StreamPtr, uint64_t>> tails;
  {
    std::lock_guard lock(ctx->m);
    tails.emplace_back(ctx->legacy, tail(*ctx->legacy));
    for (auto& s : ctx->streams) tails.emplace_back(s, tail(*s));
  }
  for (auto& [s, t] : tails) s->wait(t);
}

namespace {

// This thread's per-thread default streams, one per context. The list lives on the heap
// behind a trivially destructible pointer, so a CUDA call from an atexit handler (after this
// thread's thread_local destructors ran) still works; the cleaner synchronizes and destroys
// the streams when the thread ends, and streams created after it are left to the process.
struct PerThreadStreams {
  std::vector<std::pair<Context*, StreamPtr>> streams;
};

thread_local PerThreadStreams* t_streams = nullptr;
thread_local bool t_cleaner_done = false;

struct PerThreadCleaner {
  bool armed = false;
  ~PerThreadCleaner() {
    t_cleaner_done = true;
    PerThreadStreams* list = t_streams;
    t_streams = nullptr;
    if (list == nullptr) return;
    for (auto& [ctx, s] : list->streams) {
      s->wait(tail(*s));
      destroy_stream(s);
    }
    delete list;
  }
};

thread_local PerThreadCleaner t_cleaner;

}  // namespace

StreamPtr per_thread_stream(Context* ctx) {
  if (t_streams == nullptr) {
    t_streams = new PerThreadStreams();
    if (!t_cleaner_done) t_cleaner.armed = true;  // first use registers its destructor
  }
  for (auto& [c, s] : t_streams->streams) {
    if (c == ctx) return s;
  }
  StreamPtr s = make_stream(ctx, CU_STREAM_DEFAULT, false);
  t_streams->streams.emplace_back(ctx, s);
  return s;
}

}  // namespace luma::fake
