// nvtx_memory.h - luma's memory described to tools through the NVTX memory API, so that
// compute-sanitizer's memcheck, and any other tool that reads it, sees the bounds of every
// block luma hands out: without it an overflow past a block lands in luma's segment, which
// the tool takes for one valid allocation. Each segment is a sub-allocator heap
// (nvtxMemHeapRegister, NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR), each block handed to the
// program a region of its requested bytes (nvtxMemRegionsRegister), unregistered at the
// program's free; a segment that goes back to the driver (or dies with its context) is
// unregistered with its heap. An expandable segment is one heap over its whole address
// range, registered when the range is reserved and unregistered when it is freed (told by
// the DriverDevice): its segment events are pages mapped and unmapped, and a block may span
// pages, so a heap per segment event could not hold it.
//
// Cost: none without a tool. NVTX finds a tool in exactly two ways (nvtxInitInjection in
// nvtx3's nvtxInit.h and nvtxExtInit.h): NVTX_INJECTION64_PATH, or a pre-injected library
// exporting InitializeInjectionNvtx2Preinject / InitializeInjectionNvtxExtensionPreinject;
// luma looks for both once, and only then puts the sink in front of an allocator's events.
// Built when the CUDA toolkit's NVTX v3 headers are found (header-only; LUMA_HAVE_NVTX).
#pragma once

#include "base/event.h"
#include "device/driver_device.h"

namespace luma::shim {

// Whether a tool may read NVTX here (decided once, at the first call; no NVTX call made).
bool nvtx_tool_present() noexcept;

// A sink that describes an allocator's memory to NVTX, then hands each event to `next`
// (nullptr: none); it watches `device`'s address ranges (set_range_observer). nullptr when
// NVTX is not built in, no tool is present, or there is no host memory for it: the caller
// then uses `next` alone.
core::EventSink* nvtx_memory_sink(core::EventSink* next, DriverDevice& device) noexcept;

}  // namespace luma::shim
