// run_identity.cpp - see run_identity.h.
#include "observe/run_identity.h"

#include <errno.h>

#include <cstdlib>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace luma::shim {

std::string read_proc_file(const char* path, std::size_t max_bytes) {
  std::string out;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() >= max_bytes) break;
  }
  ::close(fd);
  return out;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

ProcessNames process_names() {
  ProcessNames n;
  n.pid = static_cast<long>(getpid());
  n.host = host_name();
  n.rank = core::rank_from([](const char* name) { return std::getenv(name); });
  n.exe = program_invocation_short_name;
  return n;
}

std::vector<std::string> process_command_line() {
  // A command line is bounded by the kernel's ARG_MAX (a few MiB at most).
  constexpr std::size_t kMaxCmdlineBytes = 16u << 20;
  const std::string cmdline = read_proc_file("/proc/self/cmdline", kMaxCmdlineBytes);
  std::vector<std::string> args;
  std::size_t start = 0;
  while (start < cmdline.size()) {
    std::size_t end = cmdline.find('\0', start);
    if (end == std::string::npos) end = cmdline.size();
    args.push_back(cmdline.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

std::vector<core::TraceDevice> driver_devices(const RealDriver& d) {
  // More devices than this in one node does not exist; the trace header holds them all.
  constexpr int kMaxDevices = 64;
  std::vector<core::TraceDevice> devices;
  int count = 0;
  if (d.device_get_count == nullptr || d.device_get_count(&count) != CUDA_SUCCESS) return devices;
  // The current device's total from cuMemGetInfo where cuDeviceTotalMem is missing.
  CUdevice current = -1;
  if (d.ctx_get_device != nullptr && d.ctx_get_device(&current) != CUDA_SUCCESS) current = -1;
  for (int i = 0; i < count && i < kMaxDevices; ++i) {
    core::TraceDevice dev;
    dev.index = static_cast<std::uint32_t>(i);
    CUdevice handle = i;
    if (d.device_get != nullptr && d.device_get(&handle, i) != CUDA_SUCCESS) handle = i;
    char name[256] = {};
    if (d.device_get_name != nullptr &&
        d.device_get_name(name, sizeof name - 1, handle) == CUDA_SUCCESS)
      dev.name = name;
    else
      dev.name = "device " + std::to_string(i);
    std::size_t total = 0;
    if (d.device_total_mem != nullptr && d.device_total_mem(&total, handle) == CUDA_SUCCESS) {
      dev.total_bytes = total;
    } else if (handle == current && d.mem_get_info != nullptr) {
      std::size_t free = 0;
      if (d.mem_get_info(&free, &total) == CUDA_SUCCESS) dev.total_bytes = total;
    }
    devices.push_back(std::move(dev));
  }
  return devices;
}

}  // namespace luma::shim
