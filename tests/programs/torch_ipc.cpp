// torch_ipc.cpp - prog_torch_ipc: CUDA tensors shared between processes the way
// torch.multiprocessing shares them, over the stand-in of PyTorch's caching allocator
// (libc10_cuda.so, c10_cuda_stand_in.cpp). The exporter allocates tensors of mixed sizes
// from that allocator (many share one of its segments), tags them, and sends for each
// (IPC handle of its segment's start, offset of the tensor from it, length); the peer - this
// program again, spawned as PyTorch spawns its workers - opens each handle once (PyTorch
// keeps opened handles by their bytes), checks the tensor at the opened pointer plus the
// offset and writes a reply there; the exporter checks every reply.
// Usage: prog_torch_ipc [N [ROUNDS]] (40 tensors, 2 rounds, each round's tensors freed
// before the next); prog_torch_ipc peer (stdin: "HANDLE_HEX OFFSET LENGTH ID" lines, "end"
// after each round). Exit: 0 ok, 1 wrong data, 2 usage, 77 no device.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "driver/cuda_abi.h"

extern "C" {
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n);
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n);
CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags);
CUresult cuIpcCloseMemHandle(CUdeviceptr dptr);
int c10_stand_in_alloc(CUdeviceptr* p, size_t n);
int c10_stand_in_free(CUdeviceptr p);
int c10_stand_in_segment(CUdeviceptr p, CUdeviceptr* base, size_t* size);
int c10_stand_in_empty_cache();
}
extern char** environ;

namespace {

constexpr int kExitWrong = 1, kExitUsage = 2, kExitSkip = 77;
constexpr uint64_t kReply = 100000;
const char* g_prog = "prog_torch_ipc";

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "%s: %s failed: %d\n", g_prog, what, static_cast<int>(r));
  std::exit(kExitWrong);
}

// A tensor's contents: every byte (id & 0xff), the first 8 the id itself.
void tag(CUdeviceptr p, size_t n, uint64_t id) {
  check(cuMemsetD8_v2(p, static_cast<unsigned char>(id & 0xff), n), "cuMemsetD8");
  check(cuMemcpyHtoD_v2(p, &id, n < 8 ? n : 8), "cuMemcpyHtoD");
}
bool tagged(CUdeviceptr p, size_t n, uint64_t id) {
  std::vector<unsigned char> b(n);
  check(cuMemcpyDtoH_v2(b.data(), p, n), "cuMemcpyDtoH");
  uint64_t head = 0;
  std::memcpy(&head, b.data(), n < 8 ? n : 8);
  if (n >= 8 && head != id) return false;
  for (size_t i = 8; i < n; ++i)
    if (b[i] != static_cast<unsigned char>(id & 0xff)) return false;
  return true;
}

std::string hex(const CUipcMemHandle& h) {
  std::string s;
  char two[3];
  for (unsigned char c : h.reserved) {
    std::snprintf(two, sizeof two, "%02x", c);
    s += two;
  }
  return s;
}

int peer() {
  std::map<std::string, CUdeviceptr> opened;  // by the handle's bytes, as PyTorch keeps them
  struct Tensor { CUdeviceptr p; size_t n; uint64_t id; };
  std::vector<Tensor> round;
  size_t wrong = 0;
  char line[512];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    if (std::strncmp(line, "end", 3) == 0) {
      for (const Tensor& t : round) {
        if (!tagged(t.p, t.n, t.id) && wrong++ < 3)
          std::fprintf(stderr, "%s peer: tensor %" PRIu64 " (%zu bytes) holds other bytes\n", g_prog, t.id, t.n);
        tag(t.p, t.n, t.id + kReply);
      }
      round.clear();
      std::printf("done\n");
      std::fflush(stdout);
      continue;
    }
    char h[129];
    size_t offset = 0, n = 0;
    uint64_t id = 0;
    if (std::sscanf(line, "%128s %zu %zu %" SCNu64, h, &offset, &n, &id) != 4 || std::strlen(h) != 128) {
      std::fprintf(stderr, "%s peer: bad line\n", g_prog);
      return kExitUsage;
    }
    CUdeviceptr& base = opened[h];
    if (base == 0) {
      CUipcMemHandle handle{};
      for (int i = 0; i < 64; ++i) {
        unsigned v = 0;
        std::sscanf(h + 2 * i, "%2x", &v);
        handle.reserved[i] = static_cast<char>(v);
      }
      check(cuIpcOpenMemHandle_v2(&base, handle, 1), "cuIpcOpenMemHandle");
    }
    round.push_back({base + offset, n, id});
  }
  for (auto& [h, base] : opened) check(cuIpcCloseMemHandle(base), "cuIpcCloseMemHandle");
  if (wrong != 0) std::fprintf(stderr, "%s peer: %zu tensors wrong\n", g_prog, wrong);
  return wrong == 0 ? 0 : kExitWrong;
}

int exporter(size_t n, size_t rounds) {
  signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) return kExitWrong;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
  char name[] = "prog_torch_ipc", mode[] = "peer";
  char* argv[] = {name, mode, nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, environ) != 0) return kExitWrong;
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  FILE* from = fdopen(out[0], "r");
  static const size_t kSizes[] = {4096, 200, 70000, 512, 5000, 1 << 20, (3 << 20) + 100, 1000, 12 << 20};
  size_t wrong = 0;
  for (size_t r = 0; r < rounds; ++r) {
    struct Tensor { CUdeviceptr p; size_t n; uint64_t id; };
    std::vector<Tensor> tensors;
    std::string lines;
    for (size_t i = 0; i < n; ++i) {
      Tensor t{0, kSizes[(i + 3 * r) % (sizeof kSizes / sizeof kSizes[0])], r * 1000 + i + 1};
      check(static_cast<CUresult>(c10_stand_in_alloc(&t.p, t.n)), "allocation from the program's cache");
      tag(t.p, t.n, t.id);
      CUdeviceptr base = 0;
      size_t size = 0;
      check(static_cast<CUresult>(c10_stand_in_segment(t.p, &base, &size)), "the tensor's segment");
      CUipcMemHandle h{};
      check(cuIpcGetMemHandle(&h, base), "cuIpcGetMemHandle of the segment's start");
      lines += hex(h) + " " + std::to_string(t.p - base) + " " + std::to_string(t.n) + " " +
               std::to_string(t.id) + "\n";
      tensors.push_back(t);
    }
    lines += "end\n";
    if (write(in[1], lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) break;
    char reply[64];
    if (std::fgets(reply, sizeof reply, from) == nullptr) break;
    for (const Tensor& t : tensors) {
      if (!tagged(t.p, t.n, t.id + kReply) && wrong++ < 3)
        std::fprintf(stderr, "%s: tensor %" PRIu64 " (%zu bytes) lacks the peer's reply\n", g_prog, t.id, t.n);
      check(static_cast<CUresult>(c10_stand_in_free(t.p)), "free to the program's cache");
    }
  }
  close(in[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::fclose(from);
  const int peer_rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  check(static_cast<CUresult>(c10_stand_in_empty_cache()), "emptying the program's cache");
  if (peer_rc != 0 || wrong != 0) {
    std::fprintf(stderr, "%s: %zu of %zu tensors wrong, the peer exited %d\n", g_prog, wrong, n * rounds, peer_rc);
    return kExitWrong;
  }
  std::printf("torch-ipc: %zu rounds of %zu tensors shared as (segment handle, offset), data checked both ways\n",
              rounds, n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
    std::printf("%s: no CUDA device: skipped\n", g_prog);
    return kExitSkip;
  }
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  if (argc == 2 && std::strcmp(argv[1], "peer") == 0) return peer();
  size_t n = 40, rounds = 2;
  if (argc > 3) return kExitUsage;
  if (argc >= 2) n = std::strtoul(argv[1], nullptr, 10);
  if (argc >= 3) rounds = std::strtoul(argv[2], nullptr, 10);
  if (n == 0 || n > 1000 || rounds == 0 || rounds > 100) return kExitUsage;
  return exporter(n, rounds);
}
