// fake_capture.cpp - stream capture and graphs of the stand-in driver (a TEST DOUBLE).
// Follows the Driver API documentation of cuStreamBeginCapture, cuStreamBeginCaptureToGraph,
// cuStreamEndCapture, cuGraphCreate,
// cuStreamIsCapturing, cuStreamGetCaptureInfo, cuThreadExchangeStreamCaptureMode,
// cuGraphInstantiate, cuGraphLaunch and of the CUDA_ERROR_STREAM_CAPTURE_* / CAPTURED_EVENT
// codes (cuda.h); README.md lists each rule with its source. Captured work is a list of
// nodes replayed in capture order, which is one valid order of the captured graph.
#include "fake_capture.h"

#include <algorithm>
#include <chrono>
#include <thread>

#define LUMA_FAKE_API __attribute__((visibility("default")))
#include "fake_driver_api.h"

namespace luma::fake {

CaptureRegistry& captures() {
  static auto* r = new CaptureRegistry();  // never destroyed: workers may outlive exit
  return *r;
}

GraphBody::~GraphBody() {
  for (uintptr_t p : owned) {
    Allocation a;
    if (unregister(p, &a)) release_memory(p, a);
  }
}

namespace {

// This thread's capture interaction mode (cuThreadExchangeStreamCaptureMode).
thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

bool valid_mode(CUstreamCaptureMode m) {
  return m == CU_STREAM_CAPTURE_MODE_GLOBAL || m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         m == CU_STREAM_CAPTURE_MODE_RELAXED;
}

// Captures of s's context that a use of its legacy stream would depend on: those with a
// blocking stream. Caller holds captures().m.
std::vector<CapturePtr> implicit_conflicts(const StreamPtr& s) {
  std::vector<CapturePtr> out;
  if (!s->legacy) return out;
  for (auto& c : captures().active) {
    if (c->ctx != s->ctx) continue;
    for (auto& x : c->streams) {
      if (x->blocking()) {
        out.push_back(c);
        break;
      }
    }
  }
  return out;
}

void end_capture(CaptureRegistry& r, const CapturePtr& c) {
  for (auto& x : c->streams) x->capture.reset();
  r.active.erase(std::remove(r.active.begin(), r.active.end(), c), r.active.end());
}

// LUMA_FAKE_CAPTURE_HOLD_US: the calling thread stays in the driver call a while after the
// capture began or ended, as a thread preempted there does, with no lock of the stand-in
// held, so other threads' calls land in that window (README.md, "Stream capture").
CUresult hold_then(CUresult r) {
  const uint64_t us = state().settings.capture_hold_us.load();
  if (us != 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  return r;
}

// A capture of s into graph, begun by this thread; r.m held.
void start(CaptureRegistry& r, const StreamPtr& s, CUstreamCaptureMode mode, std::shared_ptr<Graph> graph) {
  auto c = std::make_shared<Capture>();
  c->id = r.next_id++;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  c->ctx = s->ctx;
  c->graph = std::move(graph);
  c->streams.push_back(s);
  s->capture = c;
  r.active.push_back(c);
}

CUresult begin(CUstream h, CUstreamCaptureMode mode, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (!valid_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
  // "Capture may not be initiated if stream is CU_STREAM_LEGACY."
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CaptureRegistry& r = captures();
  {
    std::lock_guard lock(r.m);
    // "it may only be initiated if the stream is not already in capture mode"
    if (s->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    start(r, s, mode, std::make_shared<Graph>());
  }
  return hold_then(CUDA_SUCCESS);
}

// cuStreamBeginCaptureToGraph (CUDA 12.3): as begin(), capturing into an existing graph,
// which cuStreamEndCapture then returns. Strict where the stand-in imitates less than the
// driver (README.md): dependencies (the stand-in's graphs have no node handles), and a
// graph that was instantiated or is being captured into, are refused.
CUresult begin_to_graph(CUstream h, CUgraph graph, const CUgraphNode* dependencies,
                        size_t numDependencies, CUstreamCaptureMode mode, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (!valid_mode(mode) || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // "Can be NULL if numDependencies is 0."
  if (numDependencies != 0) return CUDA_ERROR_INVALID_VALUE;  // (strict: not imitated)
  (void)dependencies;
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CaptureRegistry& r = captures();
  std::unique_lock lock(r.m);
  auto it = r.graphs.find(graph);
  if (it == r.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
  if (s->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  std::shared_ptr<Graph> g = it->second;
  if (g->body.use_count() > 1) return CUDA_ERROR_INVALID_VALUE;  // instantiated (strict)
  for (const CapturePtr& c : r.active)
    if (c->graph == g) return CUDA_ERROR_INVALID_VALUE;  // captured into already (strict)
  start(r, s, mode, std::move(g));
  lock.unlock();
  return hold_then(CUDA_SUCCESS);
}

// The capture on s ended: its answer; r.m held.
CUresult finish(CaptureRegistry& r, const StreamPtr& s, const CapturePtr& c, CUgraph* out) {
  end_capture(r, c);
  *out = nullptr;
  if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  for (auto& x : c->streams) {
    if (x == s) continue;
    if (c->nodes[x.get()] > c->joined[x.get()]) return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  r.graphs[c->graph.get()] = c->graph;
  *out = reinterpret_cast<CUgraph>(c->graph.get());
  return CUDA_SUCCESS;
}

CUresult end(CUstream h, CUgraph* out, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CaptureRegistry& r = captures();
  CUresult answer = CUDA_SUCCESS;
  {
    std::lock_guard lock(r.m);
    CapturePtr c = s->capture;
    if (c == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    if (c->origin != s) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != std::this_thread::get_id()) {
      return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    answer = finish(r, s, c, out);
  }
  return hold_then(answer);  // ended, whatever the answer
}

// Status and id of s's capture; CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream
// while a blocking stream captures (that capture is not invalidated).
CUresult status_of(CUstream h, bool ptds, CUstreamCaptureStatus* status, cuuint64_t* id,
                   CUgraph* graph) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CaptureRegistry& r = captures();
  std::lock_guard lock(r.m);
  if (!implicit_conflicts(s).empty()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  CapturePtr c = s->capture;
  if (c == nullptr) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  *status = c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id != nullptr) *id = c->id;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(c->graph.get());
  return CUDA_SUCCESS;
}

CUresult capture_info(CUstream h, bool ptds, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                      size_t* num_deps) {
  if (edges != nullptr && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = status_of(h, ptds, status, id, graph)) return r;
  // The stand-in keeps no node handles: the next node's dependency set is reported empty.
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (num_deps != nullptr) *num_deps = 0;
  return CUDA_SUCCESS;
}

CUresult launch(CUgraphExec exec, CUstream h, bool ptds) {
  StreamPtr s;
  if (CUresult r = resolve(h, ptds, s)) return r;
  std::shared_ptr<GraphBody> body;
  {
    CaptureRegistry& r = captures();
    std::lock_guard lock(r.m);
    auto it = r.execs.find(exec);
    if (it == r.execs.end()) return CUDA_ERROR_INVALID_VALUE;
    body = it->second->body;
  }
  uint64_t seq = 0;
  return enqueue(
      s,
      [body] {
        for (auto& n : body->nodes) n();
      },
      true, false, &seq);
}

}  // namespace

CapturePtr capture_of(const StreamPtr& s) {
  std::lock_guard lock(captures().m);
  return s->capture;
}

CUresult refuse_query_of_capturing(const StreamPtr& s) {
  std::lock_guard lock(captures().m);
  if (s->capture == nullptr) return CUDA_SUCCESS;
  s->capture->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

bool legacy_blocked(const StreamPtr& s) {
  std::lock_guard lock(captures().m);
  return !implicit_conflicts(s).empty();
}

CUresult enqueue(const StreamPtr& s, std::function<void()> fn, bool async, bool sync,
                 uint64_t* seq) {
  *seq = 0;
  {
    CaptureRegistry& r = captures();
    std::lock_guard lock(r.m);
    if (CapturePtr c = s->capture) {
      if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      if (sync) {
        c->invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      }
      if (fn) {
        c->graph->body->nodes.push_back(std::move(fn));
        ++c->nodes[s.get()];
      }
      return CUDA_SUCCESS;
    }
    auto conflicts = implicit_conflicts(s);
    if (!conflicts.empty()) {
      for (auto& c : conflicts) c->invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
  }
  *seq = submit(s, std::move(fn), async);
  return CUDA_SUCCESS;
}

CUresult check_unsafe_call() {
  if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  CaptureRegistry& r = captures();
  std::lock_guard lock(r.m);
  auto me = std::this_thread::get_id();
  bool prohibited = false;
  for (auto& c : r.active) {
    bool own = c->thread == me && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    bool other_global = t_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->thread != me &&
                        c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || other_global) {
      c->invalidated = true;
      prohibited = true;
    }
  }
  return prohibited ? CUresult{CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED} : CUresult{CUDA_SUCCESS};
}

CUresult check_context_sync(Context* ctx) {
  CaptureRegistry& r = captures();
  std::lock_guard lock(r.m);
  bool refused = false;
  for (auto& c : r.active) {
    if (c->ctx == ctx) {
      c->invalidated = true;
      refused = true;
    }
  }
  return refused ? CUresult{CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED} : CUresult{CUDA_SUCCESS};
}

bool capture_record(Event& ev, const StreamPtr& s) {
  CaptureRegistry& r = captures();
  std::lock_guard lock(r.m);
  CapturePtr c = s->capture;
  if (c == nullptr) {
    ev.captured.reset();
    ev.captured_on.reset();
    return false;
  }
  ev.captured = c;
  ev.captured_on = s;
  ev.captured_pos = c->nodes[s.get()];
  return true;
}

CUresult capture_event_use(Event& ev) {
  if (ev.captured == nullptr) return CUDA_SUCCESS;
  std::lock_guard lock(captures().m);
  // The capture it belongs to, if still going, cannot survive an outside wait on it.
  if (std::find(captures().active.begin(), captures().active.end(), ev.captured) !=
      captures().active.end()) {
    ev.captured->invalidated = true;
  }
  return CUDA_ERROR_CAPTURED_EVENT;
}

CUresult capture_wait(const StreamPtr& s, Event& ev, bool* handled) {
  CaptureRegistry& r = captures();
  std::lock_guard lock(r.m);
  CapturePtr mine = s->capture;
  CapturePtr theirs = ev.captured;
  bool live = theirs != nullptr &&
              std::find(r.active.begin(), r.active.end(), theirs) != r.active.end();
  *handled = mine != nullptr || theirs != nullptr;
  if (mine == nullptr && theirs == nullptr) return CUDA_SUCCESS;
  if (mine != nullptr && mine->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (mine != nullptr && theirs == nullptr) {
    // A dependency on work outside the capture: only in-stream order may cross it.
    mine->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  if (!live) return CUDA_ERROR_CAPTURED_EVENT;  // recorded in a capture that has ended
  if (mine != nullptr && mine != theirs) {
    mine->invalidated = true;
    theirs->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  }
  if (mine == nullptr) {  // fork: s joins the capture
    if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    s->capture = theirs;
    theirs->streams.push_back(s);
    return CUDA_SUCCESS;
  }
  if (s == theirs->origin && ev.captured_on != s) {  // join back into the origin
    size_t& seen = theirs->joined[ev.captured_on.get()];
    seen = std::max(seen, ev.captured_pos);
  }
  return CUDA_SUCCESS;
}

}  // namespace luma::fake

using namespace luma::fake;

extern "C" {

CUresult cuStreamBeginCapture(CUstream hStream) {
  return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return begin(hStream, mode, false);
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return begin(hStream, mode, true);
}
CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                     const CUgraphEdgeData*, size_t numDependencies,
                                     CUstreamCaptureMode mode) {
  return begin_to_graph(hStream, hGraph, dependencies, numDependencies, mode, false);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                          const CUgraphNode* dependencies, const CUgraphEdgeData*,
                                          size_t numDependencies, CUstreamCaptureMode mode) {
  return begin_to_graph(hStream, hGraph, dependencies, numDependencies, mode, true);
}
CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return end(hStream, phGraph, false);
}
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return end(hStream, phGraph, true);
}
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return status_of(hStream, false, captureStatus, nullptr, nullptr);
}
CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return status_of(hStream, true, captureStatus, nullptr, nullptr);
}
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                cuuint64_t* id_out) {
  return capture_info(hStream, false, captureStatus_out, id_out, nullptr, nullptr, nullptr,
                      nullptr);
}
CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                     cuuint64_t* id_out) {
  return capture_info(hStream, true, captureStatus_out, id_out, nullptr, nullptr, nullptr,
                      nullptr);
}
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                   cuuint64_t* id_out, CUgraph* graph_out,
                                   const CUgraphNode** dependencies_out,
                                   size_t* numDependencies_out) {
  return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out,
                      nullptr, numDependencies_out);
}
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                        CUstreamCaptureStatus* captureStatus_out,
                                        cuuint64_t* id_out, CUgraph* graph_out,
                                        const CUgraphNode** dependencies_out,
                                        size_t* numDependencies_out) {
  return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out,
                      nullptr, numDependencies_out);
}
CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                   cuuint64_t* id_out, CUgraph* graph_out,
                                   const CUgraphNode** dependencies_out,
                                   const CUgraphEdgeData** edgeData_out,
                                   size_t* numDependencies_out) {
  return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out,
                      edgeData_out, numDependencies_out);
}
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                        CUstreamCaptureStatus* captureStatus_out,
                                        cuuint64_t* id_out, CUgraph* graph_out,
                                        const CUgraphNode** dependencies_out,
                                        const CUgraphEdgeData** edgeData_out,
                                        size_t* numDependencies_out) {
  return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out,
                      edgeData_out, numDependencies_out);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (CUresult r = ready_host()) return r;
  if (mode == nullptr || !valid_mode(*mode)) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_mode);
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                     unsigned long long flags) {
  if (CUresult r = ready()) return r;
  if (phGraphExec == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CaptureRegistry& r = captures();
  std::lock_guard lock(r.m);
  auto it = r.graphs.find(hGraph);
  if (it == r.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
  auto exec = std::make_shared<GraphExec>();
  exec->body = it->second->body;
  r.execs[exec.get()] = exec;
  *phGraphExec = reinterpret_cast<CUgraphExec>(exec.get());
  return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return launch(hGraphExec, hStream, false);
}
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return launch(hGraphExec, hStream, true);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  if (CUresult r = ready()) return r;
  std::shared_ptr<GraphExec> gone;  // released after the lock: it may free graph memory
  {
    CaptureRegistry& r = captures();
    std::lock_guard lock(r.m);
    auto it = r.execs.find(hGraphExec);
    if (it == r.execs.end()) return CUDA_ERROR_INVALID_VALUE;
    gone = std::move(it->second);
    r.execs.erase(it);
  }
  return CUDA_SUCCESS;
}

// "flags - Graph creation flags, must be 0" (cuGraphCreate): an empty graph.
CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (CUresult r = ready()) return r;
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto g = std::make_shared<Graph>();
  CaptureRegistry& r = captures();
  std::lock_guard lock(r.m);
  r.graphs[g.get()] = g;
  *phGraph = reinterpret_cast<CUgraph>(g.get());
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph) {
  if (CUresult r = ready()) return r;
  std::shared_ptr<Graph> gone;
  {
    CaptureRegistry& r = captures();
    std::lock_guard lock(r.m);
    auto it = r.graphs.find(hGraph);
    if (it == r.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
    gone = std::move(it->second);
    r.graphs.erase(it);
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
