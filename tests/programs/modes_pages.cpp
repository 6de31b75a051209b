// modes_pages.cpp - blocks whose bytes span device pages (2 MiB on current GPUs), as a
// program under expandable segments gets them (pages mapped one by one into one address
// range), and the IPC answer a program gets for its block: what a CUDA program would
// check, whatever allocator serves it.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "modes.h"
#include "support.h"

namespace luma::programs {
namespace {

// Sizes around and across 2 MiB pages: less than a page, a page, a page and a bit, several.
constexpr size_t kSizes[] = {700 * 1024, 2 * kMiB, 3 * kMiB + 4096, kMiB, 5 * kMiB, 9 * kMiB + 512};

// The range a pointer query gives for byte `off` of block b holds the whole block, and the
// first and last byte name one range (and, through cuPointerGetAttributes, one buffer id):
// what UCX or NCCL register and share.
void check_ranges(const DriverCalls* D, const Tagged& b) {
  void* first_base = nullptr;
  size_t first_size = 0;
  unsigned long long first_id = 0;
  for (size_t off : {size_t{0}, b.n / 2, b.n - 1}) {
    const void* p = static_cast<const char*>(b.p) + off;
    void* base = nullptr;
    size_t size = 0;
    ok(A.address_range(p, &base, &size), "cuMemGetAddressRange");
    const auto lo = reinterpret_cast<uintptr_t>(base), at = reinterpret_cast<uintptr_t>(b.p);
    if (at < lo || at + b.n > lo + size) fail("pages: the address range does not hold the block", static_cast<int>(off));
    void* start = nullptr;
    size_t length = 0;
    ok(D->pointer_range(p, &start, &length), "cuPointerGetAttribute(RANGE_START_ADDR, RANGE_SIZE)");
    if (start != base || length != size) fail("pages: RANGE_START_ADDR / RANGE_SIZE differ from the address range", 0);
    unsigned long long id = 0;
    ok(D->pointer_range_and_id(p, &start, &length, &id), "cuPointerGetAttributes");
    if (start != base || length != size) fail("pages: cuPointerGetAttributes' range differs from the address range", 0);
    if (off == 0) {
      first_base = base;
      first_size = size;
      first_id = id;
    } else if (base != first_base || size != first_size || id != first_id) {
      fail("pages: two bytes of one block name different ranges or buffer ids", static_cast<int>(off));
    }
  }
}

// Every device but the block's may read and write it (expandable segments grant access to
// every peer, as cuMemAlloc memory is open to peers once peer access is enabled).
void check_peer_access(const DriverCalls* D, const Tagged& b, int devices) {
  for (int d = 0; d < devices; ++d) {
    unsigned long long flags = 0;
    for (size_t off : {size_t{0}, b.n - 1}) {
      ok(D->vmm_get_access(static_cast<const char*>(b.p) + off, d, &flags), "cuMemGetAccess");
      if (flags != 3) fail("pages: a device may not read and write the block", d);
    }
  }
}

}  // namespace

// Rounds of blocks of sizes across page boundaries, each filled with its own tag: all of
// them checked byte by byte after every block was written (two blocks sharing a byte
// would show), every other one freed and new ones of other sizes placed among the rest,
// checked again. With the driver API the pointer queries of each block are checked too;
// `peers` also checks that every device may read and write each block (a property of
// expandable segments only).
int mode_pages(int argc, char** argv) {
  if (argc > 2) return kExitUsage;
  const size_t rounds = argc >= 1 ? parse(argv[0], "ROUNDS") : 3;
  const bool peers = argc == 2 && std::strcmp(argv[1], "peers") == 0;
  if (argc == 2 && !peers) return kExitUsage;
  const DriverCalls* D = A.address_range != nullptr ? A.driver : nullptr;
  if (peers && D == nullptr) {
    std::printf("pages: the %s API has no cuMemGetAccess: skipped\n", A.name);
    return kExitSkip;
  }
  int devices = 1;
  ok(A.device_count(&devices), "device count");
  std::vector<Tagged> live;
  std::vector<unsigned char> buf;
  uint64_t next_id = 1;
  auto add = [&](size_t n) {
    Tagged b;
    b.n = n;
    b.id = next_id++;
    ok(A.alloc(&b.p, n), "alloc");
    if (!write_tag(b)) fail("pages: writing a block", static_cast<int>(b.id));
    live.push_back(b);
  };
  auto check_all = [&](const char* when) {
    for (const Tagged& b : live) {
      std::string wrong = check_tag(b, buf);
      if (!wrong.empty()) {
        std::fprintf(stderr, "%s: pages: block %llu of %zu bytes %s: %s\n", g_prog,
                     static_cast<unsigned long long>(b.id), b.n, when, wrong.c_str());
        std::exit(kExitWrong);
      }
      if (D != nullptr) check_ranges(D, b);
      if (peers) check_peer_access(D, b, devices);
    }
  };
  size_t checked = 0;
  for (size_t r = 0; r < rounds; ++r) {
    for (size_t n : kSizes) add(n);
    check_all("after the round's allocations");
    // Every other block goes; blocks of the sizes in reverse order take their places.
    std::vector<Tagged> kept;
    for (size_t i = 0; i < live.size(); ++i) {
      if (i % 2 == 0) {
        ok(A.free(live[i].p), "free");
      } else {
        kept.push_back(live[i]);
      }
    }
    live = kept;
    for (size_t i = std::size(kSizes); i-- > 0;) add(kSizes[i] + 512 * r);
    check_all("after frees and new allocations among the rest");
    checked += live.size();
  }
  for (const Tagged& b : live) ok(A.free(b.p), "free");
  std::printf("pages: %zu rounds, every block's bytes intact%s%s\n", rounds,
              D != nullptr ? ", its range the same from every byte" : "",
              peers ? ", every device may read and write it" : "");
  (void)checked;
  return 0;
}

// What cuIpcGetMemHandle answers for a block of SIZE bytes, printed, whatever it is: the
// test compares it with the driver's answer alone.
int mode_ipc_answer(int argc, char** argv) {
  if (argc != 1) return kExitUsage;
  const DriverCalls* D = driver_calls("ipc-answer");
  if (D == nullptr) return kExitSkip;
  const size_t n = parse(argv[0], "SIZE");
  void* p = nullptr;
  ok(A.alloc(&p, n), "alloc");
  unsigned char handle[kIpcHandleSize] = {};
  const int r = D->ipc_get(handle, p);
  ok(A.free(p), "free");
  std::printf("ipc-answer: cuIpcGetMemHandle of a block of %zu bytes: %d\n", n, r);
  return 0;
}

}  // namespace luma::programs
