// fake_ipc.cpp - legacy CUDA IPC of the stand-in driver (a TEST DOUBLE): cuIpcGetMemHandle,
// cuIpcOpenMemHandle(_v2), cuIpcCloseMemHandle. Device memory lives in one memfd per device
// (fake_arena.cpp), so the 64-byte handle names the exporter's pid, that file's descriptor
// number, the allocation's offset, size and buffer id; the peer opens /proc/<pid>/fd/<fd>
// (the same user may) and maps those bytes MAP_SHARED, so both processes see one memory.
// README.md names the documentation each rule follows.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "fake_state.h"

#define LUMA_FAKE_API __attribute__((visibility("default")))
#include "fake_driver_api.h"

namespace luma::fake {
namespace {

inline constexpr uint32_t kHandleMagic = 0x4c464950;  // "LFIP"
inline constexpr size_t kPage = 4096;

// What a CUipcMemHandle carries (48 of its 64 bytes; the rest stays zero).
struct HandleData {
  uint32_t magic;
  int32_t pid;        // the exporting process
  int32_t fd;         // its device arena's memfd
  int32_t device;
  uint64_t offset;    // of the allocation in that arena
  uint64_t size;      // the allocation's size (the whole allocation, not from an interior pointer)
  uint64_t buffer_id; // the exporter's buffer id: a new allocation at the same address differs
  uint64_t reserved;
};
static_assert(sizeof(HandleData) <= sizeof(CUipcMemHandle));

// One mapping of an imported handle in this process; opened again by the same context, it
// is shared and counted (cuIpcOpenMemHandle: "the reference count on the handle is
// incremented by 1 and the existing device pointer is returned").
struct Import {
  int32_t pid;
  uint64_t buffer_id;
  Context* ctx;
  int refs;
};

std::mutex g_imports_m;  // guards imports; taken before State::mem_m
std::map<uintptr_t, Import>& imports() {
  static auto* m = new std::map<uintptr_t, Import>();  // never destroyed (fake_state.h)
  return *m;
}

// The arena file behind the exporter's descriptor, or -1: refuses anything that is not a
// stand-in device arena of that device (a stale handle whose pid or fd was reused).
int open_peer_arena(const HandleData& h) {
  std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  char target[256] = {};
  ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
  std::string want = "/memfd:luma-fake-device" + std::to_string(h.device);
  if (n <= 0 || std::strncmp(target, want.c_str(), want.size()) != 0) return -1;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat sb{};
  if (fstat(fd, &sb) != 0 || static_cast<uint64_t>(sb.st_size) < h.offset + h.size) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace
}  // namespace luma::fake

using namespace luma::fake;

extern "C" {

// The handle stands for the whole allocation holding dptr: an interior pointer gives the
// handle of its allocation. Only cuMemAlloc / cuMemAllocPitch memory can be exported.
CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (CUresult r = ready()) return r;
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  State& st = state();
  std::lock_guard lock(st.mem_m);
  auto it = containing(st, dptr, 1);
  if (it == st.allocations.end() || it->second.kind != MemKind::kDevice) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  HandleData h{};
  h.magic = kHandleMagic;
  h.pid = static_cast<int32_t>(getpid());
  h.device = it->second.device;
  if (!arena_locate(st, it->second.device, it->first, &h.fd, &h.offset)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  h.size = it->second.size;
  h.buffer_id = it->second.buffer_id;
  std::memset(pHandle, 0, sizeof *pHandle);
  std::memcpy(pHandle, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  if (CUresult r = ready()) return r;
  if (pdptr == nullptr || (Flags & ~unsigned{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS}) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Context* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  HandleData h;
  std::memcpy(&h, &handle, sizeof h);
  if (h.magic != kHandleMagic || h.size == 0 || h.offset % kAlignment != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The exporting process cannot open its own handle (the real driver answers "invalid
  // device context").
  if (h.pid == static_cast<int32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard imports_lock(g_imports_m);
  for (auto& [addr, imp] : imports()) {
    if (imp.pid == h.pid && imp.buffer_id == h.buffer_id && imp.ctx == ctx) {
      ++imp.refs;
      *pdptr = addr;
      return CUDA_SUCCESS;
    }
  }
  int fd = open_peer_arena(h);
  if (fd < 0) return CUDA_ERROR_MAP_FAILED;
  uint64_t map_offset = h.offset / kPage * kPage;
  size_t delta = h.offset - map_offset;
  size_t length = (delta + rounded_size(h.size) + kPage - 1) / kPage * kPage;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 static_cast<off_t>(map_offset));
  close(fd);
  if (p == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  uintptr_t addr = reinterpret_cast<uintptr_t>(p) + delta;
  Allocation a;
  a.size = h.size;
  a.device = ctx->device;
  a.ctx = ctx;
  a.kind = MemKind::kImported;
  {
    State& st = state();
    std::lock_guard lock(st.mem_m);
    register_allocation(st, addr, a);
  }
  imports()[addr] = Import{h.pid, h.buffer_id, ctx, 1};
  *pdptr = addr;
  return CUDA_SUCCESS;
}

// The pre-11.0 export of the same call (cuGetProcAddress gives it below 11000).
CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  if (CUresult r = ready()) return r;
  if (current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard imports_lock(g_imports_m);
  auto it = imports().find(dptr);
  if (it == imports().end()) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.refs > 0) return CUDA_SUCCESS;
  imports().erase(it);
  Allocation a;
  if (unregister(dptr, &a)) release_memory(dptr, a);  // unmaps; the exporter keeps its memory
  return CUDA_SUCCESS;
}

}  // extern "C"
