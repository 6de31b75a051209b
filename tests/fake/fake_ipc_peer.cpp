// fake_ipc_peer.cpp - the second process of the stand-in driver's IPC test (a TEST DOUBLE's
// test helper, started by fake_driver_test with posix_spawn: a child forked after cuInit
// cannot use CUDA). Usage: fake_ipc_peer HANDLE_HEX SIZE EXPECT WRITE
// Opens the handle, checks its SIZE bytes all equal EXPECT, writes WRITE into all of them,
// checks the driver's reference counting (a second open gives the same pointer; each close
// undoes one open; one close too many is an error) and exits 0; on a failure it names the
// step on stderr and exits 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fake_driver_api.h"

namespace {

int fail(const char* step, CUresult r) {
  std::fprintf(stderr, "fake_ipc_peer: %s: CUresult %d\n", step, r);
  return 1;
}

bool parse_handle(const char* hex, CUipcMemHandle* out) {
  if (std::strlen(hex) != 2 * sizeof *out) return false;
  for (size_t i = 0; i < sizeof *out; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
    out->reserved[i] = static_cast<char>(v);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CUipcMemHandle h{};
  if (argc != 5 || !parse_handle(argv[1], &h)) {
    std::fprintf(stderr, "usage: fake_ipc_peer HANDLE_HEX SIZE EXPECT WRITE\n");
    return 2;
  }
  size_t size = std::strtoull(argv[2], nullptr, 10);
  auto expect = static_cast<unsigned char>(std::atoi(argv[3]));
  auto write = static_cast<unsigned char>(std::atoi(argv[4]));
  CUcontext ctx = nullptr;
  if (CUresult r = cuInit(0)) return fail("cuInit", r);
  if (CUresult r = cuDevicePrimaryCtxRetain(&ctx, 0)) return fail("retain", r);
  if (CUresult r = cuCtxSetCurrent(ctx)) return fail("set current", r);

  CUdeviceptr p = 0, again = 0;
  if (CUresult r = cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) {
    return fail("open", r);
  }
  CUdeviceptr base = 0;
  size_t range = 0;
  if (CUresult r = cuMemGetAddressRange_v2(&base, &range, p + size / 2)) {
    return fail("address range of the mapping", r);
  }
  if (base != p || range != size) return fail("mapping's range is not the allocation's", 0);

  std::vector<unsigned char> bytes(size);
  if (CUresult r = cuMemcpyDtoH_v2(bytes.data(), p, size)) return fail("read", r);
  for (size_t i = 0; i < size; ++i) {
    if (bytes[i] != expect) return fail("the exporter's bytes are not visible", 0);
  }
  if (CUresult r = cuMemsetD8_v2(p, write, size)) return fail("write", r);

  if (CUresult r = cuIpcOpenMemHandle_v2(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) {
    return fail("second open", r);
  }
  if (again != p) return fail("second open gave another pointer", 0);
  if (CUresult r = cuIpcCloseMemHandle(p)) return fail("first close", r);
  unsigned char one = 0;
  if (CUresult r = cuMemcpyDtoH_v2(&one, p, 1)) return fail("mapped after one close", r);
  if (CUresult r = cuIpcCloseMemHandle(p)) return fail("second close", r);
  if (CUresult r = cuIpcCloseMemHandle(p); r != CUDA_ERROR_INVALID_VALUE) {
    return fail("third close (expected CUDA_ERROR_INVALID_VALUE)", r);
  }
  return 0;
}
