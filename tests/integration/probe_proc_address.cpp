// probe_proc_address.cpp - reaches the driver as the CUDA runtime does (dlopen, one dlsym
// of cuGetProcAddress_v2, then cuGetProcAddress_v2) and prints, for a set of requests,
// which library the handed-out function lives in: "NAME VERSION FLAGS -> libluma.so" or
// "-> libcuda.so.1". The integration test reads this to check luma's version handling.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "driver/cuda_abi.h"

namespace {

const char* where(void* fn) {
  Dl_info info{};
  if (fn == nullptr) return "null";
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  const char* base = std::strrchr(info.dli_fname, '/');
  return base != nullptr ? base + 1 : info.dli_fname;
}

}  // namespace

int main() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) return 2;
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v2>(dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) return 2;
  std::printf("dlsym cuGetProcAddress_v2 -> %s\n", where(reinterpret_cast<void*>(gpa)));
  std::printf("dlsym cuMemAlloc_v2 -> %s\n", where(dlsym(lib, "cuMemAlloc_v2")));
  std::printf("dlsym cuInit -> %s\n", where(dlsym(lib, "cuInit")));
  struct Request {
    const char* name;
    int version;
    cuuint64_t flags;
  };
  const Request requests[] = {
      {"cuGetProcAddress", 12000, 0},      {"cuGetProcAddress", 11030, 0},
      {"cuMemAlloc", 2000, 0},             {"cuMemAlloc", 3020, 0},
      {"cuMemAlloc", 3020, 2},             {"cuMemFree", 2000, 0},
      {"cuMemFree", 3020, 0},              {"cuMemFree", 3020, 2},
      {"cuMemGetInfo", 3020, 0},           {"cuMemAllocAsync", 11020, 0},
      {"cuMemAllocAsync", 11020, 2},       {"cuMemFreeAsync", 11020, 2},
      {"cuMemFreeAsync", 11020, 0},        {"cuMemFreeAsync", 11010, 0},
      {"cuStreamCreate", 2000, 0},         {"cuStreamDestroy", 4000, 0},
      {"cuCtxSynchronize", 2000, 0},       {"cuInit", 2000, 0},
      {"cuMemAllocAsync", 11010, 0},       {"cuMemAllocHost", 3020, 0},
      {"cuMemHostAlloc", 2020, 0},         {"cuMemFreeHost", 2000, 0},
      {"cuMemAllocManaged", 6000, 0},
  };
  for (const Request& r : requests) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = gpa(r.name, &fn, r.version, r.flags, &status);
    std::printf("%s %d %llu -> %s (rc %d status %d)\n", r.name, r.version,
                static_cast<unsigned long long>(r.flags), where(fn), rc, status);
  }
  return 0;
}
