// fake_device_queries.cpp - the device queries of the stand-in driver (a TEST DOUBLE):
// cuDeviceGetName, cuDeviceTotalMem_v2, cuDeviceGetAttribute, cuDeviceGetUuid(_v2),
// cuDeviceCanAccessPeer (the devices are one board's, each reaching every other). Every
// device imitates an NVIDIA H200 (SXM, compute capability 9.0, 132 multiprocessors) whose
// memory is the configured capacity (LUMA_FAKE_CAPACITY). Like the other context-free
// bookkeeping they keep working when the device is lost.
#include <algorithm>
#include <cstring>

#include "fake_state.h"

#define LUMA_FAKE_API __attribute__((visibility("default")))
#include "fake_driver_api.h"

namespace luma::fake {
namespace {

// The attributes real programs ask for, with an H200 SXM's values (as deviceQuery and
// cudaGetDeviceProperties report them). A valid attribute not listed answers 0.
#define LUMA_FAKE_DEVICE_ATTRIBUTES(X)                        \
  X(MAX_THREADS_PER_BLOCK, 1024)                              \
  X(MAX_BLOCK_DIM_X, 1024)                                    \
  X(MAX_BLOCK_DIM_Y, 1024)                                    \
  X(MAX_BLOCK_DIM_Z, 64)                                      \
  X(MAX_GRID_DIM_X, 2147483647)                               \
  X(MAX_GRID_DIM_Y, 65535)                                    \
  X(MAX_GRID_DIM_Z, 65535)                                    \
  X(MAX_SHARED_MEMORY_PER_BLOCK, 49152)                       \
  X(TOTAL_CONSTANT_MEMORY, 65536)                             \
  X(WARP_SIZE, 32)                                            \
  X(MAX_PITCH, 2147483647)                                    \
  X(MAX_REGISTERS_PER_BLOCK, 65536)                           \
  X(CLOCK_RATE, 1980000)                                      \
  X(TEXTURE_ALIGNMENT, 512)                                   \
  X(MULTIPROCESSOR_COUNT, 132)                                \
  X(KERNEL_EXEC_TIMEOUT, 0)                                   \
  X(INTEGRATED, 0)                                            \
  X(CAN_MAP_HOST_MEMORY, 1)                                   \
  X(COMPUTE_MODE, 0)                                          \
  X(CONCURRENT_KERNELS, 1)                                    \
  X(ECC_ENABLED, 1)                                           \
  X(TCC_DRIVER, 0)                                            \
  X(MEMORY_CLOCK_RATE, 2619000)                               \
  X(GLOBAL_MEMORY_BUS_WIDTH, 6144)                            \
  X(L2_CACHE_SIZE, 52428800)                                  \
  X(MAX_THREADS_PER_MULTIPROCESSOR, 2048)                     \
  X(ASYNC_ENGINE_COUNT, 3)                                    \
  X(UNIFIED_ADDRESSING, 1)                                    \
  X(PCI_DOMAIN_ID, 0)                                         \
  X(COMPUTE_CAPABILITY_MAJOR, 9)                              \
  X(COMPUTE_CAPABILITY_MINOR, 0)                              \
  X(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472)             \
  X(MAX_REGISTERS_PER_MULTIPROCESSOR, 65536)                  \
  X(MANAGED_MEMORY, 1)                                        \
  X(MULTI_GPU_BOARD, 0)                                       \
  X(PAGEABLE_MEMORY_ACCESS, 0)                                \
  X(CONCURRENT_MANAGED_ACCESS, 1)                             \
  X(COOPERATIVE_LAUNCH, 1)                                    \
  X(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448)                \
  X(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1)                   \
  X(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1)           \
  X(MEMORY_POOLS_SUPPORTED, 1)                                \
  X(GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 1)               \
  X(GPU_DIRECT_RDMA_SUPPORTED, 1)                             \
  X(IPC_EVENT_SUPPORTED, 1)

struct AttributeValue {
  CUdevice_attribute attribute;
  int value;
};

#define LUMA_FAKE_ATTRIBUTE_ROW(name, v) {CU_DEVICE_ATTRIBUTE_##name, v},
const AttributeValue kAttributes[] = {LUMA_FAKE_DEVICE_ATTRIBUTES(LUMA_FAKE_ATTRIBUTE_ROW)};
#undef LUMA_FAKE_ATTRIBUTE_ROW

inline constexpr char kDeviceName[] = "NVIDIA H200 (luma stand-in)";

bool valid_device(CUdevice dev) { return dev >= 0 && dev < state().device_count; }

}  // namespace
}  // namespace luma::fake

using namespace luma::fake;

extern "C" {

// Copies at most len - 1 characters and always terminates the string.
CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  size_t n = std::min(sizeof kDeviceName - 1, static_cast<size_t>(len) - 1);
  std::memcpy(name, kDeviceName, n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = state().settings.capacity.load();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  if (pi == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pi = 0;
  for (const AttributeValue& a : kAttributes) {
    if (a.attribute == attrib) *pi = a.value;
  }
  if (attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) *pi = 0x18 + 0x10 * dev;  // one bus per GPU
  return CUDA_SUCCESS;
}

// A stable UUID per device: the same in every process and run, different per device.
CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (CUresult r = ready_host()) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  static constexpr unsigned char kBase[16] = {0x4c, 0x55, 0x4d, 0x41, 0x2d, 0x46, 0x41, 0x4b,
                                              0x45, 0x2d, 0x48, 0x32, 0x30, 0x30, 0x00, 0x00};
  std::memcpy(uuid->bytes, kBase, sizeof kBase);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

// The stand-in's devices are the GPUs of one HGX H200 board, where NVSwitch connects every
// GPU to every other: each can access each other's memory. A device is not its own peer.
CUresult cuDeviceCanAccessPeer(int* can_access, CUdevice dev, CUdevice peer) {
  if (CUresult r = ready_host()) return r;
  if (can_access == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can_access = dev != peer ? 1 : 0;
  return CUDA_SUCCESS;
}

}  // extern "C"
