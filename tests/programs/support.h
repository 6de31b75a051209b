// support.h - what the workload's modes share: the exit codes, the API the program
// reaches CUDA through, the checks that end the program on a wrong result, blocks tagged
// with their owner, and the stand-in driver's delay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "api.h"

namespace luma::programs {

constexpr int kExitWrong = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCorrupted = 3;
// replay-rmm: the replay stopped at an allocation refused for lack of memory (a result,
// not an error: the JSON line says how far it got).
constexpr int kExitOutOfMemory = 4;
constexpr int kExitSkip = 77;
constexpr size_t kMiB = size_t{1} << 20;
// Long enough that the stand-in's slow memset is still queued when the program has freed,
// reallocated and rewritten the block (microseconds); short enough for a fast test.
constexpr uint64_t kHazardDelayUs = 100000;

// The API this program reaches CUDA through (api.h: one per executable).
extern const Api& A;
// The program's name in messages (main sets it from argv[0]).
extern const char* g_prog;

[[noreturn]] void fail(const char* what, int code);
void expect(int got, int want, const char* what);
void ok(int r, const char* what);
size_t parse(const char* s, const char* what);

// Fills a block with a tag (memset) and a header (memcpy HtoD) that name its owner, and
// checks both with a DtoH copy before it is freed.
struct Tagged {
  void* p = nullptr;
  size_t n = 0;
  uint64_t id = 0;
};

bool write_tag(Tagged& b);

// Returns an empty string when the block holds its tag, else what was wrong.
std::string check_tag(const Tagged& b, std::vector<unsigned char>& buf);

// The stand-in driver's delay makes the stream's memset slow; on a real GPU the symbol is
// absent and nothing changes (tests/gpu has the kernel version of this hazard).
void slow_down_stand_in_streams();

// The stand-in's delay before each asynchronous operation; false on a real driver.
bool set_stand_in_delay(uint64_t us);

// How long the stand-in holds a thread inside cuMemAlloc_v2 once it has served it; false on
// a real driver.
bool set_stand_in_alloc_hold(uint64_t us);

// How long the stand-in holds a thread inside a context's destruction; false on a real
// driver.
bool set_stand_in_ctx_destroy_hold(uint64_t us);
// luma_fake_set_host_alloc_us: each page-locked host allocation takes that long inside the
// driver call. False without the stand-in.
bool set_stand_in_host_alloc_us(uint64_t us);

// The stand-in's count of refused calls that named a context being destroyed or destroyed
// (or an event of one); -1 on a real driver.
long long stand_in_destroyed_context_uses();

// The driver-API calls of api.h a mode needs, or nullptr after printing why it skips.
const DriverCalls* driver_calls(const char* mode);

}  // namespace luma::programs
