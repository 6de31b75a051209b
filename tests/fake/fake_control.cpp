// fake_control.cpp - settings, control API and exit report of the stand-in driver (a TEST
// DOUBLE): reads LUMA_FAKE_* once, implements luma_fake_* (fake_control.h), and when
// LUMA_FAKE_COUNTERS=path is set writes the per-device counters as JSON at process exit.
// The report runs as an ELF destructor, i.e. from _dl_fini, after every atexit handler of
// the program and of the runtime; it takes no lock (counters are atomics) and uses plain
// write(2), because other threads may still be running or hold locks when exit() is called.
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_call_cost.h"
#include "fake_state.h"

#define LUMA_FAKE_API __attribute__((visibility("default")))
#include "fake_control.h"

namespace luma::fake {
namespace {

// Parses "123", "64K", "512M", "4G" (powers of 1024); false for anything else.
bool parse_size(const char* s, uint64_t* out) {
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || errno != 0 || *s == '-') return false;
  uint64_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1ULL << 10;
  if (*end == 'M' || *end == 'm') mult = 1ULL << 20;
  if (*end == 'G' || *end == 'g') mult = 1ULL << 30;
  if (mult != 1) ++end;
  if (*end != '\0' || v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

uint64_t env_size(const char* name, uint64_t fallback, bool suffixes) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  uint64_t out = 0;
  bool ok = parse_size(v, &out);
  if (ok && !suffixes) ok = std::strspn(v, "0123456789") == std::strlen(v);
  if (!ok) {
    std::fprintf(stderr, "libcuda.so.1 (stand-in): ignoring %s=%s (not a %s), using %llu\n",
                 name, v, suffixes ? "size like 512M" : "number",
                 static_cast<unsigned long long>(fallback));
    return fallback;
  }
  return out;
}

State* make_state() {
  auto* st = new State();  // never deleted: see fake_state.h
  uint64_t devices = env_size("LUMA_FAKE_DEVICES", kDefaultDevices, false);
  if (devices < 1 || devices > kMaxDevices) {
    std::fprintf(stderr, "libcuda.so.1 (stand-in): LUMA_FAKE_DEVICES must be 1..%d, using %d\n",
                 kMaxDevices, kDefaultDevices);
    devices = kDefaultDevices;
  }
  st->device_count = static_cast<int>(devices);
  st->env_capacity = env_size("LUMA_FAKE_CAPACITY", kDefaultCapacity, true);
  st->env_fail_every = env_size("LUMA_FAKE_FAIL_EVERY", 0, false);
  st->env_delay_us = env_size("LUMA_FAKE_DELAY_US", 0, false);
  st->env_capture_hold_us = env_size("LUMA_FAKE_CAPTURE_HOLD_US", 0, false);
  st->env_fail_events = env_size("LUMA_FAKE_FAIL_EVENTS", 0, false);
  st->env_lost_after = env_size("LUMA_FAKE_LOST_AFTER", 0, false);
  uint64_t version = env_size("LUMA_FAKE_DRIVER_VERSION", kDriverVersion, false);
  if (version < kOldestDriverVersion || version > kDriverVersion) {
    std::fprintf(stderr,
                 "libcuda.so.1 (stand-in): LUMA_FAKE_DRIVER_VERSION must be %d..%d, using %d\n",
                 kOldestDriverVersion, kDriverVersion, kDriverVersion);
    version = kDriverVersion;
  }
  st->env_driver_version = static_cast<int>(version);
  st->settings.driver_version = st->env_driver_version;
  st->settings.fail_events = st->env_fail_events;
  st->settings.lost_after = st->env_lost_after;
  st->settings.capacity = st->env_capacity;
  st->settings.fail_every = st->env_fail_every;
  st->settings.delay_us = st->env_delay_us;
  st->settings.capture_hold_us = st->env_capture_hold_us;
  st->load_pid = static_cast<int>(getpid());
  return st;
}

// CUDA cannot be used in a child forked after initialisation (the real driver refuses it
// too); here the stream workers do not exist in the child, so every call would hang.
void on_fork_child() {
  State& st = state();
  if (st.initialized.load()) st.forked_child = true;
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// True when `path` is the file, pipe or terminal of this process's fd 1 or 2.
bool is_own_output(const char* path) {
  struct stat target {};
  if (::stat(path, &target) != 0) return false;
  for (int fd : {1, 2}) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_dev == target.st_dev && st.st_ino == target.st_ino)
      return true;
  }
  return false;
}

// "%p" in the path becomes the pid; without it only the process that loaded the stand-in
// writes, so a forked child never overwrites its parent's report.
void write_counters_file() {
  const char* path = std::getenv("LUMA_FAKE_COUNTERS");
  if (path == nullptr || *path == '\0') return;
  State& st = state();
  std::string p(path);
  size_t at = p.find("%p");
  if (at == std::string::npos) {
    if (static_cast<int>(getpid()) != st.load_pid) return;
  } else {
    p.replace(at, 2, std::to_string(getpid()));
  }
  std::string json = "{\"devices\": [";
  char buf[512];
  for (int d = 0; d < st.device_count; ++d) {
    const DeviceCounters& c = st.counters[d];
    std::snprintf(buf, sizeof buf,
                  "%s\n  {\"device\": %d, \"mem_alloc_calls\": %llu, \"mem_free_calls\": %llu, "
                  "\"live_allocations\": %llu, \"live_bytes\": %llu, \"peak_bytes\": %llu, "
                  "\"failed_allocs\": %llu, \"device_peak_bytes\": %llu, "
                  "\"mem_create_calls\": %llu, \"mem_release_calls\": %llu}",
                  d == 0 ? "" : ",", d,
                  static_cast<unsigned long long>(c.alloc_calls.load()),
                  static_cast<unsigned long long>(c.free_calls.load()),
                  static_cast<unsigned long long>(c.live_allocations.load()),
                  static_cast<unsigned long long>(c.live_bytes.load()),
                  static_cast<unsigned long long>(c.peak_bytes.load()),
                  static_cast<unsigned long long>(c.failed_allocs.load()),
                  static_cast<unsigned long long>(c.device_peak_bytes.load()),
                  static_cast<unsigned long long>(c.mem_create_calls.load()),
                  static_cast<unsigned long long>(c.mem_release_calls.load()));
    json += buf;
  }
  // The calls whose number shows which fence design a run used (fake_call_cost.h).
  json += "\n], \"calls\": {";
  for (int i = 0; i < kCostedCallCount; ++i) {
    const auto call = static_cast<CostedCall>(i);
    std::snprintf(buf, sizeof buf, "%s\"%s\": %llu", i == 0 ? "" : ", ", costed_call_name(call),
                  static_cast<unsigned long long>(costed_calls(call)));
    json += buf;
  }
  // What the virtual memory calls still hold (fake_vmm.cpp): a program that gave back all
  // it mapped shows zeros.
  const VmmReport vmm = vmm_report();
  std::snprintf(buf, sizeof buf,
                "}, \"vmm\": {\"handles\": %llu, \"reservations\": %llu, \"mappings\": %llu, "
                "\"physical_bytes\": [",
                static_cast<unsigned long long>(vmm.handles),
                static_cast<unsigned long long>(vmm.reservations),
                static_cast<unsigned long long>(vmm.mappings));
  json += buf;
  for (int d = 0; d < st.device_count; ++d) {
    std::snprintf(buf, sizeof buf, "%s%llu", d == 0 ? "" : ", ",
                  static_cast<unsigned long long>(vmm.physical_bytes[d]));
    json += buf;
  }
  json += "]}}\n";
  // The path may name this process's own standard output or error (/dev/stdout, or the
  // file a shell redirected it to): reopening that with O_TRUNC would empty the file the
  // program is writing, and write from offset 0 over it. There the counters are appended,
  // after the program's own buffered output, so that they come last in a terminal, a pipe
  // and a file alike. Any other file is replaced.
  const bool own_output = is_own_output(p.c_str());
  if (own_output) std::fflush(nullptr);
  int fd = ::open(p.c_str(),
                  O_WRONLY | O_CREAT | O_CLOEXEC | (own_output ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) {
    std::snprintf(buf, sizeof buf, "libcuda.so.1 (stand-in): cannot write %s: %s\n",
                  p.c_str(), std::strerror(errno));
    write_all(2, buf, std::strlen(buf));
    return;
  }
  write_all(fd, json.data(), json.size());
  ::close(fd);
}

__attribute__((constructor)) void on_load() {
  state();
  pthread_atfork(nullptr, nullptr, on_fork_child);
}

__attribute__((destructor)) void on_unload() { write_counters_file(); }

}  // namespace

State& state() {
  static State* st = make_state();
  return *st;
}

bool event_call_fails() {
  State& st = state();
  uint64_t n = st.settings.fail_events.load();
  if (n == 0 || ++st.event_calls % n != 0) return false;
  ++st.injected_event_failures;
  return true;
}

bool device_lost() {
  State& st = state();
  if (st.lost.load()) return true;
  uint64_t after = st.settings.lost_after.load();
  if (after == 0 || ++st.device_calls <= after) return false;
  st.lost = true;
  return true;
}

}  // namespace luma::fake

using namespace luma::fake;

extern "C" {

int luma_fake_get_counters(int device, struct luma_fake_counters* out) {
  State& st = state();
  if (out == nullptr || device < 0 || device >= st.device_count) return -1;
  const DeviceCounters& c = st.counters[device];
  out->mem_alloc_calls = c.alloc_calls.load();
  out->mem_free_calls = c.free_calls.load();
  out->live_allocations = c.live_allocations.load();
  out->live_bytes = c.live_bytes.load();
  out->peak_bytes = c.peak_bytes.load();
  out->failed_allocs = c.failed_allocs.load();
  out->device_peak_bytes = c.device_peak_bytes.load();
  out->mem_create_calls = c.mem_create_calls.load();
  out->mem_release_calls = c.mem_release_calls.load();
  return 0;
}

int luma_fake_device_count(void) { return state().device_count; }

void luma_fake_set_capacity(uint64_t bytes) { state().settings.capacity = bytes; }

void luma_fake_set_fail_every(uint64_t n) {
  State& st = state();
  st.settings.fail_every = n;
  st.alloc_attempts = 0;
}

void luma_fake_set_delay_us(uint64_t us) { state().settings.delay_us = us; }
void luma_fake_set_capture_hold_us(uint64_t us) { state().settings.capture_hold_us = us; }
void luma_fake_set_alloc_hold_us(uint64_t us) { state().settings.alloc_hold_us = us; }
void luma_fake_set_ctx_destroy_hold_us(uint64_t us) { state().settings.ctx_destroy_hold_us = us; }
uint64_t luma_fake_destroyed_context_uses(void) { return state().destroyed_context_uses.load(); }

void luma_fake_set_gate_open(int open) {
  State& st = state();
  {
    std::lock_guard lock(st.gate_m);
    st.gate_open = open != 0;
  }
  st.gate_cv.notify_all();
}

void luma_fake_set_fail_events(uint64_t n) {
  State& st = state();
  st.settings.fail_events = n;
  st.event_calls = 0;
}

uint64_t luma_fake_injected_event_failures(void) {
  return state().injected_event_failures.load();
}

void luma_fake_set_lost_after(uint64_t n) {
  State& st = state();
  st.device_calls = 0;
  st.settings.lost_after = n;
}

void luma_fake_lose_device(void) { state().lost = true; }

int luma_fake_set_driver_version(int version) {
  if (version < kOldestDriverVersion || version > kDriverVersion) return -1;
  state().settings.driver_version = version;
  return 0;
}

void luma_fake_restore_device(void) {
  State& st = state();
  st.settings.lost_after = 0;
  st.device_calls = 0;
  st.lost = false;
}

void luma_fake_reset(void) {
  State& st = state();
  for (int d = 0; d < st.device_count; ++d) {
    DeviceCounters& c = st.counters[d];
    c.alloc_calls = 0;
    c.free_calls = 0;
    c.failed_allocs = 0;
    c.peak_bytes = c.live_bytes.load();
    c.mem_create_calls = 0;
    c.mem_release_calls = 0;
    c.device_peak_bytes = c.live_bytes.load() + vmm_physical_bytes(d);
  }
  st.settings.capacity = st.env_capacity;
  luma_fake_set_fail_every(st.env_fail_every);
  st.settings.delay_us = st.env_delay_us;
  st.settings.capture_hold_us = st.env_capture_hold_us;
  st.settings.alloc_hold_us = 0;
  st.settings.ctx_destroy_hold_us = 0;
  st.destroyed_context_uses = 0;
  luma_fake_set_fail_events(st.env_fail_events);
  st.injected_event_failures = 0;
  luma_fake_restore_device();
  luma_fake_set_lost_after(st.env_lost_after);
  luma_fake_set_gate_open(1);
  st.settings.driver_version = st.env_driver_version;
  reset_host_memory();
  reset_costed_calls();
}

}  // extern "C"
