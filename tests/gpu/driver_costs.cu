// driver_costs.cu - what each driver call that changes the device's memory costs on a real
// GPU, each call timed alone: cuMemAlloc and cuMemFree (apart, not as a pair), and the
// virtual-memory path of an expandable segment: cuMemCreate (pinned device memory of
// device 0, the size rounded up to cuMemGetAllocationGranularity's minimum),
// cuMemAddressReserve, cuMemMap, cuMemSetAccess (read-write for device 0), cuMemUnmap,
// cuMemRelease, cuMemAddressFree; for 2 MiB, 8 MiB, 32 MiB, 128 MiB, 512 MiB and 1 GiB.
// `luma simulate` estimates driver time from a table of these costs
// (core/simulate/driver_costs.cpp), whose cuMemAlloc / cuMemFree rows are halves of a
// measured pair and whose virtual-memory rows are estimates: these figures replace them.
// scripts/gpu-check's costs stage runs it; tests/gpu/gpu_report.py sets its rows beside the
// table's. Driver API only (linked with -lcuda), in device 0's primary context.
// Prints one row per call and size: call, bytes, median, p10 and p90 ns per call, samples.
// Each size and path stops after kSecondsPerPath (at least kMinSamples samples), so the
// whole program ends in about 20 seconds. Exit 0 ok, 1 a CUDA call failed (the call and its
// error printed), 2 usage. Needs a GPU; never run by CI. It changes no GPU setting.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpu_checks.cuh"

namespace {

using Clock = std::chrono::steady_clock;

// Prints the call, its code and the driver's name for it, and exits 1.
#define DRV_CHECK(call)                                                              \
  do {                                                                               \
    const CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) {                                                        \
      const char* name_ = nullptr;                                                   \
      if (cuGetErrorName(r_, &name_) != CUDA_SUCCESS || name_ == nullptr) name_ = "?"; \
      std::fprintf(stderr, "driver_costs: %s failed: %d %s (%s:%d)\n", #call,        \
                   static_cast<int>(r_), name_, __FILE__, __LINE__);                 \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSizes[] = {2 * kMiB, 8 * kMiB, 32 * kMiB, 128 * kMiB, 512 * kMiB, 1024 * kMiB};
constexpr int kDefaultSamples = 201;  // odd: the median is one sample
constexpr int kMinSamples = 11;       // a size stops at its time cap only after these
constexpr int kWarmup = 3;            // rounds per size and path before the timed ones
// 6 sizes x 2 paths x this: the program's ~20 s at most (the small sizes take far less).
constexpr double kSecondsPerPath = 1.5;

double ns_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::nano>(t1 - t0).count();
}

struct Samples {
  const char* call;
  std::vector<double> ns;
};

void print(const Samples& s, size_t bytes) {
  std::printf("  %-20s %12zu %12.0f %12.0f %12.0f %8zu\n", s.call, bytes, percentile(s.ns, 0.5),
              percentile(s.ns, 0.1), percentile(s.ns, 0.9), s.ns.size());
}

// cuMemAlloc then cuMemFree of n bytes, each call timed alone (timed: into a, f).
void alloc_free(size_t n, Samples* a, Samples* f) {
  CUdeviceptr p = 0;
  const auto t0 = Clock::now();
  DRV_CHECK(cuMemAlloc(&p, n));
  const auto t1 = Clock::now();
  DRV_CHECK(cuMemFree(p));
  const auto t2 = Clock::now();
  if (a != nullptr) a->ns.push_back(ns_since(t0, t1));
  if (f != nullptr) f->ns.push_back(ns_since(t1, t2));
}

enum Vmm { kCreate, kReserve, kMap, kSetAccess, kUnmap, kRelease, kAddressFree, kVmmCalls };

// One expandable segment's life of n bytes (a multiple of the granularity), each call timed
// alone (timed: into s[0..kVmmCalls), or not when s is null).
void vmm_round(size_t n, const CUmemAllocationProp& prop, const CUmemAccessDesc& access,
               Samples* s) {
  Clock::time_point t[kVmmCalls + 1];
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  t[0] = Clock::now();
  DRV_CHECK(cuMemCreate(&h, n, &prop, 0));
  t[1] = Clock::now();
  DRV_CHECK(cuMemAddressReserve(&va, n, 0, 0, 0));
  t[2] = Clock::now();
  DRV_CHECK(cuMemMap(va, n, 0, h, 0));
  t[3] = Clock::now();
  DRV_CHECK(cuMemSetAccess(va, n, &access, 1));
  t[4] = Clock::now();
  DRV_CHECK(cuMemUnmap(va, n));
  t[5] = Clock::now();
  DRV_CHECK(cuMemRelease(h));
  t[6] = Clock::now();
  DRV_CHECK(cuMemAddressFree(va, n));
  t[7] = Clock::now();
  if (s == nullptr) return;
  for (int i = 0; i < kVmmCalls; ++i) s[i].ns.push_back(ns_since(t[i], t[i + 1]));
}

}  // namespace

int main(int argc, char** argv) {
  int samples = kDefaultSamples;
  if (argc > 2 || (argc == 2 && (samples = std::atoi(argv[1])) < 1)) {
    std::fprintf(stderr, "usage: %s [samples per call and size, default %d]\n", argv[0],
                 kDefaultSamples);
    return 2;
  }
  DRV_CHECK(cuInit(0));
  CUdevice dev = 0;
  DRV_CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr;
  DRV_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));  // made outside every timed region
  DRV_CHECK(cuCtxSetCurrent(ctx));
  int vmm = 0;
  DRV_CHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                 dev));
  if (vmm == 0) {
    std::fprintf(stderr, "driver_costs: device 0 has no virtual memory management "
                         "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 0)\n");
    return 1;
  }
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t granularity = 0;
  DRV_CHECK(cuMemGetAllocationGranularity(&granularity, &prop,
                                          CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (granularity == 0) granularity = 1;
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

  std::printf("# driver calls that change device memory, ns per call, each call timed alone "
              "(granularity %zu B)\n", granularity);
  std::printf("# %-20s %12s %12s %12s %12s %8s\n", "call", "bytes", "median_ns", "p10_ns",
              "p90_ns", "samples");
  std::fflush(stdout);
  for (const size_t n : kSizes) {
    Samples a{"cuMemAlloc", {}}, f{"cuMemFree", {}};
    for (int i = 0; i < kWarmup; ++i) alloc_free(n, nullptr, nullptr);
    auto start = Clock::now();
    while (static_cast<int>(a.ns.size()) < samples) {
      alloc_free(n, &a, &f);
      if (std::chrono::duration<double>(Clock::now() - start).count() > kSecondsPerPath &&
          static_cast<int>(a.ns.size()) >= std::min(samples, kMinSamples))
        break;
    }
    print(a, n);
    print(f, n);
    std::fflush(stdout);

    const size_t m = (n + granularity - 1) / granularity * granularity;
    Samples s[kVmmCalls] = {{"cuMemCreate", {}},    {"cuMemAddressReserve", {}},
                            {"cuMemMap", {}},       {"cuMemSetAccess", {}},
                            {"cuMemUnmap", {}},     {"cuMemRelease", {}},
                            {"cuMemAddressFree", {}}};
    for (int i = 0; i < kWarmup; ++i) vmm_round(m, prop, access, nullptr);
    start = Clock::now();
    while (static_cast<int>(s[0].ns.size()) < samples) {
      vmm_round(m, prop, access, s);
      if (std::chrono::duration<double>(Clock::now() - start).count() > kSecondsPerPath &&
          static_cast<int>(s[0].ns.size()) >= std::min(samples, kMinSamples))
        break;
    }
    for (const Samples& x : s) print(x, m);
    std::fflush(stdout);
  }
  DRV_CHECK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
