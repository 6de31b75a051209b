// fake_arena.cpp - device memory of the stand-in driver (a TEST DOUBLE): every device
// allocation is carved from one shared-memory file per device (memfd_create, sized
// kArenaBytes, sparse, mapped MAP_SHARED|MAP_NORESERVE once at a fixed address hint), so a
// second process can map the very same bytes for cuIpcOpenMemHandle_v2 (through
// /proc/<pid>/fd/<fd>) while a loop of 10^5 allocations still costs one file descriptor per
// device. Best fit over the free ranges, coalescing neighbours on free; a freed block of at
// least kReleaseThreshold bytes gives its whole pages back to the kernel
// (FALLOC_FL_PUNCH_HOLE), so untouched or released capacity costs no memory. Everything here
// runs under State::mem_m.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "fake_state.h"

namespace luma::fake {
namespace {

// Address space reserved per device: room for the configured capacity twice over (so
// fragmentation never refuses what the capacity allows) and at least 16 GiB (so
// luma_fake_set_capacity can raise the capacity at run time). Reserved, not used: the file
// is sparse and the mapping MAP_NORESERVE.
inline constexpr size_t kMinArenaBytes = size_t{16} << 30;
inline constexpr size_t kReleaseThreshold = size_t{1} << 20;
inline constexpr size_t kPage = 4096;
// Where each device's arena is asked to go (a hint, never MAP_FIXED: when the range is taken
// the kernel places it elsewhere). Without it the arena lands wherever the process's other
// mappings leave room, and those depend on timing: a thread that starts while the first
// allocation is made (the sanitizers' per-thread state, the C library's per-thread heaps)
// maps memory before or after the arena depending on the scheduler, so the same program
// with address-space randomization off would get different device addresses from one run
// to the next. 0x7e80'0000'0000 and up is application memory under every sanitizer this
// project runs (ThreadSanitizer's x86-64 layout starts its high application range there);
// devices are 128 GiB apart, a reservation never overlaps the next one at the default size.
inline constexpr uintptr_t kArenaHint = uintptr_t{0x7e80} << 32;
inline constexpr uintptr_t kArenaHintStride = uintptr_t{128} << 30;

void add_free(Arena& a, size_t off, size_t len) {
  a.free_by_offset[off] = len;
  a.free_by_length.emplace(len, off);
}

void remove_free(Arena& a, std::map<size_t, size_t>::iterator it) {
  auto [first, last] = a.free_by_length.equal_range(it->second);
  for (auto j = first; j != last; ++j) {
    if (j->second == it->first) {
      a.free_by_length.erase(j);
      break;
    }
  }
  a.free_by_offset.erase(it);
}

bool open_arena(State& st, int device, Arena& a) {
  size_t size = std::max<size_t>(kMinArenaBytes, 2 * st.env_capacity);
  size = (size + kPage - 1) / kPage * kPage;
  std::string name = "luma-fake-device" + std::to_string(device);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) {
    std::perror("libcuda.so.1 (stand-in): memfd_create");
    return false;
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    std::perror("libcuda.so.1 (stand-in): ftruncate of the device arena");
    close(fd);
    return false;
  }
  void* hint = reinterpret_cast<void*>(kArenaHint + static_cast<uintptr_t>(device) * kArenaHintStride);
  void* p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    std::perror("libcuda.so.1 (stand-in): mmap of the device arena");
    close(fd);
    return false;
  }
  a.fd = fd;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.size = size;
  add_free(a, 0, size);
  return true;
}

}  // namespace

uintptr_t arena_alloc(State& st, int device, size_t rounded) {
  Arena& a = st.arenas[device];
  if (a.fd < 0 && !open_arena(st, device, a)) return 0;
  auto best = a.free_by_length.lower_bound(rounded);
  if (best == a.free_by_length.end()) return 0;
  size_t off = best->second;
  size_t len = best->first;
  a.free_by_length.erase(best);
  a.free_by_offset.erase(off);
  if (len > rounded) add_free(a, off + rounded, len - rounded);
  return a.base + off;
}

void arena_free(State& st, int device, uintptr_t p, size_t rounded) {
  Arena& a = st.arenas[device];
  size_t off = p - a.base;
  if (rounded >= kReleaseThreshold) {
    size_t lo = (off + kPage - 1) / kPage * kPage;
    size_t hi = (off + rounded) / kPage * kPage;
    if (hi > lo) {
      (void)fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      static_cast<off_t>(lo), static_cast<off_t>(hi - lo));
    }
  }
  size_t len = rounded;
  auto next = a.free_by_offset.lower_bound(off);
  if (next != a.free_by_offset.end() && next->first == off + len) {
    len += next->second;
    remove_free(a, next);
  }
  auto it = a.free_by_offset.lower_bound(off);
  if (it != a.free_by_offset.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      remove_free(a, prev);
    }
  }
  add_free(a, off, len);
}

bool arena_locate(State& st, int device, uintptr_t p, int* fd, uint64_t* offset) {
  const Arena& a = st.arenas[device];
  if (a.fd < 0 || p < a.base || p >= a.base + a.size) return false;
  *fd = a.fd;
  *offset = p - a.base;
  return true;
}

}  // namespace luma::fake
