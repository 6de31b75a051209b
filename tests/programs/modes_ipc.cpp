// modes_ipc.cpp - the workload's modes about sharing memory with another process: the
// address range of an allocation (cuMemGetAddressRange), and IPC handles as UCX, Open MPI
// and NCCL share buffers (ipc-ranges) and as CUDA's simpleIPC sample does (ipc-simple),
// each with its peer process (this program again, in the peer mode).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "api.h"
#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

std::string to_hex(const unsigned char* bytes, size_t n) {
  std::string s;
  char two[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(two, sizeof two, "%02x", bytes[i]);
    s += two;
  }
  return s;
}

bool from_hex(const std::string& hex, unsigned char* bytes, size_t n) {
  if (hex.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    bytes[i] = static_cast<unsigned char>(v);
  }
  return true;
}

// This program again, in peer MODE, as UCX or NCCL run their second rank: a new process,
// since a child forked after cuInit cannot use CUDA. It inherits the environment
// (LD_PRELOAD included); its stdin and stdout are pipes to this process, its stderr is ours.
class Peer {
 public:
  explicit Peer(const char* mode) {
    std::signal(SIGPIPE, SIG_IGN);  // a peer that dies early must not kill the exporter
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) fail("pipe", errno);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
    std::string name = g_prog;
    char* argv[] = {name.data(), const_cast<char*>(mode), nullptr};
    int rc = posix_spawn(&pid_, "/proc/self/exe", &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    if (rc != 0) fail("posix_spawn of the peer", rc);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() { (void)finish(); }

  void send(const std::string& text) {
    size_t done = 0;
    while (to_ >= 0 && done < text.size()) {
      ssize_t w = write(to_, text.data() + done, text.size() - done);
      if (w <= 0) break;  // the peer is gone; its exit code says why
      done += static_cast<size_t>(w);
    }
  }
  // One line from the peer's stdout ("" when it closed it).
  std::string read_line() {
    char line[256];
    if (from_ == nullptr || std::fgets(line, sizeof line, from_) == nullptr) return {};
    return line;
  }
  // Closes its stdin and waits: its exit code (-1: killed by a signal).
  int finish() {
    if (pid_ <= 0) return exit_code_;
    if (to_ >= 0) close(to_);
    to_ = -1;
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (from_ != nullptr) std::fclose(from_);
    from_ = nullptr;
    pid_ = 0;
    return exit_code_;
  }

 private:
  pid_t pid_ = 0;
  int to_ = -1;
  FILE* from_ = nullptr;
  int exit_code_ = -1;
};

// The reply a peer writes into block `id`: another tag and header.
constexpr uint64_t kReplyId = 100000;

}  // namespace

// cuMemGetAddressRange of any byte of an allocation names a driver allocation that holds
// all of it: the range a program pairs with an IPC handle (docs/cuda-facts.md). Under luma
// that is the segment the block was carved from, as the driver describes it (the handle of
// its base maps the whole segment, so base + offset lands in the block).
int mode_address_range(int argc, char**) {
  if (argc != 0) return kExitUsage;
  if (A.address_range == nullptr) {
    std::printf("address-range: the %s API has no cuMemGetAddressRange: skipped\n", A.name);
    return kExitSkip;
  }
  constexpr size_t kSize = 5000;
  void* p[3] = {};
  for (void*& x : p) ok(A.alloc(&x, kSize), "alloc");
  for (void* x : p) {
    void* first_base = nullptr;
    size_t first_size = 0;
    for (size_t off : {size_t{0}, size_t{1}, size_t{100}, kSize - 1}) {
      void* base = nullptr;
      size_t size = 0;
      ok(A.address_range(static_cast<char*>(x) + off, &base, &size), "address range");
      const auto b = reinterpret_cast<uintptr_t>(base), o = reinterpret_cast<uintptr_t>(x);
      if (o < b || o + kSize > b + size) fail("address range does not hold the allocation", 0);
      if (off == 0) {
        first_base = base;
        first_size = size;
      } else if (base != first_base || size != first_size) {
        fail("two bytes of one allocation name different ranges", 0);
      }
    }
  }
  for (void* x : p) ok(A.free(x), "free");
  std::printf("address-range: every byte of 3 allocations names one range holding it\n");
  return 0;
}

// UCX / Open MPI / NCCL: each buffer is shared as (handle of the range base, offset,
// length), the range from cuMemGetAddressRange, the handle of its base; the peer keeps
// what it opened in a cache keyed by (range base, BUFFER_ID), as UCX does, adds the
// offset, checks the exporter's bytes and writes its reply; the exporter checks the
// replies. ROUNDS (2) rounds of N (40) buffers of mixed sizes (small ones share a segment
// under luma, MiB ones do not); each round's buffers are freed before the next is
// allocated, so later rounds reuse addresses and the peer's cache. BUFFER_ID is equal
// exactly for equal ranges.
int mode_ipc_ranges(int argc, char** argv) {
  if (argc > 2) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-ranges");
  if (D == nullptr) return kExitSkip;
  const size_t n = argc >= 1 ? parse(argv[0], "N") : 40;
  const size_t rounds = argc >= 2 ? parse(argv[1], "ROUNDS") : 2;
  if (n == 0 || n > 1000 || rounds == 0 || rounds > 100) return kExitUsage;
  static const size_t kSizes[] = {200, 4096, 5000, 512, 70000, kMiB, 3 * kMiB + 100, 1000};
  Peer peer("ipc-ranges-peer");
  size_t wrong = 0, id_mismatches = 0;
  std::vector<unsigned char> buf;
  for (size_t round = 0; round < rounds; ++round) {
    std::vector<Tagged> blocks(n);
    std::vector<std::pair<uintptr_t, size_t>> ranges(n);
    std::vector<unsigned long long> ids(n);
    std::string input;
    for (size_t i = 0; i < n; ++i) {
      Tagged& b = blocks[i];
      b.n = kSizes[(i + round * 3) % (sizeof kSizes / sizeof kSizes[0])];
      b.id = round * 1000 + i + 1;
      ok(A.alloc(&b.p, b.n), "alloc");
      if (!write_tag(b)) fail("write tag", 0);
      void* base = nullptr;
      size_t size = 0;
      ok(A.address_range(b.p, &base, &size), "cuMemGetAddressRange");
      const auto o = reinterpret_cast<uintptr_t>(b.p), bs = reinterpret_cast<uintptr_t>(base);
      if (o < bs || o + b.n > bs + size) fail("the range does not hold the buffer", 0);
      unsigned long long id_base = 0;
      ok(D->buffer_id(b.p, &ids[i]), "BUFFER_ID of the buffer");
      ok(D->buffer_id(base, &id_base), "BUFFER_ID of the range base");
      if (ids[i] != id_base) ++id_mismatches;
      ranges[i] = {bs, size};
      unsigned char h[kIpcHandleSize];
      ok(D->ipc_get(h, base), "cuIpcGetMemHandle of the range base");
      input += to_hex(h, sizeof h) + " " + std::to_string(bs) + " " + std::to_string(ids[i]) + " " +
               std::to_string(o - bs) + " " + std::to_string(b.n) + " " + std::to_string(b.id) + "\n";
    }
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < i; ++j)
        id_mismatches += (ranges[i] == ranges[j]) != (ids[i] == ids[j]);
    peer.send(input + "end\n");
    if (peer.read_line().empty()) break;  // the peer is gone: its exit code tells
    for (const Tagged& b : blocks) {
      std::string why = check_tag(Tagged{b.p, b.n, b.id + kReplyId}, buf);
      if (!why.empty() && wrong++ < 3)
        std::fprintf(stderr, "%s: ipc-ranges: buffer %" PRIu64 " (%zu bytes) lacks the peer's reply: %s\n",
                     g_prog, b.id, b.n, why.c_str());
    }
    for (const Tagged& b : blocks) ok(A.free(b.p), "free");
  }
  const int peer_rc = peer.finish();
  if (peer_rc != 0) std::fprintf(stderr, "%s: ipc-ranges: the peer exited %d\n", g_prog, peer_rc);
  if (wrong != 0)
    std::fprintf(stderr, "%s: ipc-ranges: %zu of %zu buffers lack the peer's reply\n", g_prog, wrong,
                 n * rounds);
  if (id_mismatches != 0)
    std::fprintf(stderr, "%s: ipc-ranges: BUFFER_ID is not equal exactly for equal ranges (%zu pairs)\n",
                 g_prog, id_mismatches);
  if (peer_rc != 0 || wrong != 0 || id_mismatches != 0) return kExitWrong;
  std::printf("ipc-ranges: %zu rounds of %zu buffers shared as (handle, offset, length), data "
              "checked both ways\n", rounds, n);
  return 0;
}

// The peer of ipc-ranges: stdin has "HANDLE_HEX BASE BUFFER_ID OFFSET LENGTH ID" lines, and
// "end" after each round; it answers each round with one line on stdout. What it opened
// stays open, keyed by (BASE, BUFFER_ID), until stdin ends.
int mode_ipc_ranges_peer(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-ranges-peer");
  if (D == nullptr) return kExitSkip;
  std::map<std::pair<uint64_t, uint64_t>, void*> cache;
  std::vector<Tagged> round;
  std::vector<unsigned char> buf;
  size_t wrong = 0, total = 0, opened = 0;
  char line[512];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    if (std::strncmp(line, "end", 3) == 0) {
      for (const Tagged& b : round) {
        std::string why = check_tag(b, buf);
        if (!why.empty() && wrong++ < 3)
          std::fprintf(stderr, "%s: ipc-ranges-peer: buffer %" PRIu64 " (%zu bytes): %s\n", g_prog,
                       b.id, b.n, why.c_str());
        Tagged reply{b.p, b.n, b.id + kReplyId};
        if (!write_tag(reply)) fail("ipc-ranges-peer: write the reply", 0);
      }
      total += round.size();
      round.clear();
      std::printf("round done\n");
      std::fflush(stdout);
      continue;
    }
    char hex[2 * kIpcHandleSize + 1];
    uint64_t base = 0, buffer_id = 0, id = 0;
    size_t offset = 0, length = 0;
    unsigned char h[kIpcHandleSize];
    if (std::sscanf(line, "%128s %" SCNu64 " %" SCNu64 " %zu %zu %" SCNu64, hex, &base, &buffer_id,
                    &offset, &length, &id) != 6 ||
        !from_hex(hex, h, sizeof h))
      fail("ipc-ranges-peer: bad input line", 0);
    void*& mapped = cache[{base, buffer_id}];
    if (mapped == nullptr) {
      ok(D->ipc_open(&mapped, h), "cuIpcOpenMemHandle");
      ++opened;
    }
    round.push_back(Tagged{static_cast<char*>(mapped) + offset, length, id});
  }
  for (const auto& [key, p] : cache) ok(D->ipc_close(p), "cuIpcCloseMemHandle");
  std::fprintf(stderr, "%s: ipc-ranges-peer: %zu buffers through %zu mappings\n", g_prog, total, opened);
  if (wrong != 0) {
    std::fprintf(stderr, "%s: ipc-ranges-peer: %zu of %zu buffers wrong\n", g_prog, wrong, total);
    return kExitWrong;
  }
  return 0;
}

// CUDA's simpleIPC sample: the exporter hands out the handle of the pointer it allocated,
// the peer uses the opened pointer itself as the buffer. Two blocks of SIZE, the second
// exported (under luma it may start inside a segment the first begins).
int mode_ipc_simple(int argc, char** argv) {
  if (argc != 1) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-simple");
  if (D == nullptr) return kExitSkip;
  const size_t n = parse(argv[0], "SIZE");
  if (n < sizeof(uint64_t)) return kExitUsage;
  Tagged first{nullptr, n, 1}, shared{nullptr, n, 2};
  ok(A.alloc(&first.p, n), "alloc");
  ok(A.alloc(&shared.p, n), "alloc");
  if (!write_tag(first) || !write_tag(shared)) fail("write tag", 0);
  unsigned char h[kIpcHandleSize];
  ok(D->ipc_get(h, shared.p), "cuIpcGetMemHandle of the allocated pointer");
  Peer simple_peer("ipc-simple-peer");
  simple_peer.send(to_hex(h, sizeof h) + " " + std::to_string(n) + " " + std::to_string(shared.id) + "\n");
  const int peer = simple_peer.finish();
  std::vector<unsigned char> buf;
  std::string reply = check_tag(Tagged{shared.p, n, shared.id + kReplyId}, buf);
  std::string kept = check_tag(first, buf);
  ok(A.free(first.p), "free");
  ok(A.free(shared.p), "free");
  if (peer != 0) {
    std::fprintf(stderr, "%s: ipc-simple: the peer exited %d\n", g_prog, peer);
    return kExitWrong;
  }
  if (!reply.empty()) fail(("ipc-simple: the peer's reply: " + reply).c_str(), 0);
  if (!kept.empty()) fail(("ipc-simple: the other block: " + kept).c_str(), 0);
  std::printf("ipc-simple: a %zu-byte block shared by its own pointer, data checked both ways\n", n);
  return 0;
}

// The peer of ipc-simple: stdin has "HANDLE_HEX LENGTH ID".
int mode_ipc_simple_peer(int argc, char**) {
  if (argc != 0) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-simple-peer");
  if (D == nullptr) return kExitSkip;
  char hex[2 * kIpcHandleSize + 1];
  size_t length = 0;
  uint64_t id = 0;
  unsigned char h[kIpcHandleSize];
  if (std::scanf("%128s %zu %" SCNu64, hex, &length, &id) != 3 || !from_hex(hex, h, sizeof h))
    fail("ipc-simple-peer: bad input", 0);
  void* p = nullptr;
  ok(D->ipc_open(&p, h), "cuIpcOpenMemHandle");
  std::vector<unsigned char> buf;
  std::string why = check_tag(Tagged{p, length, id}, buf);
  if (!why.empty()) {
    std::fprintf(stderr, "%s: ipc-simple-peer: the opened pointer does not hold the exported block: %s\n",
                 g_prog, why.c_str());
    ok(D->ipc_close(p), "cuIpcCloseMemHandle");
    return kExitWrong;
  }
  Tagged reply{p, length, id + kReplyId};
  if (!write_tag(reply)) fail("ipc-simple-peer: write the reply", 0);
  ok(D->ipc_close(p), "cuIpcCloseMemHandle");
  return 0;
}

}  // namespace luma::programs
