// fake_capture.h - stream capture and graphs of the stand-in driver (a TEST DOUBLE): a
// capturing stream records its operations as graph nodes instead of running them; a graph
// instantiated from the capture replays them, in capture order, as one queued operation per
// cuGraphLaunch. The rules on what a capture forbids (cuThreadExchangeStreamCaptureMode,
// legacy-stream use, captured events) live in fake_capture.cpp; README.md names their sources.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fake_state.h"

namespace luma::fake {

// What a graph runs, shared by the graph and its executable instances (and by a launch in
// flight): the nodes in capture order, and the graph allocations freed inside the graph,
// which stay reserved for the graph's lifetime and are released with the body.
struct GraphBody {
  std::vector<std::function<void()>> nodes;
  std::vector<uintptr_t> owned;
  ~GraphBody();
};

struct Graph {
  std::shared_ptr<GraphBody> body = std::make_shared<GraphBody>();
};

struct GraphExec {
  std::shared_ptr<GraphBody> body;
};

struct Capture {
  uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;      // the thread that began it
  StreamPtr origin;            // where it began and must end
  Context* ctx = nullptr;
  bool invalidated = false;
  std::shared_ptr<Graph> graph;
  std::vector<StreamPtr> streams;               // origin and the streams it forked into
  std::map<const Stream*, size_t> nodes;        // nodes each stream captured
  std::map<const Stream*, size_t> joined;       // nodes of each stream the origin waited for
};

// All capture and graph state; guarded by m. Never destroyed (see fake_state.h).
struct CaptureRegistry {
  std::mutex m;
  std::vector<CapturePtr> active;  // begun and not yet ended (invalidated ones included)
  uint64_t next_id = 1;
  std::unordered_map<const void*, std::shared_ptr<Graph>> graphs;
  std::unordered_map<const void*, std::shared_ptr<GraphExec>> execs;
};
CaptureRegistry& captures();

// Queues fn on s, or records it as a graph node when s is capturing. `sync` says the call
// is a synchronous one (it waits for s), which a capturing stream refuses. *seq is the
// sequence number to wait for, 0 when nothing was queued. Errors: the capture was
// invalidated earlier; a synchronous call on a capturing stream (invalidates); use of the
// legacy stream while a blocking stream of its context captures (invalidates it).
CUresult enqueue(const StreamPtr& s, std::function<void()> fn, bool async, bool sync,
                 uint64_t* seq);
// For calls that are "potentially unsafe" during capture (cuMemAlloc, cuMemFree,
// synchronization, queries): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, invalidating the
// captures that prohibit them, when this thread is prohibited from them.
CUresult check_unsafe_call();
// cuCtxSynchronize and cuCtxSynchronize_v2: refused while ctx has a capture (invalidates it).
CUresult check_context_sync(Context* ctx);
// A query about a stream (its flags) while the stream captures: the driver refuses it with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture (observed for
// cuStreamGetFlags on an H200; README.md). 0 when s does not capture. Only
// cuStreamIsCapturing and cuStreamGetCaptureInfo, made for the purpose, answer then.
CUresult refuse_query_of_capturing(const StreamPtr& s);
// The capture s takes part in (null when none).
CapturePtr capture_of(const StreamPtr& s);
// True when s is the legacy stream and a blocking stream of its context captures.
bool legacy_blocked(const StreamPtr& s);

}  // namespace luma::fake

namespace luma::fake {
// cuEventRecord: when s captures, the event becomes part of the capture (true); otherwise it
// is an ordinary record again (false).
bool capture_record(Event& ev, const StreamPtr& s);
// cuEventQuery / cuEventSynchronize: CUDA_ERROR_CAPTURED_EVENT for an event last recorded
// in a capture (invalidating that capture if it is still going).
CUresult capture_event_use(Event& ev);
// cuStreamWaitEvent where s or ev takes part in a capture: joins s into ev's capture (fork),
// notes a join back into the origin, or refuses (isolation, merge, ended capture).
// *handled is false when neither does (an ordinary wait).
CUresult capture_wait(const StreamPtr& s, Event& ev, bool* handled);
}  // namespace luma::fake
