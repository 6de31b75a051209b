// support.cpp - the helpers the workload's modes share (support.h).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api.h"
#include "support.h"

namespace luma::programs {

const Api& A = api();
const char* g_prog = "prog";

namespace {

unsigned char tag_of(uint64_t id) { return static_cast<unsigned char>((id * 131) % 251 + 1); }

}  // namespace

[[noreturn]] void fail(const char* what, int code) {
  std::fprintf(stderr, "%s: %s: FAILED (code %d)\n", g_prog, what, code);
  std::fflush(nullptr);
  std::_Exit(kExitWrong);
}

void expect(int got, int want, const char* what) {
  if (got != want) {
    std::fprintf(stderr, "%s: %s returned %d, expected %d\n", g_prog, what, got, want);
    std::fflush(nullptr);
    std::_Exit(kExitWrong);
  }
}

void ok(int r, const char* what) {
  if (r != 0) fail(what, r);
}

size_t parse(const char* s, const char* what) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0') {
    std::fprintf(stderr, "%s: %s must be a number, got '%s'\n", g_prog, what, s);
    std::exit(kExitUsage);
  }
  return static_cast<size_t>(v);
}

bool write_tag(Tagged& b) {
  if (A.memset(b.p, tag_of(b.id), b.n) != 0) return false;
  size_t hn = b.n < sizeof b.id ? b.n : sizeof b.id;
  return A.htod(b.p, &b.id, hn) == 0;
}

std::string check_tag(const Tagged& b, std::vector<unsigned char>& buf) {
  buf.resize(b.n);
  if (int r = A.dtoh(buf.data(), b.p, b.n)) return "dtoh returned " + std::to_string(r);
  size_t hn = b.n < sizeof b.id ? b.n : sizeof b.id;
  if (std::memcmp(buf.data(), &b.id, hn) != 0) return "header overwritten";
  unsigned char t = tag_of(b.id);
  for (size_t i = hn; i < b.n; ++i) {
    if (buf[i] != t) {
      return "byte " + std::to_string(i) + " is " + std::to_string(buf[i]) + ", expected " +
             std::to_string(t);
    }
  }
  return {};
}

void slow_down_stand_in_streams() {
  if (std::getenv("LUMA_FAKE_DELAY_US") != nullptr) return;  // the caller chose
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return;
  auto set_delay = reinterpret_cast<void (*)(uint64_t)>(dlsym(lib, "luma_fake_set_delay_us"));
  if (set_delay != nullptr) set_delay(kHazardDelayUs);
  dlclose(lib);
}

bool set_stand_in_delay(uint64_t us) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return false;
  auto set_delay = reinterpret_cast<void (*)(uint64_t)>(dlsym(lib, "luma_fake_set_delay_us"));
  if (set_delay != nullptr) set_delay(us);
  dlclose(lib);
  return set_delay != nullptr;
}

namespace {
// A function of the stand-in's control API, or nullptr on a real driver (the library stays
// loaded: the program links or loaded it already).
template <typename Fn>
Fn* stand_in_function(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  auto* fn = reinterpret_cast<Fn*>(dlsym(lib, name));
  dlclose(lib);
  return fn;
}
}  // namespace

bool set_stand_in_alloc_hold(uint64_t us) {
  auto* set_hold = stand_in_function<void(uint64_t)>("luma_fake_set_alloc_hold_us");
  if (set_hold != nullptr) set_hold(us);
  return set_hold != nullptr;
}

bool set_stand_in_host_alloc_us(uint64_t us) {
  auto* set_cost = stand_in_function<void(uint64_t)>("luma_fake_set_host_alloc_us");
  if (set_cost != nullptr) set_cost(us);
  return set_cost != nullptr;
}

bool set_stand_in_ctx_destroy_hold(uint64_t us) {
  auto* set_hold = stand_in_function<void(uint64_t)>("luma_fake_set_ctx_destroy_hold_us");
  if (set_hold != nullptr) set_hold(us);
  return set_hold != nullptr;
}

long long stand_in_destroyed_context_uses() {
  auto* uses = stand_in_function<uint64_t()>("luma_fake_destroyed_context_uses");
  return uses != nullptr ? static_cast<long long>(uses()) : -1;
}

const DriverCalls* driver_calls(const char* mode) {
  if (A.driver == nullptr)
    std::printf("%s: the %s API has no IPC or capture entry points: skipped\n", mode, A.name);
  return A.driver;
}

}  // namespace luma::programs
