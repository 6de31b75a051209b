// fence_costs.cu - what the driver calls of luma's fences cost on a real GPU: cuEventRecord
// of a timing-free event (luma's pooled events are made with CU_EVENT_DISABLE_TIMING),
// cuEventQuery and cuStreamQuery, each on an idle stream and on a busy one (a kernel still
// running), and cuCtxRecordEvent (CUDA 12.5: one event for all the context's work, luma's
// fence where the driver has it) with 2, 18 and 258 streams in the context, idle, then
// with one of them busy. The stand-in driver charges assumed costs for these calls
// (LUMA_FAKE_CALL_COST, tests/fake/README.md "Call costs") and the many-streams benchmark's
// verdict depends on them (docs/architecture.md, "Fences with many streams"): this program
// replaces the assumptions with figures. Prints one row per call and stream state: median,
// p10 and p90 nanoseconds per call over batches of kBatch calls. Exit 0 ok, 1 a CUDA call
// failed, 2 usage. Needs a GPU; never run by CI.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpu_checks.cuh"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kBatch = 64;      // calls per timed sample: a call is ~0.1-1 us, the clock ~20 ns
constexpr int kSamples = 201;   // odd: the median is one sample
constexpr long long kBusySpin = 2'000'000'000LL;  // clock cycles: a second or so of "busy"

__global__ void spin_kernel(long long cycles, volatile int* stop) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles && *stop == 0) {
  }
}

template <typename Call>
void measure(const char* name, const char* state, Call call) {
  for (int i = 0; i < kBatch; ++i) call();  // warm-up
  std::vector<double> ns;
  for (int s = 0; s < kSamples; ++s) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) call();
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kBatch);
  }
  std::printf("  %-16s %-8s %10.0f %10.0f %10.0f\n", name, state, percentile(ns, 0.5),
              percentile(ns, 0.1), percentile(ns, 0.9));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: fence_costs (no arguments)\n");
    return 2;
  }
  GPU_CHECK(cudaFree(nullptr));  // the primary context, current on this thread
  cudaStream_t idle = nullptr, busy = nullptr;
  GPU_CHECK(cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking));
  GPU_CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
  CUevent ev_idle = nullptr, ev_busy = nullptr;
  GPU_CHECK(cuEventCreate(&ev_idle, CU_EVENT_DISABLE_TIMING));
  GPU_CHECK(cuEventCreate(&ev_busy, CU_EVENT_DISABLE_TIMING));
  int* stop = nullptr;
  GPU_CHECK(cudaMallocManaged(&stop, sizeof *stop));
  *stop = 0;
  GPU_CHECK(cudaDeviceSynchronize());

  std::printf("# driver calls of luma's fences, ns per call (batches of %d)\n", kBatch);
  std::printf("# %-16s %-8s %10s %10s %10s\n", "call", "stream", "median_ns", "p10_ns", "p90_ns");
  const auto s_idle = reinterpret_cast<CUstream>(idle);
  const auto s_busy = reinterpret_cast<CUstream>(busy);
  measure("cuEventRecord", "idle", [&] { GPU_CHECK(cuEventRecord(ev_idle, s_idle)); });
  GPU_CHECK(cudaStreamSynchronize(idle));
  measure("cuEventQuery", "idle", [&] { GPU_CHECK(cuEventQuery(ev_idle)); });
  measure("cuStreamQuery", "idle", [&] { GPU_CHECK(cuStreamQuery(s_idle)); });
  // cuCtxRecordEvent with more and more idle streams (the legacy stream counts too, as it
  // does in the stand-in's cost): does the driver pay per stream, and how much?
  CUcontext ctx = nullptr;
  GPU_CHECK(cuCtxGetCurrent(&ctx));
  std::vector<cudaStream_t> more;
  char state[32];
  for (int total : {2, 18, 258}) {
    while (static_cast<int>(more.size()) + 2 < total) {
      cudaStream_t s = nullptr;
      GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      more.push_back(s);
    }
    std::snprintf(state, sizeof state, "idle:%d", total + 1);
    measure("cuCtxRecordEvent", state, [&] { GPU_CHECK(cuCtxRecordEvent(ctx, ev_idle)); });
  }
  GPU_CHECK(cudaDeviceSynchronize());

  spin_kernel<<<1, 1, 0, busy>>>(kBusySpin, stop);
  GPU_CHECK(cudaGetLastError());
  GPU_CHECK(cuEventRecord(ev_busy, s_busy));
  measure("cuEventQuery", "busy", [&] {
    const CUresult r = cuEventQuery(ev_busy);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) GPU_CHECK(r);
  });
  measure("cuStreamQuery", "busy", [&] {
    const CUresult r = cuStreamQuery(s_busy);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) GPU_CHECK(r);
  });
  measure("cuEventRecord", "busy", [&] { GPU_CHECK(cuEventRecord(ev_busy, s_busy)); });
  std::snprintf(state, sizeof state, "busy:%d", static_cast<int>(more.size()) + 3);
  measure("cuCtxRecordEvent", state, [&] { GPU_CHECK(cuCtxRecordEvent(ctx, ev_idle)); });
  const bool still_busy = cuStreamQuery(s_busy) == CUDA_ERROR_NOT_READY;
  *stop = 1;  // managed memory: the kernel sees it and ends
  GPU_CHECK(cudaDeviceSynchronize());
  std::printf("# busy stream still running at the end of its measurements: %s\n",
              still_busy ? "yes" : "NO (the busy rows are not busy)");
  for (cudaStream_t s : more) GPU_CHECK(cudaStreamDestroy(s));
  return 0;
}
