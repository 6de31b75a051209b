// fake_vmm.cpp - stream-ordered memory pools and the virtual memory management calls of the
// stand-in libcuda.so.1 (a TEST DOUBLE), enough for programs that allocate with
// cuMemAllocFromPoolAsync or with cuMemCreate + cuMemAddressReserve + cuMemMap +
// cuMemSetAccess, and for luma's forwarding of those calls to be tested. The rules and
// error codes follow the CUDA Driver API documentation (README.md names each source).
//
// Pools: CUmemoryPool handles are entries of a deque (stable, never reused); each device has
// a default pool, made on first use. cuMemAllocFromPoolAsync allocates stream-ordered memory
// as cuMemAllocAsync does (the stand-in keeps no pool-private memory).
// VMM: a cuMemCreate handle is a sparse memfd of the requested size; cuMemAddressReserve is
// an inaccessible anonymous mapping; cuMemMap maps the memfd over part of a reservation,
// still inaccessible (as on a GPU, where access must be granted); cuMemSetAccess mprotects
// it (each mapping keeps the access of every device; the host pages get the widest);
// cuMemUnmap puts the inaccessible reservation back. Mapped ranges are registered as
// allocations (MemKind::kMapped) so memsets and copies accept them, across adjacent mappings
// too. The calls that change memory are "potentially unsafe" during a stream capture
// (fake_capture.h), and each call is counted (fake_call_cost.h).
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "fake_call_cost.h"
#include "fake_capture.h"
#include "fake_state.h"

#define LUMA_FAKE_API __attribute__((visibility("default")))
#include "fake_driver_api.h"

namespace luma::fake {
namespace {

// What cuMemGetAllocationGranularity reports, minimum and recommended: 2 MiB, as every
// current NVIDIA GPU does (the large page of the GPU's MMU).
inline constexpr size_t kGranularity = size_t{2} << 20;

struct Pool {
  int device = 0;
  bool is_default = false;
  bool alive = true;
};

struct Physical {  // a cuMemCreate allocation
  int fd = -1;
  size_t size = 0;
  int device = 0;
  int mappings = 0;       // live cuMemMap mappings of it
  bool released = false;  // cuMemRelease called: freed when the last mapping goes
};

struct Mapping {
  size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUmemAccess_flags access[kMaxDevices] = {};  // cuMemSetAccess, per device (none at first)
};

struct Vmm {
  std::mutex m;
  std::deque<Pool> pools;  // handles are addresses of entries: never freed
  Pool* default_pools[kMaxDevices] = {};
  std::map<CUmemGenericAllocationHandle, Physical> physical;
  CUmemGenericAllocationHandle next_handle = 1;
  std::atomic<uint64_t> physical_bytes[kMaxDevices] = {};  // read without m (vmm_physical_bytes)
  std::map<uintptr_t, size_t> reservations;  // start -> size
  std::map<uintptr_t, Mapping> mappings;     // start -> mapping
};

Vmm& vmm() {
  static Vmm* v = new Vmm;  // never destroyed (see fake_state.h)
  return *v;
}

bool valid_device(int d) { return d >= 0 && d < state().device_count; }

// A live pool of this driver, or nullptr (caller holds vmm().m).
Pool* find_pool(CUmemoryPool h) {
  for (Pool& p : vmm().pools)
    if (reinterpret_cast<CUmemoryPool>(&p) == h) return p.alive ? &p : nullptr;
  return nullptr;
}

Pool* default_pool(int device) {  // caller holds vmm().m
  Vmm& v = vmm();
  if (v.default_pools[device] == nullptr) {
    v.pools.push_back(Pool{device, true, true});
    v.default_pools[device] = &v.pools.back();
  }
  return v.default_pools[device];
}

// A CUmemAllocationProp the stand-in can serve: pinned device memory of a device it has.
bool valid_prop(const CUmemAllocationProp* prop) {
  return prop != nullptr && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && valid_device(prop->location.id);
}

bool multiple(size_t n) { return n % kGranularity == 0; }

// The reservation holding [p, p + n), or end() (caller holds vmm().m).
std::map<uintptr_t, size_t>::iterator reservation_of(uintptr_t p, size_t n) {
  auto& r = vmm().reservations;
  auto it = r.upper_bound(p);
  if (it == r.begin()) return r.end();
  --it;
  if (p - it->first >= it->second || n > it->second - (p - it->first)) return r.end();
  return it;
}

// The mappings that make up exactly [p, p + n), contiguous, or an empty list (caller holds
// vmm().m).
std::vector<std::map<uintptr_t, Mapping>::iterator> mappings_covering(uintptr_t p, size_t n) {
  std::vector<std::map<uintptr_t, Mapping>::iterator> out;
  auto& ms = vmm().mappings;
  uintptr_t at = p;
  for (auto it = ms.find(p); it != ms.end() && it->first == at && at < p + n; ++it) {
    out.push_back(it);
    at += it->second.size;
  }
  if (at != p + n) out.clear();
  return out;
}

// Frees a released allocation's memory once nothing maps it (caller holds vmm().m).
void drop_if_unused(std::map<CUmemGenericAllocationHandle, Physical>::iterator it) {
  Vmm& v = vmm();
  if (!it->second.released || it->second.mappings != 0) return;
  ::close(it->second.fd);
  v.physical_bytes[it->second.device] -= it->second.size;
  v.physical.erase(it);
}

// Puts the inaccessible reservation back over [p, p + n).
void unmap_pages(uintptr_t p, size_t n) {
  mmap(reinterpret_cast<void*>(p), n, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

// Removes one mapping: its registered allocation, its pages, its hold on the handle.
void unmap_one(std::map<uintptr_t, Mapping>::iterator it) {
  Vmm& v = vmm();
  Allocation a;
  (void)unregister(it->first, &a);
  unmap_pages(it->first, it->second.size);
  auto ph = v.physical.find(it->second.handle);
  if (ph != v.physical.end()) {
    --ph->second.mappings;
    drop_if_unused(ph);
  }
  v.mappings.erase(it);
}

CUresult alloc_from_pool(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream stream,
                         bool ptsz) {
  if (CUresult r = ready()) return r;
  {
    std::lock_guard lock(vmm().m);
    Pool* p = find_pool(pool);
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx = current();
    // The real driver may allocate from another device's pool; the stand-in's allocations
    // always come from the current context's device, so it says it cannot.
    if (ctx != nullptr && ctx->device != p->device) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return ptsz ? cuMemAllocAsync_ptsz(dptr, size, stream) : cuMemAllocAsync(dptr, size, stream);
}

}  // namespace
}  // namespace luma::fake

using namespace luma::fake;

// ---- pools ------------------------------------------------------------------------------

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  if (CUresult r = ready()) return r;
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(vmm().m);
  *pool_out = reinterpret_cast<CUmemoryPool>(default_pool(dev));
  return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (CUresult r = ready()) return r;
  if (pool == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  // Host-memory pools exist (CU_MEM_LOCATION_TYPE_HOST, CUDA 12.x) but are not imitated.
  if (props->location.type == CU_MEM_LOCATION_TYPE_HOST) return CUDA_ERROR_NOT_SUPPORTED;
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(props->location.id))
    return CUDA_ERROR_INVALID_VALUE;
  Vmm& v = vmm();
  std::lock_guard lock(v.m);
  v.pools.push_back(Pool{props->location.id, false, true});
  *pool = reinterpret_cast<CUmemoryPool>(&v.pools.back());
  return CUDA_SUCCESS;
}

// "A device's default memory pool cannot be destroyed"; memory still allocated from a
// destroyed pool stays valid until freed (the stand-in's needs nothing more).
CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (CUresult r = ready()) return r;
  std::lock_guard lock(vmm().m);
  Pool* p = find_pool(pool);
  if (p == nullptr || p->is_default) return CUDA_ERROR_INVALID_VALUE;
  p->alive = false;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream, false);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream, true);
}

// ---- virtual memory management ----------------------------------------------------------

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  if (CUresult r = ready()) return r;
  if (granularity == nullptr || !valid_prop(prop)) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  CallCost counted(CostedCall::mem_create);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_unsafe_call()) return r;
  // "flags: for future use, must be zero"; the size must be a multiple of the minimum
  // granularity.
  if (handle == nullptr || flags != 0 || !valid_prop(prop) || size == 0 || !multiple(size))
    return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  Vmm& v = vmm();
  const int device = prop->location.id;
  std::lock_guard lock(v.m);
  const uint64_t capacity = st.settings.capacity.load();
  if (size > capacity ||
      st.counters[device].live_bytes.load() + v.physical_bytes[device].load() + size > capacity)
    return CUDA_ERROR_OUT_OF_MEMORY;
  const int fd = memfd_create("luma-fake-vmm", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUmemGenericAllocationHandle h = v.next_handle++;
  v.physical[h] = Physical{fd, size, device, 0, false};
  v.physical_bytes[device] += size;
  ++st.counters[device].mem_create_calls;
  note_device_bytes(device);
  *handle = h;
  return CUDA_SUCCESS;
}

// "The memory allocation will be freed when all outstanding mappings to the memory are
// unmapped and when all outstanding references to the handle ... have also been released."
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  CallCost counted(CostedCall::mem_release);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_unsafe_call()) return r;
  std::lock_guard lock(vmm().m);
  auto it = vmm().physical.find(handle);
  if (it == vmm().physical.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  ++state().counters[it->second.device].mem_release_calls;
  drop_if_unused(it);  // may erase it
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr,
                             unsigned long long flags) {
  CallCost counted(CostedCall::mem_address_reserve);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_unsafe_call()) return r;
  if (ptr == nullptr || flags != 0 || size == 0 || !multiple(size)) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kGranularity;
  if ((alignment & (alignment - 1)) != 0 || !multiple(alignment)) return CUDA_ERROR_INVALID_VALUE;
  // The address hint (addr) is only a hint: the stand-in lets the kernel choose.
  void* raw = mmap(nullptr, size + alignment, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + alignment - 1) / alignment * alignment;
  if (start > base) munmap(raw, start - base);
  if (const uintptr_t tail = base + size + alignment - (start + size); tail > 0)
    munmap(reinterpret_cast<void*>(start + size), tail);
  std::lock_guard lock(vmm().m);
  vmm().reservations[start] = size;
  *ptr = start;
  return CUDA_SUCCESS;
}

// "The size must match what was given to memAddressReserve and the ptr given must match
// what was returned from memAddressReserve." Mappings still inside are dropped with it.
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CallCost counted(CostedCall::mem_address_free);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_unsafe_call()) return r;
  Vmm& v = vmm();
  std::lock_guard lock(v.m);
  auto it = v.reservations.find(ptr);
  if (it == v.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  for (auto m = v.mappings.lower_bound(ptr); m != v.mappings.end() && m->first < ptr + size;)
    unmap_one(m++);
  munmap(reinterpret_cast<void*>(ptr), size);
  v.reservations.erase(it);
  return CUDA_SUCCESS;
}

// The range lies inside one reservation, granularity-aligned, unmapped; size lies inside the
// allocation; flags must be zero; the offset too (cuda.h of CUDA 13.0: "offset - Offset into
// the memory represented by handle from which to start mapping - Note: currently must be
// zero"), so a piece of an allocation cannot be mapped on its own.
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  CallCost counted(CostedCall::mem_map);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_unsafe_call()) return r;
  if (flags != 0 || offset != 0 || size == 0 || !multiple(size) || !multiple(ptr))
    return CUDA_ERROR_INVALID_VALUE;
  Vmm& v = vmm();
  std::lock_guard lock(v.m);
  auto ph = v.physical.find(handle);
  if (ph == v.physical.end() || ph->second.released) return CUDA_ERROR_INVALID_VALUE;
  if (offset > ph->second.size || size > ph->second.size - offset) return CUDA_ERROR_INVALID_VALUE;
  if (reservation_of(ptr, size) == v.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
  auto next = v.mappings.lower_bound(ptr);
  if (next != v.mappings.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != v.mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                 ph->second.fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ++ph->second.mappings;
  v.mappings[ptr] = Mapping{size, handle};
  Allocation a;
  a.size = size;
  a.device = ph->second.device;
  a.ctx = nullptr;
  a.kind = MemKind::kMapped;
  State& st = state();
  std::lock_guard mem_lock(st.mem_m);
  register_allocation(st, ptr, a);
  return CUDA_SUCCESS;
}

// "The range must be the entire contiguous address range that was mapped to": whole
// mappings only, one or several adjacent ones.
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CallCost counted(CostedCall::mem_unmap);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_unsafe_call()) return r;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(vmm().m);
  auto covering = mappings_covering(ptr, size);
  if (covering.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (auto it : covering) unmap_one(it);
  return CUDA_SUCCESS;
}

// Every location must be a device the stand-in has and the flags one of cuda.h's; the range
// must be whole mappings. Each mapping keeps what each device was granted (a later call for
// another device adds to it); the host address is the device address, so the pages get the
// widest access any device has.
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  CallCost counted(CostedCall::mem_set_access);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_unsafe_call()) return r;
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(desc[i].location.id))
      return CUDA_ERROR_INVALID_VALUE;
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(vmm().m);
  auto covering = mappings_covering(ptr, size);
  if (covering.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (auto it : covering) {
    Mapping& m = it->second;
    for (size_t i = 0; i < count; ++i) m.access[desc[i].location.id] = desc[i].flags;
    int prot = PROT_NONE;
    for (CUmemAccess_flags f : m.access) {
      if (f == CU_MEM_ACCESS_FLAGS_PROT_READ) prot |= PROT_READ;
      if (f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot |= PROT_READ | PROT_WRITE;
    }
    if (mprotect(reinterpret_cast<void*>(it->first), m.size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// What `location` may do at ptr: the flags cuMemSetAccess gave that device (none before).
// ptr must lie in a mapping and location be a device, else CUDA_ERROR_INVALID_VALUE.
CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (CUresult r = ready()) return r;
  if (flags == nullptr || location == nullptr || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !valid_device(location->id))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(vmm().m);
  auto& ms = vmm().mappings;
  auto it = ms.upper_bound(ptr);
  if (it == ms.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (ptr - it->first >= it->second.size) return CUDA_ERROR_INVALID_VALUE;
  *flags = static_cast<unsigned long long>(it->second.access[location->id]);
  return CUDA_SUCCESS;
}

namespace luma::fake {

uint64_t vmm_physical_bytes(int device) { return vmm().physical_bytes[device].load(); }

VmmReport vmm_report() {
  Vmm& v = vmm();
  std::lock_guard lock(v.m);
  VmmReport r;
  for (int d = 0; d < kMaxDevices; ++d) r.physical_bytes[d] = v.physical_bytes[d].load();
  r.handles = v.physical.size();
  r.reservations = v.reservations.size();
  r.mappings = v.mappings.size();
  return r;
}

}  // namespace luma::fake
